#include "engine/model/file_writing.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/model/model_error.h"

namespace tandem::model {

void throw_write_failed(const std::string& temp, int error_number) {
  std::string why;
  if (error_number == ENOSPC || error_number == EDQUOT) {
    why = "the disk is full; free some space or choose a folder on another disk";
  } else if (error_number == EFBIG) {
    why =
        "the file would be larger than this disk's file system or the limit on file size "
        "(ulimit -f) allows; choose a folder on another disk (FAT32 holds at most 4 GiB a file)";
  } else {
    why = std::string(std::strerror(error_number)) + "; check the disk and the folder";
  }
  throw ModelError(temp + ": writing failed: " + why + ", then run the same conversion again.");
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
