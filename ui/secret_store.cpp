#include "ui/secret_store.h"

#include <sys/stat.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <QSettings>
#include <QStandardPaths>
#include <stdexcept>

#include "engine/log/log.h"
#include "ui/keyring.h"

namespace tandem::ui::secrets {
namespace {

std::string label(const QString& name) {
  if (name == QLatin1String("hub-token")) return "Tandem: Hugging Face token";
  if (name == QLatin1String("server-api-key")) return "Tandem: local server API key";
  return "Tandem: " + name.toStdString();
}

bool remove_file(const QString& name, QString* error) {
  const QString file = path(name);
  if (QFileInfo::exists(file) && !QFile::remove(file)) {
    if (error) *error = QObject::tr("%1 cannot be removed.").arg(file);
    return false;
  }
  return true;
}

bool write_file(const QString& name, const QString& value, QString* error) {
  if (value.isEmpty()) return remove_file(name, error);
  const QString file = path(name);
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

QString read_file(const QString& name) {
  QFile f(path(name));
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QString::fromUtf8(f.readAll()).trimmed();
}

}  // namespace

QString path(const QString& name) {
  return QStandardPaths::writableLocation(QStandardPaths::AppConfigLocation) +
         QStringLiteral("/secrets/") + name;
}

bool in_keyring() {
  return keyring::available();
}

bool write(const QString& name, const QString& value, QString* error) {
  if (keyring::available()) {
    try {
      if (value.isEmpty()) {
        keyring::clear(name.toStdString());
      } else {
        keyring::store(name.toStdString(), label(name), value.toStdString());
      }
      // A copy an earlier Tandem kept in a file goes once the keyring has it.
      return remove_file(name, error);
    } catch (const std::runtime_error& e) {
      log::warn("{}; {} is kept in {} instead, readable by you only.", e.what(), name.toStdString(),
                path(name).toStdString());
    }
  }
  return write_file(name, value, error);
}

QString read(const QString& name, const QString& legacy_key) {
  if (!legacy_key.isEmpty()) {
    QSettings settings;
    const QString old = settings.value(legacy_key).toString();
    if (!old.isEmpty() && write(name, old)) settings.remove(legacy_key);
  }
  if (keyring::available()) {
    try {
      if (const auto value = keyring::lookup(name.toStdString()))
        return QString::fromStdString(*value).trimmed();
      // Kept in a file before the keyring was there: it moves into the keyring now.
      const QString value = read_file(name);
      if (!value.isEmpty()) {
        keyring::store(name.toStdString(), label(name), value.toStdString());
        remove_file(name, nullptr);
      }
      return value;
    } catch (const std::runtime_error& e) {
      log::warn("{}; reading {} from {} instead.", e.what(), name.toStdString(),
                path(name).toStdString());
    }
  }
  return read_file(name);
}

}  // namespace tandem::ui::secrets
