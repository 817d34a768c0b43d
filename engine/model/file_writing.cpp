#include "engine/model/file_writing.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "engine/files/whole_file.h"
#include "engine/model/model_error.h"

namespace tandem::model {

void throw_write_failed(const std::string& temp, int error_number) {
  throw ModelError(temp + ": writing failed: " + files::write_failure_words(error_number) +
                   ", then run the same conversion again.");
}

void put_in_place(std::FILE*& file, const std::string& temp, const std::string& path) {
  if (std::fflush(file) != 0 || fsync(fileno(file)) != 0 || std::fclose(file) != 0) {
    const int error_number = errno;
    file = nullptr;
    throw_write_failed(temp, error_number);
  }
  file = nullptr;
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) throw ModelError(path + ": could not be put in place (" + ec.message() + ").");
}

}  // namespace tandem::model
