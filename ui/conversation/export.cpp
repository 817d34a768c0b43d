#include "ui/conversation/export.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

namespace tandem::ui {

QByteArray conversation_markdown(const ConversationExport& c) {
  QString out = QStringLiteral("# %1\n\n").arg(c.title);
  out += QObject::tr("*Exported from Tandem on %1.*").arg(c.exported.toString(Qt::ISODate));
  if (!c.settings.system_prompt.isEmpty())
    out += QObject::tr(" *System prompt:* %1").arg(c.settings.system_prompt);
  out += QStringLiteral("\n\n");
  for (const StoredMessage& m : c.messages) {
    const bool user = m.role == QLatin1String("user");
    QString who =
        user ? QObject::tr("You") : (m.model.isEmpty() ? QObject::tr("Assistant") : m.model);
    QStringList details;
    if (!user && m.tokens > 0) details << QObject::tr("%1 tokens").arg(m.tokens);
    if (!user && m.tokens_per_s > 0)
      details << QObject::tr("%1 tokens/s").arg(m.tokens_per_s, 0, 'f', 1);
    if (m.stopped) details << QObject::tr("stopped");
    out += QStringLiteral("**%1**").arg(who);
    if (!details.isEmpty()) out += QStringLiteral(" · ") + details.join(QStringLiteral(" · "));
    out += QStringLiteral("\n\n");
    if (!m.thinking.isEmpty()) {
      out += QStringLiteral("<details><summary>%1</summary>\n\n%2\n\n</details>\n\n")
                 .arg(QObject::tr("Thinking"), m.thinking.trimmed());
    }
    out += m.content.trimmed() + QStringLiteral("\n\n");
  }
  return out.toUtf8();
}

QByteArray conversation_json(const ConversationExport& c) {
  QJsonArray messages;
  for (const StoredMessage& m : c.messages) {
    QJsonObject o{{QStringLiteral("role"), m.role}, {QStringLiteral("content"), m.content}};
    if (!m.thinking.isEmpty()) o.insert(QStringLiteral("reasoning_content"), m.thinking);
    if (!m.model.isEmpty()) o.insert(QStringLiteral("model"), m.model);
    if (m.stopped) o.insert(QStringLiteral("stopped"), true);
    if (m.tokens > 0) o.insert(QStringLiteral("tokens"), m.tokens);
    if (m.tokens_per_s > 0) o.insert(QStringLiteral("tokens_per_s"), m.tokens_per_s);
    messages.append(o);
  }
  if (!c.settings.system_prompt.isEmpty()) {
    messages.prepend(QJsonObject{{QStringLiteral("role"), QStringLiteral("system")},
                                 {QStringLiteral("content"), c.settings.system_prompt}});
  }
  const QJsonObject sampling{{QStringLiteral("temperature"), c.settings.temperature},
                             {QStringLiteral("top_p"), c.settings.top_p},
                             {QStringLiteral("top_k"), c.settings.top_k},
                             {QStringLiteral("min_p"), c.settings.min_p},
                             {QStringLiteral("max_tokens"), c.settings.max_tokens}};
  const QJsonObject doc{{QStringLiteral("title"), c.title},
                        {QStringLiteral("exported"), c.exported.toString(Qt::ISODate)},
                        {QStringLiteral("sampling"), sampling},
                        {QStringLiteral("messages"), messages}};
  return QJsonDocument(doc).toJson(QJsonDocument::Indented);
}

QString write_conversation(const ConversationExport& c, const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  const QByteArray bytes =
      suffix == QLatin1String("json") ? conversation_json(c) : conversation_markdown(c);
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit()) {
    return QObject::tr("The conversation could not be written to %1: %2. Choose another folder.")
        .arg(path, file.errorString());
  }
  return {};
}

}  // namespace tandem::ui
