#include "ui/conversation/store.h"

#include <QSettings>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QStandardPaths>
#include <QUuid>
#include <QVariant>

namespace tandem::ui {

ConversationSettings default_settings() {
  ConversationSettings s;
  QSettings q;
  s.temperature = q.value(QStringLiteral("chat/temperature"), s.temperature).toDouble();
  s.top_p = q.value(QStringLiteral("chat/topP"), s.top_p).toDouble();
  s.top_k = q.value(QStringLiteral("chat/topK"), s.top_k).toInt();
  s.min_p = q.value(QStringLiteral("chat/minP"), s.min_p).toDouble();
  s.max_tokens = q.value(QStringLiteral("chat/maxTokens"), s.max_tokens).toInt();
  return s;
}

namespace {

QSqlDatabase db(const QString& connection) {
  return QSqlDatabase::database(connection, false);
}

QJsonObject toJson(const ConversationSettings& s) {
  return {{"system_prompt", s.system_prompt},
          {"temperature", s.temperature},
          {"top_p", s.top_p},
          {"top_k", s.top_k},
          {"min_p", s.min_p},
          {"max_tokens", s.max_tokens}};
}

ConversationSettings fromJson(const QJsonObject& o) {
  ConversationSettings s = default_settings();
  s.system_prompt = o.value("system_prompt").toString();
  s.temperature = o.value("temperature").toDouble(s.temperature);
  s.top_p = o.value("top_p").toDouble(s.top_p);
  s.top_k = o.value("top_k").toInt(s.top_k);
  s.min_p = o.value("min_p").toDouble(s.min_p);
  s.max_tokens = o.value("max_tokens").toInt(s.max_tokens);
  return s;
}

}  // namespace

QString ConversationStore::defaultFolder() {
  const QString chosen = QSettings().value(QStringLiteral("paths/data")).toString();
  return chosen.isEmpty() ? QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)
                          : chosen;
}

ConversationStore::ConversationStore(const QString& path) {
  open(path.isEmpty() ? defaultFolder() + QLatin1Char('/') + QLatin1String(kFileName) : path);
}

bool ConversationStore::moveTo(const QString& folder) {
  const QString target = QDir(folder).absoluteFilePath(QLatin1String(kFileName));
  if (QFileInfo(target) == QFileInfo(path_)) return open_;
  if (!QDir().mkpath(folder)) {
    error_ = QObject::tr("The folder %1 cannot be created; choose another one.").arg(folder);
    return false;
  }
  const QString previous = path_;
  close();  // everything written is in the file now
  if (!QFileInfo::exists(target) && QFileInfo::exists(previous)) {
    // Copied whole under another name, then renamed into place: never half a database.
    const QString part = target + QStringLiteral(".part");
    QFile::remove(part);
    if (!QFile::copy(previous, part) || !QFile::rename(part, target)) {
      QFile::remove(part);
      open(previous);
      error_ = QObject::tr("The conversations could not be copied to %1; they stay in %2.")
                   .arg(folder, QFileInfo(previous).absolutePath());
      return false;
    }
  }
  if (open(target)) return true;
  const QString why = error_;
  open(previous);
  error_ =
      QObject::tr("%1 The conversations stay in %2.").arg(why, QFileInfo(previous).absolutePath());
  return false;
}

void ConversationStore::close() {
  if (connection_.isEmpty()) return;
  {
    QSqlDatabase d = db(connection_);
    d.close();
  }
  QSqlDatabase::removeDatabase(connection_);
  connection_.clear();
  open_ = false;
}

bool ConversationStore::open(const QString& path) {
  if (open_database(path)) return true;
  if (!damaged_) return false;
  // A file that is not a database any more (damaged, or overwritten): kept aside as it is,
  // and a new store started, so the app works and nothing of it is lost.
  close();
  const QString kept = path + QStringLiteral(".damaged-") +
                       QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
  if (!QFile::rename(path, kept)) {
    error_ = QObject::tr(
                 "The conversations file %1 is damaged and cannot be moved aside; move it "
                 "away, then start Tandem again.")
                 .arg(path);
    return false;
  }
  if (!open_database(path)) return false;
  notice_ = QObject::tr(
                "The conversations file was damaged, so Tandem started a new one. The "
                "old file is kept as %1.")
                .arg(kept);
  return true;
}

bool ConversationStore::open_database(const QString& path) {
  close();
  damaged_ = false;
  path_ = path;
  error_.clear();
  connection_ =
      QStringLiteral("conversations-") + QUuid::createUuid().toString(QUuid::WithoutBraces);
  QDir().mkpath(QFileInfo(path_).absolutePath());
  QSqlDatabase d = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), connection_);
  d.setDatabaseName(path_);
  if (!d.open()) {
    error_ = QObject::tr("Conversations cannot be saved: the database %1 could not be opened (%2).")
                 .arg(path_, d.lastError().text());
    return false;
  }
  QSqlQuery q(d);
  // Another Tandem writing the same file makes this one wait a moment, not fail at once.
  q.exec(QStringLiteral("PRAGMA busy_timeout = 3000"));
  const bool ok =
      q.exec(QStringLiteral("PRAGMA foreign_keys = ON")) &&
      q.exec(QStringLiteral(
          "CREATE TABLE IF NOT EXISTS conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, "
          "title TEXT NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL, "
          "settings TEXT NOT NULL DEFAULT '{}')")) &&
      q.exec(QStringLiteral(
          "CREATE TABLE IF NOT EXISTS messages (conversation INTEGER NOT NULL REFERENCES "
          "conversations(id) ON DELETE CASCADE, position INTEGER NOT NULL, role TEXT NOT NULL, "
          "content TEXT NOT NULL, thinking TEXT NOT NULL DEFAULT '', "
          "PRIMARY KEY (conversation, position))"));
  // Stores made before replies carried these gain the columns.
  QStringList columns;
  if (ok && q.exec(QStringLiteral("PRAGMA table_info(messages)"))) {
    while (q.next()) columns << q.value(1).toString();
  }
  bool migrated = ok;
  for (const auto& [name, type] :
       {std::pair{QStringLiteral("stopped"), QStringLiteral("INTEGER NOT NULL DEFAULT 0")},
        std::pair{QStringLiteral("model"), QStringLiteral("TEXT NOT NULL DEFAULT ''")},
        std::pair{QStringLiteral("tokens"), QStringLiteral("INTEGER NOT NULL DEFAULT 0")},
        std::pair{QStringLiteral("tokens_per_s"), QStringLiteral("REAL NOT NULL DEFAULT 0")}}) {
    if (migrated && !columns.contains(name))
      migrated = q.exec(QStringLiteral("ALTER TABLE messages ADD COLUMN %1 %2").arg(name, type));
  }
  if (!ok || !migrated) {
    const QString native = q.lastError().nativeErrorCode();
    // SQLITE_NOTADB (26) and SQLITE_CORRUPT (11).
    damaged_ = native == QLatin1String("26") || native == QLatin1String("11");
    error_ =
        QObject::tr("Conversations cannot be saved in %1: %2").arg(path_, q.lastError().text());
    return false;
  }
  open_ = true;
  return true;
}

ConversationStore::~ConversationStore() {
  close();
}

QVector<ConversationInfo> ConversationStore::conversations() const {
  QVector<ConversationInfo> out;
  QSqlQuery q(db(connection_));
  q.exec(QStringLiteral(
      "SELECT id, title, updated FROM conversations ORDER BY updated DESC, id DESC"));
  while (q.next()) {
    out.push_back({q.value(0).toLongLong(), q.value(1).toString(),
                   QDateTime::fromMSecsSinceEpoch(q.value(2).toLongLong())});
  }
  return out;
}

qint64 ConversationStore::createConversation(const QString& title) {
  QSqlQuery q(db(connection_));
  q.prepare(QStringLiteral("INSERT INTO conversations (title, created, updated) VALUES (?, ?, ?)"));
  const qint64 now = QDateTime::currentMSecsSinceEpoch();
  q.addBindValue(title);
  q.addBindValue(now);
  q.addBindValue(now);
  if (!q.exec()) return 0;
  return q.lastInsertId().toLongLong();
}

bool ConversationStore::renameConversation(qint64 id, const QString& title) {
  QSqlQuery q(db(connection_));
  q.prepare(QStringLiteral("UPDATE conversations SET title = ? WHERE id = ?"));
  q.addBindValue(title);
  q.addBindValue(id);
  return q.exec() && q.numRowsAffected() == 1;
}

bool ConversationStore::deleteConversation(qint64 id) {
  QSqlQuery q(db(connection_));
  q.prepare(QStringLiteral("DELETE FROM conversations WHERE id = ?"));
  q.addBindValue(id);
  return q.exec() && q.numRowsAffected() == 1;
}

QVector<StoredMessage> ConversationStore::messages(qint64 id) const {
  QVector<StoredMessage> out;
  QSqlQuery q(db(connection_));
  q.prepare(QStringLiteral(
      "SELECT role, content, thinking, stopped, model, tokens, tokens_per_s FROM messages WHERE "
      "conversation = ? ORDER BY position"));
  q.addBindValue(id);
  q.exec();
  while (q.next()) {
    out.push_back({q.value(0).toString(), q.value(1).toString(), q.value(2).toString(),
                   q.value(3).toBool(), q.value(4).toString(), q.value(5).toLongLong(),
                   q.value(6).toDouble()});
  }
  return out;
}

bool ConversationStore::setMessages(qint64 id, const QVector<StoredMessage>& messages) {
  QSqlDatabase d = db(connection_);
  d.transaction();
  QSqlQuery q(d);
  q.prepare(QStringLiteral("DELETE FROM messages WHERE conversation = ?"));
  q.addBindValue(id);
  bool ok = q.exec();
  for (int i = 0; ok && i < messages.size(); ++i) {
    q.prepare(
        QStringLiteral("INSERT INTO messages (conversation, position, role, content, thinking, "
                       "stopped, model, tokens, tokens_per_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    q.addBindValue(id);
    q.addBindValue(i);
    q.addBindValue(messages[i].role);
    // A null QString binds as SQL NULL; the columns hold text, empty when there is none.
    q.addBindValue(messages[i].content.isNull() ? QStringLiteral("") : messages[i].content);
    q.addBindValue(messages[i].thinking.isNull() ? QStringLiteral("") : messages[i].thinking);
    q.addBindValue(messages[i].stopped ? 1 : 0);
    q.addBindValue(messages[i].model.isNull() ? QStringLiteral("") : messages[i].model);
    q.addBindValue(messages[i].tokens);
    q.addBindValue(messages[i].tokens_per_s);
    ok = q.exec();
  }
  if (ok) {
    q.prepare(QStringLiteral("UPDATE conversations SET updated = ? WHERE id = ?"));
    q.addBindValue(QDateTime::currentMSecsSinceEpoch());
    q.addBindValue(id);
    ok = q.exec();
  }
  if (ok) return d.commit();
  qWarning("conversation store: %s", qPrintable(q.lastError().text()));
  d.rollback();
  return false;
}

ConversationSettings ConversationStore::settings(qint64 id) const {
  QSqlQuery q(db(connection_));
  q.prepare(QStringLiteral("SELECT settings FROM conversations WHERE id = ?"));
  q.addBindValue(id);
  if (!q.exec() || !q.next()) return {};
  return fromJson(QJsonDocument::fromJson(q.value(0).toString().toUtf8()).object());
}

bool ConversationStore::setSettings(qint64 id, const ConversationSettings& settings) {
  QSqlQuery q(db(connection_));
  q.prepare(QStringLiteral("UPDATE conversations SET settings = ? WHERE id = ?"));
  q.addBindValue(QString::fromUtf8(QJsonDocument(toJson(settings)).toJson(QJsonDocument::Compact)));
  q.addBindValue(id);
  return q.exec();
}

}  // namespace tandem::ui
