// Preferences: the look (follow the desktop, light, dark), the sampling new chats start
// with, where models are kept, the CPU threads and how the CPU keeps keys and values, and how
// to reach the Hub (token, mirror).
// Stored in QSettings, read where they apply: theme::apply, default_settings,
// MainWindow::modelsFolder and loadModel, DownloadQueue::hubConfig.
#pragma once

#include <QDialog>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace tandem::ui {

class ConversationStore;

class PreferencesDialog : public QDialog {
  Q_OBJECT
 public:
  explicit PreferencesDialog(QWidget* parent = nullptr);

  // Stores what the fields say (what OK does); false, with the problem shown, when a field
  // cannot be stored as it is (a models folder that cannot be created).
  bool save();
  QString problemText() const;

  // Lets the dialog move the conversations (the store reopened in the chosen folder);
  // `replying`: a reply is being written, so they cannot move now.
  void setConversationStore(ConversationStore* store, bool replying);
  bool conversationsMoved() const { return moved_; }

 private:
  void load();

  QComboBox* theme_;
  QCheckBox* menu_entry_;
  QDoubleSpinBox* temperature_;
  QDoubleSpinBox* top_p_;
  QSpinBox* top_k_;
  QDoubleSpinBox* min_p_;
  QSpinBox* max_tokens_;
  QLineEdit* models_;
  QLineEdit* conversations_;
  QString shown_conversations_;  // where they are now
  ConversationStore* store_ = nullptr;
  bool replying_ = false;
  bool moved_ = false;
  QSpinBox* threads_;
  QLabel* threads_note_;
  QComboBox* kv_cache_;
  QSpinBox* server_port_;
  QCheckBox* server_network_;
  QLineEdit* server_key_;
  QLineEdit* server_origins_;
  QLineEdit* token_;
  QLineEdit* endpoint_;
  QLabel* secrets_note_;
  QLabel* problem_;
};

}  // namespace tandem::ui
