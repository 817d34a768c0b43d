#include "ui/desktop_integration.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QSaveFile>
#include <QSettings>
#include <QStandardPaths>

// The icon is a resource of this library, which a static link must register itself.
static void register_resources() {
  Q_INIT_RESOURCE(resources);
}

namespace tandem::ui::desktop_integration {
namespace {

constexpr auto kAskedKey = "desktop/integrationAsked";

QString data_home() {
  return QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation);
}

QString write_whole(const QString& path, const QByteArray& bytes) {
  if (!QDir().mkpath(QFileInfo(path).absolutePath()))
    return QObject::tr("The folder %1 cannot be created.").arg(QFileInfo(path).absolutePath());
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size() || !f.commit())
    return QObject::tr("%1 cannot be written (%2).").arg(path, f.errorString());
  return {};
}

// Exec's quoting (the Desktop Entry specification): reserved characters in double quotes,
// with ", `, $ and \ escaped.
QString quoted(const QString& path) {
  QString out;
  for (const QChar c : path) {
    if (c == QLatin1Char('"') || c == QLatin1Char('`') || c == QLatin1Char('$') ||
        c == QLatin1Char('\\'))
      out += QLatin1Char('\\');
    out += c;
  }
  return QLatin1Char('"') + out + QLatin1Char('"');
}

}  // namespace

QString appimage_path() {
  const QString path = qEnvironmentVariable("APPIMAGE");
  return !path.isEmpty() && QFileInfo(path).isFile() ? path : QString();
}

QString entry_path() {
  return data_home() + QStringLiteral("/applications/tandem-appimage.desktop");
}

QString icon_path() {
  return data_home() + QStringLiteral("/icons/hicolor/scalable/apps/tandem-appimage.svg");
}

bool installed() {
  return QFileInfo::exists(entry_path());
}

QString install(const QString& appimage) {
  register_resources();
  QFile icon(QStringLiteral(":/tandem/icons/tandem.svg"));
  if (!icon.open(QIODevice::ReadOnly))
    return QObject::tr("Tandem's icon is missing from this build.");
  if (QString e = write_whole(icon_path(), icon.readAll()); !e.isEmpty()) return e;
  const QString entry =
      QStringLiteral(
          "[Desktop Entry]\nType=Application\nName=Tandem\nGenericName=Local AI Chat\n"
          "Comment=Run large mixture-of-experts language models with your GPU and CPU in "
          "tandem\nExec=%1\nTryExec=%2\nIcon=tandem-appimage\nTerminal=false\n"
          "Categories=Utility;\nKeywords=LLM;AI;chat;MoE;\nX-AppImage-Path=%2\n")
          .arg(quoted(appimage), appimage);
  if (QString e = write_whole(entry_path(), entry.toUtf8()); !e.isEmpty()) return e;
  // Menus read the folder again when told; where the tool is missing they find it later.
  QProcess::startDetached(QStringLiteral("update-desktop-database"),
                          {QFileInfo(entry_path()).absolutePath()});
  return {};
}

QString remove() {
  for (const QString& path : {entry_path(), icon_path()}) {
    if (QFileInfo::exists(path) && !QFile::remove(path))
      return QObject::tr("%1 cannot be removed; check its folder's permissions.").arg(path);
  }
  return {};
}

bool asked() {
  return QSettings().value(QLatin1String(kAskedKey), false).toBool();
}

void set_asked() {
  QSettings().setValue(QLatin1String(kAskedKey), true);
}

}  // namespace tandem::ui::desktop_integration
