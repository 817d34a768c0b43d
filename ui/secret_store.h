// Secrets the user gives Tandem (the Hub token, the local server's API key), kept out of
// the settings file: each in a file of its own that only the user can read (0600, in a 0700
// folder of the configuration folder), written whole and renamed into place. A value an
// earlier Tandem kept in the settings moves there the first time it is read.
#pragma once

#include <QString>

namespace tandem::ui::secrets {

// `name`: "hub-token", "server-api-key". `legacy_key`: where the settings kept it before.
QString read(const QString& name, const QString& legacy_key = {});
// Empty `value` removes it. False, with the reason in `error`, when it cannot be written.
bool write(const QString& name, const QString& value, QString* error = nullptr);
QString path(const QString& name);

}  // namespace tandem::ui::secrets
