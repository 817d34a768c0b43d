// Conversations and their messages, persisted in SQLite (QtSql) in the application data
// folder. All access is on the UI thread; each call is one short transaction.
#pragma once

#include <QDateTime>
#include <QString>
#include <QVector>

namespace tandem::ui {

struct StoredMessage {
  QString role;  // "user" or "assistant"
  QString content;
  QString thinking;
  bool stopped = false;     // a reply the user stopped before it ended
  QString model;            // the model that wrote a reply (its folder's name)
  qint64 tokens = 0;        // a reply's generated tokens (0: not recorded)
  double tokens_per_s = 0;  // and its decoding speed
};

struct ConversationSettings {
  QString system_prompt;
  double temperature = 0.7;
  double top_p = 0.95;
  int top_k = 40;
  double min_p = 0.05;
  int max_tokens = 1024;
};

// The sampling a new conversation starts with: the Preferences' (QSettings "chat/...") over
// the values above.
ConversationSettings default_settings();

struct ConversationInfo {
  qint64 id = 0;
  QString title;
  QDateTime updated;
};

class ConversationStore {
 public:
  // Opens (creating if needed) the database at `path`; empty means the default file in
  // the application data folder. isOpen() and error() tell whether it worked.
  explicit ConversationStore(const QString& path = {});
  ~ConversationStore();
  ConversationStore(const ConversationStore&) = delete;
  ConversationStore& operator=(const ConversationStore&) = delete;

  // Where conversations are kept: the Preferences' folder ("paths/data"), else the
  // application data folder.
  static QString defaultFolder();
  static constexpr const char* kFileName = "conversations.sqlite";

  // Keeps the conversations in `folder` from now on: the database already there if it has
  // one, else a copy of this one (the old file stays where it was). On failure (a folder
  // that cannot be made, a database that cannot be opened) this store stays as it was and
  // error() says why.
  bool moveTo(const QString& folder);

  bool isOpen() const { return open_; }
  QString error() const { return error_; }
  // Something the user should know that is not an error: a damaged file kept aside and a
  // new one started (the sentence names where the old one is).
  QString notice() const { return notice_; }
  QString path() const { return path_; }

  QVector<ConversationInfo> conversations() const;  // newest first
  qint64 createConversation(const QString& title);
  bool renameConversation(qint64 id, const QString& title);
  bool deleteConversation(qint64 id);

  QVector<StoredMessage> messages(qint64 id) const;
  // Replaces the conversation's messages (after a turn, an edit or a regeneration).
  bool setMessages(qint64 id, const QVector<StoredMessage>& messages);

  ConversationSettings settings(qint64 id) const;
  bool setSettings(qint64 id, const ConversationSettings& settings);

 private:
  bool open(const QString& path);
  bool open_database(const QString& path);
  void close();

  QString connection_;
  QString path_;
  QString error_;
  QString notice_;
  bool open_ = false;
  bool damaged_ = false;
};

}  // namespace tandem::ui
