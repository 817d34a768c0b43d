// A conversation written out for people (Markdown) or programs (JSON, its messages in the
// OpenAI chat shape: role, content, and the model's thinking as reasoning_content).
#pragma once

#include <QByteArray>
#include <QDateTime>
#include <QString>
#include <QVector>

#include "ui/conversation/store.h"

namespace tandem::ui {

struct ConversationExport {
  QString title;
  ConversationSettings settings;
  QVector<StoredMessage> messages;
  QDateTime exported = QDateTime::currentDateTime();
};

QByteArray conversation_markdown(const ConversationExport& c);
QByteArray conversation_json(const ConversationExport& c);

// Writes `c` to `path` as Markdown or JSON by its extension (.md, .markdown, .json; anything
// else is Markdown), whole or not at all (the file is renamed into place when complete).
// Returns an empty string, or the sentence that says why it could not be written.
QString write_conversation(const ConversationExport& c, const QString& path);

}  // namespace tandem::ui
