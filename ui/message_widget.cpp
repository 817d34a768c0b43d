#include "ui/message_widget.h"

#include <QApplication>
#include <QClipboard>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QTextDocument>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/code_highlighter.h"
#include "ui/theme.h"

namespace tandem::ui {

QVector<MessageSegment> split_code_blocks(const QString& markdown) {
  QVector<MessageSegment> out;
  bool in_code = false;
  QString language;
  QStringList lines;
  auto flush = [&](bool keep_empty) {
    const QString text = lines.join(QLatin1Char('\n'));
    if (keep_empty || !text.trimmed().isEmpty()) out.push_back({in_code, language, text});
    lines.clear();
  };
  for (const QString& line : markdown.split(QLatin1Char('\n'))) {
    if (line.trimmed().startsWith(QLatin1String("```"))) {
      flush(in_code);  // a closed code block stays even when empty
      in_code = !in_code;
      language = in_code ? line.trimmed().mid(3).trimmed() : QString();
      continue;
    }
    lines << line;
  }
  flush(in_code);
  return out;
}

CodeBlockWidget::CodeBlockWidget(QWidget* parent) : QFrame(parent) {
  setObjectName(QStringLiteral("codeBlock"));
  setStyleSheet(
      QStringLiteral("QFrame#codeBlock { background: #1f2430; border-radius: 6px; }"
                     "QLabel { color: #aab3c0; } QPlainTextEdit { background: #1f2430; color: "
                     "#e6e9ef; border: none; }"
                     "QPushButton { background: #2c3340; color: #e6e9ef; border: 1px solid "
                     "#3b4454; padding: 2px 10px; }"));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(10, 6, 10, 8);
  v->setSpacing(4);
  auto* header = new QHBoxLayout;
  language_ = new QLabel(this);
  copy_ = new QPushButton(tr("Copy"), this);
  copy_->setCursor(Qt::PointingHandCursor);
  header->addWidget(language_, 1);
  header->addWidget(copy_);
  v->addLayout(header);
  text_ = new QPlainTextEdit(this);
  highlighter_ = new CodeHighlighter(text_->document());
  text_->setReadOnly(true);
  text_->setLineWrapMode(QPlainTextEdit::NoWrap);
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  text_->setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  v->addWidget(text_);
  connect(copy_, &QPushButton::clicked, this, [this] {
    QApplication::clipboard()->setText(text_->toPlainText());
    copy_->setText(tr("Copied"));
    QTimer::singleShot(1500, copy_, [b = copy_] { b->setText(QObject::tr("Copy")); });
  });
}

void CodeBlockWidget::setCode(const QString& language, const QString& code) {
  language_->setText(language.isEmpty() ? tr("code") : language);
  if (highlighter_->language() != language.trimmed().toLower()) highlighter_->setLanguage(language);
  if (text_->toPlainText() != code) text_->setPlainText(code);
  const int lines = std::min(30, static_cast<int>(code.count(QLatin1Char('\n'))) + 1);
  const int longest = [&] {
    int widest = 0;
    for (const QString& line : code.split(QLatin1Char('\n')))
      widest = std::max(widest, QFontMetrics(text_->font()).horizontalAdvance(line));
    return widest;
  }();
  // Room for every line (up to 30), and for the horizontal scroll bar when a line is too long.
  const bool scrolls = longest + 20 > text_->viewport()->width();
  text_->setFixedHeight(QFontMetrics(text_->font()).lineSpacing() * lines +
                        2 * static_cast<int>(text_->document()->documentMargin()) +
                        2 * text_->frameWidth() +
                        (scrolls ? text_->horizontalScrollBar()->sizeHint().height() : 0));
}

QString CodeBlockWidget::code() const {
  return text_->toPlainText();
}

MessageWidget::MessageWidget(int index, const QString& role, const QString& speaker,
                             QWidget* parent)
    : QFrame(parent), index_(index), role_(role) {
  const bool user = role == QLatin1String("user");
  setObjectName(user ? QStringLiteral("userMessage") : QStringLiteral("assistantMessage"));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(14, 10, 14, 10);
  v->setSpacing(6);

  auto* header = new QHBoxLayout;
  auto* who = new QLabel(QStringLiteral("<b>%1</b>").arg(speaker.toHtmlEscaped()), this);
  header->addWidget(who, 1);
  auto* copy = new QToolButton(this);
  copy->setText(tr("Copy"));
  copy->setAutoRaise(true);
  connect(copy, &QToolButton::clicked, this,
          [this] { QApplication::clipboard()->setText(content_); });
  header->addWidget(copy);
  if (user) {
    auto* edit = new QToolButton(this);
    edit->setText(tr("Edit"));
    edit->setAutoRaise(true);
    connect(edit, &QToolButton::clicked, this, [this] { emit editRequested(index_); });
    header->addWidget(edit);
  } else {
    regenerate_ = new QToolButton(this);
    regenerate_->setText(tr("Regenerate"));
    regenerate_->setAutoRaise(true);
    regenerate_->setObjectName(QStringLiteral("regenerate"));
    regenerate_->setVisible(false);
    connect(regenerate_, &QToolButton::clicked, this, &MessageWidget::regenerateRequested);
    header->addWidget(regenerate_);
  }
  v->addLayout(header);

  thinking_toggle_ = new QToolButton(this);
  thinking_toggle_->setCheckable(true);
  thinking_toggle_->setAutoRaise(true);
  thinking_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  thinking_toggle_->setArrowType(Qt::RightArrow);
  thinking_toggle_->setVisible(false);
  thinking_text_ = new QLabel(this);
  thinking_text_->setWordWrap(true);
  thinking_text_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  thinking_text_->setVisible(false);
  connect(thinking_toggle_, &QToolButton::toggled, this, [this](bool on) {
    thinking_text_->setVisible(on);
    thinking_toggle_->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
  });
  v->addWidget(thinking_toggle_, 0, Qt::AlignLeft);
  v->addWidget(thinking_text_);

  body_ = new QVBoxLayout;
  body_->setSpacing(8);
  v->addLayout(body_);
  stopped_ = new QLabel(tr("Stopped"), this);
  stopped_->setObjectName(QStringLiteral("stoppedMark"));
  stopped_->setToolTip(tr("You stopped this reply before the model finished it."));
  stopped_->setVisible(false);
  stats_ = new QLabel(this);
  stats_->setObjectName(QStringLiteral("replyStats"));
  stats_->setVisible(false);
  auto* footer = new QHBoxLayout;
  footer->addWidget(stopped_);
  footer->addStretch(1);
  footer->addWidget(stats_);
  v->addLayout(footer);
  theme::follow(this, [this] { restyle(); });
}

void MessageWidget::restyle() {
  const theme::Colors& c = theme::colors();
  base_style_ = role_ == QLatin1String("user")
                    ? QStringLiteral("QFrame#userMessage { background: %1; border-radius: 10px; }")
                          .arg(c.user_bubble)
                    : QStringLiteral(
                          "QFrame#assistantMessage { background: %1; border: 1px "
                          "solid %2; border-radius: 10px; }")
                          .arg(c.surface, c.border);
  setStyleSheet(highlighted_ ? base_style_ + highlight_style() : base_style_);
  thinking_text_->setStyleSheet(
      QStringLiteral("color: %1; border-left: 3px solid %2; padding-left: 8px;")
          .arg(c.muted_text, c.border));
  stopped_->setStyleSheet(QStringLiteral("color: %1; font-style: italic;").arg(c.muted_text));
  stats_->setStyleSheet(QStringLiteral("color: %1; font-size: 8pt;").arg(c.muted_text));
}

QString MessageWidget::highlight_style() const {
  return QStringLiteral(" QFrame#%1 { border: 2px solid #f59e0b; }").arg(objectName());
}

void MessageWidget::setHighlighted(bool on) {
  if (on == highlighted_) return;
  highlighted_ = on;
  setStyleSheet(on ? base_style_ + highlight_style() : base_style_);
}

void MessageWidget::setStats(qint64 tokens, double tokens_per_s) {
  if (tokens <= 0) {
    stats_->setVisible(false);
    return;
  }
  QString text = tokens == 1 ? tr("1 token") : tr("%1 tokens").arg(tokens);
  if (tokens >= 8 && tokens_per_s > 0)
    text += tr(" · %1 tokens/s").arg(tokens_per_s, 0, 'f', tokens_per_s < 100 ? 1 : 0);
  stats_->setText(text);
  stats_->setVisible(true);
}

QString MessageWidget::statsText() const {
  return stats_->isHidden() ? QString() : stats_->text();
}

void MessageWidget::setStopped(bool stopped) {
  stopped_->setVisible(stopped);
}

bool MessageWidget::stopped() const {
  return !stopped_->isHidden();
}

void MessageWidget::setRegenerateVisible(bool visible) {
  if (regenerate_) regenerate_->setVisible(visible);
}

bool MessageWidget::thinkingExpanded() const {
  return thinking_toggle_->isChecked();
}

QString MessageWidget::thinkingSummary() const {
  return thinking_toggle_->text();
}

void MessageWidget::setContent(const QString& content, const QString& thinking, bool streaming) {
  const bool changed = content != content_ || streaming != streaming_;
  content_ = content;
  streaming_ = streaming;
  if (thinking != thinking_ || streaming) {
    thinking_ = thinking;
    const QString trimmed = thinking.trimmed();
    thinking_toggle_->setVisible(!trimmed.isEmpty());
    const int words = static_cast<int>(
        trimmed.split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts).size());
    thinking_toggle_->setText(streaming && content.isEmpty()
                                  ? tr("Thinking… (%n words)", nullptr, words)
                                  : tr("Thought for %n words", nullptr, words));
    thinking_text_->setText(trimmed);
  }
  if (changed) rebuildBody();
}

void MessageWidget::rebuildBody() {
  const QString text =
      content_.isEmpty() && streaming_ && thinking_.isEmpty() ? QStringLiteral("…") : content_;
  const QVector<MessageSegment> segments = split_code_blocks(text);
  // Reuse the widgets of unchanged kinds so streaming does not flicker.
  bool same_shape = segments.size() == shown_.size();
  for (int i = 0; same_shape && i < segments.size(); ++i)
    same_shape = segments[i].code == shown_[i].code;
  if (!same_shape) {
    for (QWidget* w : segments_) w->deleteLater();
    segments_.clear();
    for (const MessageSegment& s : segments) {
      QWidget* w;
      if (s.code) {
        w = new CodeBlockWidget(this);
      } else {
        auto* label = new QLabel(this);
        label->setWordWrap(true);
        label->setTextFormat(role_ == QLatin1String("user") ? Qt::PlainText : Qt::MarkdownText);
        label->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
        label->setOpenExternalLinks(true);
        w = label;
      }
      body_->addWidget(w);
      segments_.push_back(w);
    }
  }
  for (int i = 0; i < segments.size(); ++i) {
    if (segments[i].code) {
      static_cast<CodeBlockWidget*>(segments_[i])->setCode(segments[i].language, segments[i].text);
    } else {
      static_cast<QLabel*>(segments_[i])->setText(segments[i].text);
    }
  }
  shown_ = segments;
}

}  // namespace tandem::ui
