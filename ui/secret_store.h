// Secrets the user gives Tandem (the Hub token, the local server's API key), kept out of
// the settings file: in the desktop's keyring (the Secret Service, see keyring.h) where the
// session has one, otherwise each in a file of its own that only the user can read (0600,
// in a 0700 folder of the configuration folder), written whole and renamed into place. A
// value an earlier Tandem kept in the settings, or in a file before a keyring was there,
// moves to the keyring the first time it is read. A keyring that refuses (locked, the
// prompt dismissed) leaves the secret in the file, with the reason in the log.
#pragma once

#include <QString>

namespace tandem::ui::secrets {

// `name`: "hub-token", "server-api-key". `legacy_key`: where the settings kept it before.
QString read(const QString& name, const QString& legacy_key = {});
// Empty `value` removes it. False, with the reason in `error`, when it cannot be written.
bool write(const QString& name, const QString& value, QString* error = nullptr);
// The file a secret is kept in when there is no keyring.
QString path(const QString& name);
// True when secrets go to the desktop's keyring in this session.
bool in_keyring();

}  // namespace tandem::ui::secrets
