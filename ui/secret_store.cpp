#include "ui/secret_store.h"

#include <sys/stat.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <QSettings>
#include <QStandardPaths>

namespace tandem::ui::secrets {

QString path(const QString& name) {
  return QStandardPaths::writableLocation(QStandardPaths::AppConfigLocation) +
         QStringLiteral("/secrets/") + name;
}

bool write(const QString& name, const QString& value, QString* error) {
  const QString file = path(name);
  if (value.isEmpty()) {
    if (QFileInfo::exists(file) && !QFile::remove(file)) {
      if (error) *error = QObject::tr("%1 cannot be removed.").arg(file);
      return false;
    }
    return true;
  }
  const QString folder = QFileInfo(file).absolutePath();
  if (!QDir().mkpath(folder) || ::chmod(QFile::encodeName(folder).constData(), 0700) != 0) {
    if (error) *error = QObject::tr("The folder %1 cannot be made private.").arg(folder);
    return false;
  }
  QSaveFile out(file);
  const QByteArray bytes = value.toUtf8();
  // Private before a byte is written; the rename keeps the permissions.
  if (!out.open(QIODevice::WriteOnly) ||
      !out.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner) ||
      out.write(bytes) != bytes.size() || !out.commit()) {
    if (error) *error = QObject::tr("%1 cannot be written (%2).").arg(file, out.errorString());
    return false;
  }
  return true;
}

QString read(const QString& name, const QString& legacy_key) {
  if (!legacy_key.isEmpty()) {
    QSettings settings;
    const QString old = settings.value(legacy_key).toString();
    if (!old.isEmpty() && write(name, old)) settings.remove(legacy_key);
  }
  QFile f(path(name));
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QString::fromUtf8(f.readAll()).trimmed();
}

}  // namespace tandem::ui::secrets
