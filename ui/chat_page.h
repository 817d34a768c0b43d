// The chat: conversation list (new, rename, delete, search), the messages with streaming
// markdown, the composer with send / stop / regenerate, system prompt and sampling settings.
// Talks to the engine only through EngineHost, so the UI never waits for a reply.
#pragma once

#include <QElapsedTimer>
#include <QWidget>

#include "ui/conversation/list_model.h"
#include "ui/engine_host.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QListView;
class QPlainTextEdit;
class QPushButton;
class QScrollArea;
class QSortFilterProxyModel;
class QStackedWidget;
class QVBoxLayout;
class QDoubleSpinBox;
class QSpinBox;
class QToolButton;
class QTimer;

namespace tandem::ui {

class ElidingLabel;

class MessageWidget;

class ChatPage : public QWidget {
  Q_OBJECT
 public:
  ChatPage(EngineHost& engine, ConversationStore& store, QWidget* parent = nullptr);
  // Shows why a model could not be loaded where the chat would be.
  // Says in the window why `folder` did not load; `kept`: the model in use is still loaded.
  // Where the model in use was lost with it, offers to load that one again.
  void showLoadFailure(const QString& folder, const QString& message, bool kept = false);
  // "Loading NAME: packing the weights, 45% · about 20 s left" while a model loads.
  void showLoadProgress(const QString& folder, const QString& stage, qint64 done, qint64 total);
  QString loadStatus() const;
  // Fills the model picker (the loaded model, recent ones, the demo, the models folder's).
  void refreshModels();
  // What the page says while no model is loaded.
  QString noModelText() const;

  ConversationListModel* conversations() const { return list_model_; }
  QSortFilterProxyModel* filteredConversations() const { return filter_; }
  qint64 currentConversation() const { return current_; }
  // What the sampling form and system prompt say now (what the next turn is generated with).
  ConversationSettings currentSettings() const;
  void openConversation(qint64 id);
  // Writes conversation `id` to `path` (Markdown, or JSON for .json); a failure is said in
  // the window.
  bool exportConversation(qint64 id, const QString& path);
  // The find bar (Ctrl+F): "2 of 5", "no match", or empty when it is closed; the index of
  // the message found now, or -1.
  void openFind();
  void closeFind();
  QString findStatus() const;
  int currentMatch() const;

  // For tests and accessibility.
  QPlainTextEdit* composer() const { return composer_; }
  QPushButton* sendButton() const { return send_; }
  QPushButton* stopButton() const { return stop_; }
  QLineEdit* searchField() const { return search_; }
  QLineEdit* systemPromptField() const { return system_prompt_; }
  int messageCount() const;
  MessageWidget* messageAt(int i) const;
  QString errorText() const;
  const QVector<StoredMessage>& messages() const { return messages_; }

 public slots:
  void newConversation();
  void send();
  void stop();
  void regenerate();
  void editMessage(int index, const QString& text);
  void deleteConversationAt(int row);
  // The store moved (Preferences): the list read anew, its newest conversation opened.
  void reloadConversations();

 signals:
  void showSystemRequested();
  void openModelRequested();
  void loadModelRequested(const QString& folder);
  // After each turn: for the status bar.
  void turnStats(double decode_tokens_per_s, double first_token_seconds, qint64 context_used,
                 qint64 context_capacity);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  QWidget* buildConversationList();
  QWidget* buildChatArea();
  QWidget* buildNoModelPage();
  void startTurn(TurnRequest request);
  void rebuildMessages();
  MessageWidget* appendMessage(int index, const StoredMessage& message);
  void onDelta(quint64 id, const QString& answer, const QString& thinking);
  void onFinished(const TurnOutcome& outcome);
  void renderStreaming();
  void updateState();
  void showError(const QString& message, bool offer_drop);
  void saveSettings();
  // The sampling form and system prompt show `s`.
  void showSettings(const ConversationSettings& s);
  void scrollToBottom();
  void editRequested(int index);

  EngineHost& engine_;
  ConversationStore& store_;
  ConversationListModel* list_model_;
  QSortFilterProxyModel* filter_;
  QListView* list_view_ = nullptr;
  QLineEdit* search_ = nullptr;
  QStackedWidget* stack_ = nullptr;
  ElidingLabel* title_ = nullptr;
  QLineEdit* system_prompt_ = nullptr;
  QToolButton* sampling_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QDoubleSpinBox* top_p_ = nullptr;
  QSpinBox* top_k_ = nullptr;
  QDoubleSpinBox* min_p_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QScrollArea* scroll_ = nullptr;
  QWidget* messages_widget_ = nullptr;
  QVBoxLayout* messages_layout_ = nullptr;
  QLabel* empty_conversation_ = nullptr;
  QLabel* error_ = nullptr;
  QPushButton* drop_and_retry_ = nullptr;
  QPlainTextEdit* composer_ = nullptr;
  QPushButton* send_ = nullptr;
  QPushButton* stop_ = nullptr;
  QWidget* find_bar_ = nullptr;
  QLineEdit* find_ = nullptr;
  QLabel* find_count_ = nullptr;
  QVector<int> found_;  // messages that match, in order
  int found_at_ = -1;
  void findMatches();
  void findStep(int step);
  void showMatch();
  QComboBox* models_ = nullptr;  // the model picker in the header
  QString load_stage_, load_status_;
  QElapsedTimer load_clock_;
  QString store_message_;              // the conversation store's problem or notice at start
  QString loaded_folder_;              // the model that loaded last, offered again after a failure
  QPushButton* load_again_ = nullptr;  // on the no-model page
  QPushButton* notice_load_again_ = nullptr;  // in the conversation's model notice
  QLabel* no_model_detail_ = nullptr;
  QWidget* model_notice_ = nullptr;
  QLabel* model_notice_text_ = nullptr;

  qint64 current_ = 0;
  QVector<StoredMessage> messages_;
  QVector<MessageWidget*> widgets_;
  quint64 turn_ = 0;
  TurnRequest last_request_;
  QString streamed_answer_;
  QString streamed_thinking_;
  MessageWidget* streaming_ = nullptr;
  QTimer* render_timer_ = nullptr;
};

}  // namespace tandem::ui
