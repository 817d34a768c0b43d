#include "ui/chat_page.h"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMenu>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QShortcut>
#include <QSignalBlocker>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWidgetAction>

#include "ui/conversation/export.h"
#include "ui/eliding_label.h"
#include "ui/main_window.h"
#include "ui/message_widget.h"
#include "ui/models_page.h"
#include "ui/theme.h"

namespace tandem::ui {
namespace {

enum StackPage { kNoModel = 0, kConversation = 1 };

// A conversation's title from its first message: the words outside code blocks, without a
// heading's marks (a title of "Fix this ```python def f(…" says less than "Fix this") or the
// backticks of code written inline; a message that is all code is named by its code, without
// the fences.
QString titleFrom(const QString& text) {
  QString prose, code;
  bool in_code = false;
  for (const QString& line : text.split(QLatin1Char('\n'))) {
    // A fence is a line of three backticks or more and an info string without any (as
    // CommonMark has it): "```print(1)```" is code written inline, not a fence.
    const QString trimmed = line.trimmed();
    if (trimmed.startsWith(QLatin1String("```"))) {
      qsizetype after = 0;
      while (after < trimmed.size() && trimmed[after] == QLatin1Char('`')) ++after;
      if (!trimmed.mid(after).contains(QLatin1Char('`'))) {
        in_code = !in_code;
        continue;
      }
    }
    (in_code ? code : prose) += line + QLatin1Char(' ');
  }
  static const QRegularExpression ticks(QStringLiteral("`+"));
  QString t = prose.remove(ticks).simplified();
  static const QRegularExpression heading(QStringLiteral("^#+\\s+"));
  t.remove(heading);
  if (t.isEmpty()) t = code.simplified();
  if (t.size() > 48) t = t.left(47) + QStringLiteral("…");
  return t.isEmpty() ? QObject::tr("New chat") : t;
}

}  // namespace

ChatPage::ChatPage(EngineHost& engine, ConversationStore& store, QWidget* parent)
    : QWidget(parent), engine_(engine), store_(store) {
  setObjectName(QStringLiteral("chatPage"));
  setAttribute(Qt::WA_StyledBackground);
  list_model_ = new ConversationListModel(store_, this);
  filter_ = new QSortFilterProxyModel(this);
  filter_->setSourceModel(list_model_);
  filter_->setFilterCaseSensitivity(Qt::CaseInsensitive);

  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(0);
  row->addWidget(buildConversationList());
  stack_ = new QStackedWidget(this);
  stack_->addWidget(buildNoModelPage());
  stack_->addWidget(buildChatArea());
  row->addWidget(stack_, 1);

  render_timer_ = new QTimer(this);
  render_timer_->setSingleShot(true);
  render_timer_->setInterval(33);
  connect(render_timer_, &QTimer::timeout, this, &ChatPage::renderStreaming);
  connect(&engine_, &EngineHost::turnDelta, this, &ChatPage::onDelta);
  connect(&engine_, &EngineHost::turnFinished, this, &ChatPage::onFinished);
  connect(&engine_, &EngineHost::modelLoaded, this, [this](const ModelInfo& info) {
    loaded_folder_ = info.folder;
    load_status_.clear();
    remember_model_use(info.folder);
    refreshModels();
    load_again_->setVisible(false);
    notice_load_again_->setVisible(false);
    // What the store said at start stays until a turn; so does a model too large to pack,
    // which replies at the speed of its stored weights (the status bar's text may be cut).
    const QString as_stored = info.planned_format_fits
                                  ? QString()
                                  : tr("%1 stays as stored, the slowest way to run it: it %2.")
                                        .arg(info.name, info.planned_format_reason);
    showError(store_message_.isEmpty() || as_stored.isEmpty()
                  ? store_message_ + as_stored
                  : store_message_ + QLatin1Char(' ') + as_stored,
              false);
    updateState();
  });
  connect(&engine_, &EngineHost::modelLoadFailed, this, &ChatPage::showLoadFailure);
  connect(&engine_, &EngineHost::loadProgress, this, &ChatPage::showLoadProgress);
  connect(&engine_, &EngineHost::busyChanged, this, [this] { updateState(); });
  connect(&engine_, &EngineHost::loadingChanged, this, [this] { updateState(); });

  refreshModels();
  // Until a conversation is opened, a first message is sent with the defaults.
  showSettings(default_settings());
  if (list_model_->rowCount() > 0) openConversation(list_model_->idAt(0));
  updateState();
  // A store that could not open, or one started anew beside a damaged file: said at once.
  store_message_ = !store_.isOpen() ? store_.error() : store_.notice();
  showError(store_message_, false);
}

void ChatPage::showLoadProgress(const QString& folder, const QString& stage, qint64 done,
                                qint64 total) {
  if (stage != load_stage_ || done == 0) {
    load_stage_ = stage;
    load_clock_.start();
  }
  const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0;
  QString left;
  if (fraction > 0.02 && fraction < 1.0 && load_clock_.elapsed() > 1000) {
    const double seconds = load_clock_.elapsed() / 1000.0 * (1.0 - fraction) / fraction;
    left = seconds < 60 ? tr(" · about %1 s left").arg(qRound(seconds))
                        : tr(" · about %1 min left").arg(qRound(seconds / 60.0));
  }
  load_status_ = tr("Loading %1: %2, %3%%4")
                     .arg(QFileInfo(folder).fileName(), stage)
                     .arg(qRound(100.0 * fraction))
                     .arg(left);
  updateState();
}

void ChatPage::refreshModels() {
  const QSignalBlocker quiet(models_);
  models_->clear();
  for (const QString& folder : known_model_folders(loaded_folder_)) {
    const bool demo = folder == demo_folder();
    models_->addItem(demo ? tr("Built-in demo model") : QFileInfo(folder).fileName(), folder);
    models_->setItemData(models_->count() - 1, folder, Qt::ToolTipRole);
  }
  if (loaded_folder_.isEmpty()) {
    models_->insertItem(0, tr("No model loaded"), QString());
  }
  models_->insertSeparator(models_->count());
  models_->addItem(tr("Open a Model Folder…"), QStringLiteral("open"));
  models_->setCurrentIndex(std::max(0, models_->findData(loaded_folder_)));
}

QString ChatPage::loadStatus() const {
  return engine_.isLoading() ? load_status_ : QString();
}

void ChatPage::showLoadFailure(const QString& folder, const QString& message, bool kept) {
  load_status_.clear();
  const QString name = QFileInfo(folder).fileName();
  no_model_detail_->setText(tr("Tandem could not load %1:\n%2").arg(folder, message));
  const bool offer = !kept && !loaded_folder_.isEmpty() && loaded_folder_ != folder;
  // The model before, named as the model picker names it.
  const QString again = loaded_folder_ == demo_folder()
                            ? tr("Load the Demo Model Again")
                            : tr("Load %1 Again").arg(QFileInfo(loaded_folder_).fileName());
  for (QPushButton* b : {load_again_, notice_load_again_}) {
    b->setText(again);
    b->setVisible(offer);
  }
  showError(kept ? tr("Tandem could not load %1, so %2 stays loaded. %3")
                       .arg(name, engine_.model().name, message)
                 : tr("Tandem could not load %1. %2").arg(name, message),
            false);
  updateState();
}

QString ChatPage::noModelText() const {
  return no_model_detail_->text();
}

QWidget* ChatPage::buildConversationList() {
  auto* panel = new QFrame(this);
  panel->setObjectName(QStringLiteral("conversationPanel"));
  theme::follow(panel, [panel] {
    panel->setStyleSheet(
        QStringLiteral("QFrame#conversationPanel { background: %1; border-right: 1px solid %2; }")
            .arg(theme::colors().sidebar, theme::colors().border));
  });
  panel->setFixedWidth(200);
  auto* v = new QVBoxLayout(panel);
  v->setContentsMargins(10, 12, 10, 10);
  auto* fresh = new QPushButton(tr("New chat"), panel);
  fresh->setObjectName(QStringLiteral("primary"));
  connect(fresh, &QPushButton::clicked, this, &ChatPage::newConversation);
  v->addWidget(fresh);
  search_ = new QLineEdit(panel);
  search_->setPlaceholderText(tr("Search conversations"));
  search_->setAccessibleName(tr("Search conversations"));
  search_->setClearButtonEnabled(true);
  connect(search_, &QLineEdit::textChanged, filter_, &QSortFilterProxyModel::setFilterFixedString);
  v->addWidget(search_);
  list_view_ = new QListView(panel);
  list_view_->setModel(filter_);
  list_view_->setAccessibleName(tr("Conversations"));
  list_view_->setEditTriggers(QAbstractItemView::EditKeyPressed |
                              QAbstractItemView::SelectedClicked);
  list_view_->setContextMenuPolicy(Qt::CustomContextMenu);
  // Long titles are shortened with "…", never scrolled sideways.
  list_view_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  list_view_->setTextElideMode(Qt::ElideRight);
  list_view_->setWordWrap(false);
  list_view_->setUniformItemSizes(true);
  theme::follow(list_view_, [view = list_view_] {
    view->setStyleSheet(QStringLiteral("QListView { background: transparent; border: none; } "
                                       "QListView::item { padding: 7px 6px; border-radius: 6px; } "
                                       "QListView::item:selected { background: %1; color: %2; }")
                            .arg(theme::colors().surface, theme::colors().text));
  });
  connect(list_view_, &QListView::clicked, this, [this](const QModelIndex& index) {
    openConversation(index.data(ConversationListModel::IdRole).toLongLong());
  });
  connect(list_view_, &QListView::customContextMenuRequested, this, [this](const QPoint& pos) {
    const QModelIndex index = list_view_->indexAt(pos);
    if (!index.isValid()) return;
    QMenu menu(this);
    menu.addAction(tr("Rename"), this, [this, index] { list_view_->edit(index); });
    menu.addAction(tr("Export…"), this, [this, index] {
      const qint64 id = index.data(ConversationListModel::IdRole).toLongLong();
      QString name = index.data().toString();
      name.replace(QRegularExpression(QStringLiteral("[/\\\\:*?\"<>|]")), QStringLiteral("-"));
      const QString path = QFileDialog::getSaveFileName(
          this, tr("Export conversation"),
          QDir(QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation))
              .filePath(name + QStringLiteral(".md")),
          tr("Markdown (*.md);;JSON (*.json)"));
      if (!path.isEmpty()) exportConversation(id, path);
    });
    menu.addAction(tr("Delete"), this, [this, index] {
      if (QMessageBox::question(
              this, tr("Delete conversation"),
              tr("Delete “%1”? This cannot be undone.").arg(index.data().toString())) ==
          QMessageBox::Yes) {
        deleteConversationAt(filter_->mapToSource(index).row());
      }
    });
    menu.exec(list_view_->viewport()->mapToGlobal(pos));
  });
  v->addWidget(list_view_, 1);
  return panel;
}

QWidget* ChatPage::buildNoModelPage() {
  auto* page = new QWidget(this);
  auto* layout = new QVBoxLayout(page);
  layout->addStretch(2);
  auto* title = new QLabel(tr("No model loaded"), page);
  title->setObjectName(QStringLiteral("emptyTitle"));
  title->setAlignment(Qt::AlignCenter);
  no_model_detail_ = new QLabel(
      tr("Tandem runs mixture-of-experts models with your GPU and CPU working together.\n"
         "Open a model folder (config.json, tokenizer and .safetensors files) to start chatting."),
      page);
  no_model_detail_->setObjectName(QStringLiteral("emptyText"));
  no_model_detail_->setAlignment(Qt::AlignCenter);
  no_model_detail_->setWordWrap(true);
  auto* buttons = new QHBoxLayout;
  auto* open = new QPushButton(tr("Open Model Folder…"), page);
  open->setObjectName(QStringLiteral("primary"));
  connect(open, &QPushButton::clicked, this, &ChatPage::openModelRequested);
  auto* system = new QPushButton(tr("See what this computer can run"), page);
  connect(system, &QPushButton::clicked, this, &ChatPage::showSystemRequested);
  load_again_ = new QPushButton(page);
  load_again_->setObjectName(QStringLiteral("loadAgain"));
  load_again_->setVisible(false);
  connect(load_again_, &QPushButton::clicked, this,
          [this] { emit loadModelRequested(loaded_folder_); });
  // The model before on a row of its own above the others, so that three buttons in a row
  // do not make the window wider than a 1024-pixel screen.
  auto* again = new QHBoxLayout;
  again->addStretch(1);
  again->addWidget(load_again_);
  again->addStretch(1);
  buttons->addStretch(1);
  buttons->addWidget(open);
  buttons->addWidget(system);
  buttons->addStretch(1);
  layout->addWidget(title);
  layout->addSpacing(6);
  layout->addWidget(no_model_detail_);
  layout->addSpacing(14);
  layout->addLayout(again);
  layout->addLayout(buttons);
  layout->addStretch(3);
  return page;
}

QWidget* ChatPage::buildChatArea() {
  auto* area = new QWidget(this);
  auto* v = new QVBoxLayout(area);
  v->setContentsMargins(18, 12, 18, 12);
  v->setSpacing(8);

  auto* header = new QHBoxLayout;
  title_ = new ElidingLabel(QString(), area);  // a long title is shortened, not widening the page
  title_->setObjectName(QStringLiteral("cardTitle"));
  header->addWidget(title_, 1);
  sampling_ = new QToolButton(area);
  sampling_->setText(tr("Sampling"));
  sampling_->setPopupMode(QToolButton::InstantPopup);
  auto* menu = new QMenu(sampling_);
  auto* form_host = new QWidget(menu);
  auto* form = new QFormLayout(form_host);
  temperature_ = new QDoubleSpinBox(form_host);
  temperature_->setRange(0.0, 2.0);
  temperature_->setSingleStep(0.05);
  temperature_->setToolTip(
      tr("0 always picks the most likely token; higher values are more varied"));
  top_p_ = new QDoubleSpinBox(form_host);
  top_p_->setObjectName(QStringLiteral("topP"));
  // The sampler's range, as the server and the command line take it.
  top_p_->setRange(0.0, 1.0);
  top_p_->setSingleStep(0.05);
  top_p_->setToolTip(
      tr("Picks among the most likely tokens that add up to this share; 1 is off, "
         "0 keeps only the most likely"));
  top_k_ = new QSpinBox(form_host);
  top_k_->setRange(0, 1000);
  top_k_->setSpecialValueText(tr("off"));
  min_p_ = new QDoubleSpinBox(form_host);
  min_p_->setRange(0.0, 1.0);
  min_p_->setSingleStep(0.01);
  max_tokens_ = new QSpinBox(form_host);
  max_tokens_->setObjectName(QStringLiteral("maxTokens"));
  max_tokens_->setRange(16, 32768);
  max_tokens_->setSingleStep(256);
  form->addRow(tr("Temperature"), temperature_);
  form->addRow(tr("Top-p"), top_p_);
  form->addRow(tr("Top-k"), top_k_);
  form->addRow(tr("Min-p"), min_p_);
  form->addRow(tr("Longest reply (tokens)"), max_tokens_);
  auto* action = new QWidgetAction(menu);
  action->setDefaultWidget(form_host);
  menu->addAction(action);
  sampling_->setMenu(menu);
  connect(menu, &QMenu::aboutToHide, this, &ChatPage::saveSettings);
  // The model picker: the one loaded, the demo, what is in the models folder, the recent.
  models_ = new QComboBox(area);
  models_->setObjectName(QStringLiteral("modelPicker"));
  models_->setAccessibleName(tr("Model"));
  models_->setToolTip(tr("The model that replies; choose another to load it"));
  models_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  models_->setMinimumContentsLength(14);
  connect(models_, &QComboBox::activated, this, [this](int index) {
    const QString folder = models_->itemData(index).toString();
    if (folder.isEmpty() || folder == loaded_folder_) return;
    if (folder == QLatin1String("open")) {
      refreshModels();
      emit openModelRequested();
      return;
    }
    emit loadModelRequested(folder);
  });
  header->addWidget(models_);
  header->addWidget(sampling_);
  v->addLayout(header);

  system_prompt_ = new QLineEdit(area);
  system_prompt_->setAccessibleName(tr("System prompt"));
  system_prompt_->setPlaceholderText(
      tr("System prompt (optional): how the model should behave in this conversation"));
  connect(system_prompt_, &QLineEdit::editingFinished, this, &ChatPage::saveSettings);
  v->addWidget(system_prompt_);

  // Ctrl+F: find in this conversation.
  find_bar_ = new QWidget(area);
  auto* find_row = new QHBoxLayout(find_bar_);
  find_row->setContentsMargins(0, 0, 0, 0);
  find_ = new QLineEdit(find_bar_);
  find_->setObjectName(QStringLiteral("find"));
  find_->setPlaceholderText(tr("Find in this conversation (Enter: next, Shift+Enter: previous)"));
  find_->setAccessibleName(tr("Find in this conversation"));
  find_->setClearButtonEnabled(true);
  find_->installEventFilter(this);
  find_count_ = new QLabel(find_bar_);
  find_count_->setObjectName(QStringLiteral("findCount"));
  auto* find_close = new QToolButton(find_bar_);
  find_close->setText(tr("Close"));
  find_close->setAutoRaise(true);
  find_row->addWidget(find_, 1);
  find_row->addWidget(find_count_);
  find_row->addWidget(find_close);
  find_bar_->setVisible(false);
  v->addWidget(find_bar_);
  connect(find_, &QLineEdit::textChanged, this, [this] { findMatches(); });
  connect(find_close, &QToolButton::clicked, this, &ChatPage::closeFind);
  auto* find_key = new QShortcut(QKeySequence::Find, this);
  find_key->setContext(Qt::WidgetWithChildrenShortcut);
  connect(find_key, &QShortcut::activated, this, &ChatPage::openFind);

  scroll_ = new QScrollArea(area);
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  messages_widget_ = new QWidget(scroll_);
  messages_widget_->setObjectName(QStringLiteral("chatPage"));
  messages_layout_ = new QVBoxLayout(messages_widget_);
  messages_layout_->setContentsMargins(0, 6, 6, 6);
  messages_layout_->setSpacing(10);
  empty_conversation_ =
      new QLabel(tr("Ask anything. Replies stream in as the model writes them."), messages_widget_);
  empty_conversation_->setObjectName(QStringLiteral("emptyText"));
  empty_conversation_->setWordWrap(true);
  empty_conversation_->setAlignment(Qt::AlignCenter);
  messages_layout_->addWidget(empty_conversation_);
  messages_layout_->addStretch(1);
  scroll_->setWidget(messages_widget_);
  v->addWidget(scroll_, 1);

  auto* error_row = new QHBoxLayout;
  error_ = new QLabel(area);
  error_->setWordWrap(true);
  theme::follow(error_, [label = error_] {
    label->setStyleSheet(
        QStringLiteral("color: %1; background: %2; border: 1px solid %3; border-radius: 6px; "
                       "padding: 6px;")
            .arg(theme::colors().problem_text, theme::colors().problem,
                 theme::colors().problem_border));
  });
  error_->setVisible(false);
  drop_and_retry_ = new QPushButton(tr("Drop oldest turns and retry"), area);
  drop_and_retry_->setVisible(false);
  connect(drop_and_retry_, &QPushButton::clicked, this, [this] {
    TurnRequest r = last_request_;
    r.drop_oldest = true;
    startTurn(r);
  });
  error_row->addWidget(error_, 1);
  error_row->addWidget(drop_and_retry_);
  v->addLayout(error_row);

  model_notice_ = new QFrame(area);
  model_notice_->setObjectName(QStringLiteral("modelNotice"));
  theme::follow(model_notice_, [notice = model_notice_] {
    notice->setStyleSheet(
        QStringLiteral("QFrame#modelNotice { background: %1; border: 1px solid %2; "
                       "border-radius: 6px; }")
            .arg(theme::colors().notice, theme::colors().notice_border));
  });
  auto* notice_row = new QHBoxLayout(model_notice_);
  notice_row->setContentsMargins(10, 4, 6, 4);
  model_notice_text_ = new QLabel(model_notice_);
  model_notice_text_->setWordWrap(true);
  auto* notice_open = new QPushButton(tr("Open Model Folder…"), model_notice_);
  connect(notice_open, &QPushButton::clicked, this, &ChatPage::openModelRequested);
  notice_load_again_ = new QPushButton(model_notice_);
  notice_load_again_->setObjectName(QStringLiteral("loadAgain"));
  notice_load_again_->setVisible(false);
  connect(notice_load_again_, &QPushButton::clicked, this,
          [this] { emit loadModelRequested(loaded_folder_); });
  notice_row->addWidget(model_notice_text_, 1);
  notice_row->addWidget(notice_load_again_);
  notice_row->addWidget(notice_open);
  v->addWidget(model_notice_);

  auto* composer_row = new QHBoxLayout;
  composer_ = new QPlainTextEdit(area);
  composer_->setPlaceholderText(tr("Write a message. Enter sends, Shift+Enter starts a new line."));
  composer_->setAccessibleName(tr("Message"));
  composer_->setFixedHeight(76);
  composer_->installEventFilter(this);
  send_ = new QPushButton(tr("Send"), area);
  send_->setObjectName(QStringLiteral("primary"));
  stop_ = new QPushButton(tr("Stop"), area);
  stop_->setToolTip(tr("Stop the reply (Esc)"));
  connect(send_, &QPushButton::clicked, this, &ChatPage::send);
  connect(stop_, &QPushButton::clicked, this, &ChatPage::stop);
  // Escape stops a reply from anywhere on the page.
  auto* escape = new QShortcut(QKeySequence(Qt::Key_Escape), this);
  escape->setContext(Qt::WidgetWithChildrenShortcut);
  connect(escape, &QShortcut::activated, this, [this] {
    if (engine_.isBusy()) stop();
  });
  auto* buttons = new QVBoxLayout;
  buttons->addWidget(send_);
  buttons->addWidget(stop_);
  composer_row->addWidget(composer_, 1);
  composer_row->addLayout(buttons);
  v->addLayout(composer_row);
  return area;
}

void ChatPage::openFind() {
  find_bar_->setVisible(true);
  find_->setFocus();
  find_->selectAll();
  findMatches();
}

void ChatPage::closeFind() {
  find_bar_->setVisible(false);
  for (MessageWidget* w : widgets_) w->setHighlighted(false);
  found_.clear();
  found_at_ = -1;
  composer_->setFocus();
}

void ChatPage::findMatches() {
  found_.clear();
  const QString term = find_->text();
  if (!term.isEmpty()) {
    for (int i = 0; i < widgets_.size(); ++i) {
      if (widgets_[i]->content().contains(term, Qt::CaseInsensitive) ||
          widgets_[i]->thinking().contains(term, Qt::CaseInsensitive))
        found_.push_back(i);
    }
  }
  found_at_ = found_.isEmpty() ? -1 : 0;
  showMatch();
}

void ChatPage::findStep(int step) {
  if (found_.isEmpty()) return;
  found_at_ = (found_at_ + step + found_.size()) % found_.size();
  showMatch();
}

void ChatPage::showMatch() {
  for (int i = 0; i < widgets_.size(); ++i)
    widgets_[i]->setHighlighted(found_at_ >= 0 && found_[found_at_] == i);
  if (find_->text().isEmpty()) {
    find_count_->clear();
  } else if (found_.isEmpty()) {
    find_count_->setText(tr("no match"));
  } else {
    find_count_->setText(tr("%1 of %2").arg(found_at_ + 1).arg(found_.size()));
    scroll_->ensureWidgetVisible(widgets_[found_[found_at_]]);
  }
}

QString ChatPage::findStatus() const {
  return find_bar_->isVisible() ? find_count_->text() : QString();
}

int ChatPage::currentMatch() const {
  return found_at_ >= 0 ? found_[found_at_] : -1;
}

bool ChatPage::eventFilter(QObject* watched, QEvent* event) {
  if (watched == find_ &&
      (event->type() == QEvent::KeyPress || event->type() == QEvent::ShortcutOverride)) {
    auto* key = static_cast<QKeyEvent*>(event);
    // The find bar takes Escape (closing it) before the page's Escape stops a reply.
    if (key->key() == Qt::Key_Escape) {
      event->accept();
      if (event->type() == QEvent::KeyPress) closeFind();
      return true;
    }
    if (event->type() == QEvent::KeyPress &&
        (key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter)) {
      findStep(key->modifiers() & Qt::ShiftModifier ? -1 : 1);
      return true;
    }
  }
  if (watched == composer_ && event->type() == QEvent::KeyPress) {
    auto* key = static_cast<QKeyEvent*>(event);
    if ((key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) &&
        !(key->modifiers() & Qt::ShiftModifier)) {
      send();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

int ChatPage::messageCount() const {
  return widgets_.size();
}
MessageWidget* ChatPage::messageAt(int i) const {
  return i >= 0 && i < widgets_.size() ? widgets_[i] : nullptr;
}
QString ChatPage::errorText() const {
  return error_->isVisible() ? error_->text() : QString();
}

ConversationSettings ChatPage::currentSettings() const {
  ConversationSettings s;
  s.system_prompt = system_prompt_->text();
  s.temperature = temperature_->value();
  s.top_p = top_p_->value();
  s.top_k = top_k_->value();
  s.min_p = min_p_->value();
  s.max_tokens = max_tokens_->value();
  return s;
}

void ChatPage::showSettings(const ConversationSettings& s) {
  system_prompt_->setText(s.system_prompt);
  temperature_->setValue(s.temperature);
  top_p_->setValue(s.top_p);
  top_k_->setValue(s.top_k);
  min_p_->setValue(s.min_p);
  max_tokens_->setValue(s.max_tokens);
}

void ChatPage::saveSettings() {
  if (current_ != 0) store_.setSettings(current_, currentSettings());
}

void ChatPage::newConversation() {
  if (engine_.isBusy()) return;
  const QModelIndex index = list_model_->create(tr("New chat"));
  if (!index.isValid()) {
    showError(
        store_.error().isEmpty() ? tr("The conversation could not be saved.") : store_.error(),
        false);
    return;
  }
  openConversation(index.data(ConversationListModel::IdRole).toLongLong());
  composer_->setFocus();
}

void ChatPage::openConversation(qint64 id) {
  if (engine_.isBusy() && id != current_) return;
  current_ = id;
  messages_ = store_.messages(id);
  const ConversationSettings s = store_.settings(id);
  showSettings(s);
  const int row = list_model_->rowOf(id);
  title_->setText(row >= 0 ? list_model_->index(row).data().toString() : QString());
  title_->setToolTip(title_->text());
  if (row >= 0) list_view_->setCurrentIndex(filter_->mapFromSource(list_model_->index(row)));
  error_->setVisible(false);
  drop_and_retry_->setVisible(false);
  rebuildMessages();
  updateState();
}

bool ChatPage::exportConversation(qint64 id, const QString& path) {
  ConversationExport c;
  const int row = list_model_->rowOf(id);
  c.title = row >= 0 ? list_model_->index(row).data().toString() : tr("Conversation");
  c.settings = store_.settings(id);
  c.messages = id == current_ ? messages_ : store_.messages(id);
  const QString error = write_conversation(c, path);
  showError(error, false);
  return error.isEmpty();
}

void ChatPage::deleteConversationAt(int row) {
  const qint64 id = list_model_->idAt(row);
  if (id == 0 || (engine_.isBusy() && id == current_)) return;
  list_model_->remove(row);
  if (id == current_) {
    current_ = 0;
    messages_.clear();
    if (list_model_->rowCount() > 0) {
      openConversation(list_model_->idAt(0));
    } else {
      showSettings(default_settings());  // the next first message starts afresh
      rebuildMessages();
    }
  }
  updateState();
}

void ChatPage::reloadConversations() {
  if (engine_.isBusy()) return;
  list_model_->reload();
  current_ = 0;
  messages_.clear();
  if (list_model_->rowCount() > 0) {
    openConversation(list_model_->idAt(0));
  } else {
    showSettings(default_settings());
    title_->clear();
    rebuildMessages();
  }
  updateState();
}

MessageWidget* ChatPage::appendMessage(int index, const StoredMessage& message) {
  // A reply is labelled with the model that wrote it, whatever is loaded now.
  const QString speaker = message.role == QLatin1String("user") ? tr("You")
                          : !message.model.isEmpty()            ? message.model
                                                                : tr("Assistant");
  auto* w = new MessageWidget(index, message.role, speaker, messages_widget_);
  w->setContent(message.content, message.thinking, false);
  w->setStopped(message.stopped);
  w->setStats(message.tokens, message.tokens_per_s);
  connect(w, &MessageWidget::editRequested, this, &ChatPage::editRequested);
  connect(w, &MessageWidget::regenerateRequested, this, &ChatPage::regenerate);
  messages_layout_->insertWidget(messages_layout_->count() - 1, w);
  widgets_.push_back(w);
  return w;
}

void ChatPage::rebuildMessages() {
  for (MessageWidget* w : widgets_) w->deleteLater();
  widgets_.clear();
  streaming_ = nullptr;
  for (int i = 0; i < messages_.size(); ++i) appendMessage(i, messages_[i]);
  if (!widgets_.isEmpty() && widgets_.back()->role() == QLatin1String("assistant"))
    widgets_.back()->setRegenerateVisible(true);
  empty_conversation_->setVisible(messages_.isEmpty());
  if (find_bar_->isVisible()) findMatches();  // the widgets are new
  scrollToBottom();
}

void ChatPage::scrollToBottom() {
  QTimer::singleShot(0, this, [this] {
    scroll_->verticalScrollBar()->setValue(scroll_->verticalScrollBar()->maximum());
  });
}

void ChatPage::updateState() {
  // Saved conversations stay readable without a model; only replies need one.
  stack_->setCurrentIndex(engine_.hasModel() || engine_.isBusy() || current_ != 0 ? kConversation
                                                                                  : kNoModel);
  model_notice_->setVisible(!engine_.hasModel());
  model_notice_text_->setText(
      engine_.isLoading() ? (load_status_.isEmpty() ? tr("Loading the model…") : load_status_)
                          : tr("No model is loaded, so the model cannot reply yet."));
  const bool busy = engine_.isBusy();
  send_->setEnabled(!busy && engine_.hasModel());
  stop_->setEnabled(busy);
  composer_->setReadOnly(false);
  sampling_->setEnabled(!busy);
  for (MessageWidget* w : widgets_) w->setEnabled(!busy || w == streaming_);
}

void ChatPage::showError(const QString& message, bool offer_drop) {
  error_->setText(message);
  error_->setVisible(!message.isEmpty());
  drop_and_retry_->setVisible(offer_drop);
}

void ChatPage::startTurn(TurnRequest request) {
  store_message_.clear();
  request.settings = currentSettings();
  last_request_ = request;
  showError({}, false);
  streamed_answer_.clear();
  streamed_thinking_.clear();
  // Show the conversation as it will be: the user's message, and the reply streaming in.
  QVector<StoredMessage> shown = request.history;
  switch (request.kind) {
    case TurnRequest::Kind::Send:
      shown.push_back({QStringLiteral("user"), request.text, {}});
      break;
    case TurnRequest::Kind::Regenerate:
      if (!shown.isEmpty() && shown.back().role == QLatin1String("assistant")) shown.pop_back();
      break;
    case TurnRequest::Kind::Edit:
      shown.resize(request.edit_index + 1);
      shown[request.edit_index].content = request.text;
      break;
  }
  messages_ = shown;
  rebuildMessages();
  empty_conversation_->setVisible(false);
  streaming_ = appendMessage(messages_.size(),
                             {QStringLiteral("assistant"), {}, {}, false, engine_.model().name});
  streaming_->setContent({}, {}, true);
  turn_ = engine_.startTurn(request);
  updateState();
  scrollToBottom();
}

void ChatPage::send() {
  const QString text = composer_->toPlainText().trimmed();
  if (text.isEmpty() || engine_.isBusy() || !engine_.hasModel()) return;
  if (current_ == 0) {
    const QModelIndex index = list_model_->create(titleFrom(text));
    if (!index.isValid()) {
      showError(
          store_.error().isEmpty() ? tr("The conversation could not be saved.") : store_.error(),
          false);
      return;
    }
    current_ = index.data(ConversationListModel::IdRole).toLongLong();
    list_view_->setCurrentIndex(filter_->mapFromSource(index));
    saveSettings();
  } else if (messages_.isEmpty()) {
    const int row = list_model_->rowOf(current_);
    if (row >= 0 && list_model_->index(row).data().toString() == tr("New chat")) {
      list_model_->setData(list_model_->index(row), titleFrom(text), Qt::EditRole);
    }
  }
  title_->setText(list_model_->index(list_model_->rowOf(current_)).data().toString());
  title_->setToolTip(title_->text());
  composer_->clear();
  TurnRequest request;
  request.kind = TurnRequest::Kind::Send;
  request.history = messages_;
  request.text = text;
  startTurn(request);
}

void ChatPage::stop() {
  engine_.stop();
}

void ChatPage::regenerate() {
  if (engine_.isBusy() || messages_.isEmpty()) return;
  TurnRequest request;
  request.kind = TurnRequest::Kind::Regenerate;
  request.history = messages_;
  startTurn(request);
}

void ChatPage::editRequested(int index) {
  if (engine_.isBusy() || index < 0 || index >= messages_.size()) return;
  bool ok = false;
  const QString text =
      QInputDialog::getMultiLineText(this, tr("Edit message"),
                                     tr("The conversation continues from the edited message; "
                                        "everything after it is replaced."),
                                     messages_[index].content, &ok);
  if (ok && !text.trimmed().isEmpty()) editMessage(index, text.trimmed());
}

void ChatPage::editMessage(int index, const QString& text) {
  if (engine_.isBusy() || index < 0 || index >= messages_.size() ||
      messages_[index].role != QLatin1String("user"))
    return;
  TurnRequest request;
  request.kind = TurnRequest::Kind::Edit;
  request.history = messages_;
  request.edit_index = index;
  request.text = text;
  startTurn(request);
}

void ChatPage::onDelta(quint64 id, const QString& answer, const QString& thinking) {
  if (id != turn_ || streaming_ == nullptr) return;
  streamed_answer_ += answer;
  streamed_thinking_ += thinking;
  // Render at most 30 times a second: a fast model produces tokens faster than re-laying
  // out the message would allow.
  if (!render_timer_->isActive()) render_timer_->start();
}

void ChatPage::renderStreaming() {
  if (streaming_ == nullptr) return;
  streaming_->setContent(streamed_answer_, streamed_thinking_, true);
  const QScrollBar* bar = scroll_->verticalScrollBar();
  if (bar->value() >= bar->maximum() - 40) scrollToBottom();
}

void ChatPage::onFinished(const TurnOutcome& outcome) {
  if (outcome.id != turn_) return;
  render_timer_->stop();
  streaming_ = nullptr;
  const bool empty_reply =
      outcome.messages.isEmpty() || (outcome.messages.back().role == QLatin1String("assistant") &&
                                     outcome.messages.back().content.trimmed().isEmpty() &&
                                     outcome.messages.back().thinking.trimmed().isEmpty());
  if ((!outcome.error.isEmpty() && outcome.generated_tokens == 0) ||
      (outcome.stopped && empty_reply)) {
    // Nothing was generated (or stopped before a word): the conversation as it was, the
    // message back in the box, and why; nothing half-written is saved.
    messages_ = last_request_.history;
    rebuildMessages();
    if (last_request_.kind == TurnRequest::Kind::Send) composer_->setPlainText(last_request_.text);
    showError(outcome.error.isEmpty()
                  ? tr("Stopped before the model wrote anything; nothing was saved.")
                  : outcome.error,
              outcome.overflow);
    updateState();
    return;
  }
  messages_ = outcome.messages;
  // The engine keeps no marks: earlier replies keep theirs, the new one is marked if stopped.
  for (int i = 0; i + 1 < messages_.size() && i < last_request_.history.size(); ++i) {
    const StoredMessage& before = last_request_.history[i];
    if (before.role == messages_[i].role && before.content == messages_[i].content) {
      messages_[i].stopped = before.stopped;
      messages_[i].model = before.model;
      messages_[i].tokens = before.tokens;
      messages_[i].tokens_per_s = before.tokens_per_s;
    }
  }
  if (!messages_.isEmpty() && messages_.back().role == QLatin1String("assistant")) {
    messages_.back().stopped = outcome.stopped;
    messages_.back().model = engine_.model().name;
    messages_.back().tokens = outcome.generated_tokens;
    messages_.back().tokens_per_s = outcome.decode_tokens_per_s;
  }
  if (current_ != 0) {
    if (!store_.setMessages(current_, messages_))
      showError(tr("The conversation could not be saved to %1.").arg(store_.path()), false);
    list_model_->touch(current_);
  }
  rebuildMessages();
  if (outcome.dropped_turns > 0) {
    showError(outcome.dropped_turns == 1
                  ? tr("The oldest turn was left out so the conversation fits in the context.")
                  : tr("The oldest %1 turns were left out so the conversation fits in the "
                       "context.")
                        .arg(outcome.dropped_turns),
              false);
  }
  updateState();
  emit turnStats(outcome.decode_tokens_per_s, outcome.first_token_seconds, outcome.context_used,
                 outcome.context_capacity);
}

}  // namespace tandem::ui
