#include "ui/keyring.h"

#include <libsecret/secret.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace tandem::ui::keyring {
namespace {

// Tandem's items: one attribute, the secret's name ("hub-token", "server-api-key").
const SecretSchema* schema() {
  static const SecretSchema s = {
      "app.tandem.Tandem.Secret",
      SECRET_SCHEMA_NONE,
      {{"name", SECRET_SCHEMA_ATTRIBUTE_STRING}, {nullptr, SECRET_SCHEMA_ATTRIBUTE_STRING}},
      0,
      nullptr,
      nullptr,
      nullptr,
      nullptr,
      nullptr,
      nullptr,
      nullptr};
  return &s;
}

// Throws the GError's message (and frees it) when there is one.
void throw_if(GError* error, const char* doing) {
  if (error == nullptr) return;
  std::string message = std::string("the desktop's keyring could not ") + doing + ": " +
                        (error->message != nullptr ? error->message : "no reason given");
  g_error_free(error);
  throw std::runtime_error(message);
}

bool session_bus_known() {
  const char* address = std::getenv("DBUS_SESSION_BUS_ADDRESS");
  if (address != nullptr && *address != '\0') return true;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::error_code ec;
  return runtime != nullptr && *runtime != '\0' &&
         std::filesystem::exists(std::filesystem::path(runtime) / "bus", ec);
}

}  // namespace

bool available() {
  if (!session_bus_known()) return false;
  GError* error = nullptr;
  SecretService* service = secret_service_get_sync(SECRET_SERVICE_NONE, nullptr, &error);
  if (error != nullptr) g_error_free(error);
  if (service == nullptr) return false;
  // Connected to the bus; the service itself may still be absent (no keyring daemon):
  // opening a session is a call it must answer.
  const bool answers = secret_service_ensure_session_sync(service, nullptr, &error);
  if (error != nullptr) g_error_free(error);
  g_object_unref(service);
  return answers;
}

std::optional<std::string> lookup(const std::string& name) {
  GError* error = nullptr;
  gchar* value =
      secret_password_lookup_sync(schema(), nullptr, &error, "name", name.c_str(), nullptr);
  throw_if(error, "be read");
  if (value == nullptr) return std::nullopt;
  std::string result(value);
  secret_password_free(value);
  return result;
}

void store(const std::string& name, const std::string& label, const std::string& value) {
  GError* error = nullptr;
  const gboolean stored =
      secret_password_store_sync(schema(), SECRET_COLLECTION_DEFAULT, label.c_str(), value.c_str(),
                                 nullptr, &error, "name", name.c_str(), nullptr);
  throw_if(error, "keep it");
  if (!stored) throw std::runtime_error("the desktop's keyring did not keep it");
}

void clear(const std::string& name) {
  GError* error = nullptr;
  secret_password_clear_sync(schema(), nullptr, &error, "name", name.c_str(), nullptr);
  throw_if(error, "remove it");
}

}  // namespace tandem::ui::keyring
