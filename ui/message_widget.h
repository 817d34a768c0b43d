// One message of the conversation: markdown text, code blocks with a copy button, and the
// model's thinking folded away until asked for.
#pragma once

#include <QFrame>
#include <QVector>

class QLabel;
class QToolButton;
class QVBoxLayout;
class QPushButton;
class QPlainTextEdit;

namespace tandem::ui {

class CodeHighlighter;

// Splits markdown into prose and fenced code blocks (``` ... ```); an unclosed fence while
// streaming is a code block still being written.
struct MessageSegment {
  bool code = false;
  QString language;
  QString text;
};
QVector<MessageSegment> split_code_blocks(const QString& markdown);

class CodeBlockWidget : public QFrame {
  Q_OBJECT
 public:
  explicit CodeBlockWidget(QWidget* parent = nullptr);
  void setCode(const QString& language, const QString& code);
  QString code() const;

 private:
  QLabel* language_;
  QPushButton* copy_;
  QPlainTextEdit* text_;
  CodeHighlighter* highlighter_;
};

class MessageWidget : public QFrame {
  Q_OBJECT
 public:
  MessageWidget(int index, const QString& role, const QString& speaker, QWidget* parent = nullptr);

  void setContent(const QString& content, const QString& thinking, bool streaming);
  void setRegenerateVisible(bool visible);
  // Marks a reply the user stopped ("Stopped" under it).
  void setStopped(bool stopped);
  bool stopped() const;
  // A reply's size and speed, under it ("42 tokens · 35.2 tokens/s"); 0 tokens: nothing.
  void setStats(qint64 tokens, double tokens_per_s);
  // Outlined as the current match of the conversation's find bar.
  void setHighlighted(bool on);
  bool highlighted() const { return highlighted_; }
  QString thinking() const { return thinking_; }
  QString statsText() const;
  int index() const { return index_; }
  QString role() const { return role_; }
  QString content() const { return content_; }
  bool thinkingExpanded() const;
  QString thinkingSummary() const;

 signals:
  void editRequested(int index);
  void regenerateRequested();

 private:
  void rebuildBody();
  void restyle();
  QString highlight_style() const;

  int index_;
  QString role_;
  QString content_;
  QString thinking_;
  bool streaming_ = false;
  QToolButton* thinking_toggle_ = nullptr;
  QLabel* thinking_text_ = nullptr;
  QVBoxLayout* body_ = nullptr;
  QVector<QWidget*> segments_;
  QVector<MessageSegment> shown_;
  QToolButton* regenerate_ = nullptr;
  QLabel* stopped_ = nullptr;
  QLabel* stats_ = nullptr;
  bool highlighted_ = false;
  QString base_style_;
};

}  // namespace tandem::ui
