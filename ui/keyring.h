// The desktop's secret store (the freedesktop Secret Service that GNOME Keyring and KWallet
// provide), through libsecret. Plain C++: glib's headers stay out of the Qt code. Every call
// is a short D-Bus round trip to the service; a locked keyring may show the desktop's own
// unlock prompt.
#pragma once

#include <optional>
#include <string>

namespace tandem::ui::keyring {

// True when this session has a D-Bus session bus (DBUS_SESSION_BUS_ADDRESS, or the bus
// socket in XDG_RUNTIME_DIR) and a Secret Service answers on it. Without a bus address
// nothing is tried, so no bus is ever started on Tandem's behalf.
bool available();

// The secret kept under `name`; nullopt when there is none. Throws std::runtime_error with
// the service's reason when it cannot be asked.
std::optional<std::string> lookup(const std::string& name);
// Keeps `value` under `name` (replacing an older one), shown in the keyring's own window
// as `label`. Throws std::runtime_error with the service's reason.
void store(const std::string& name, const std::string& label, const std::string& value);
// Removes the secret kept under `name`, if any. Throws std::runtime_error.
void clear(const std::string& name);

}  // namespace tandem::ui::keyring
