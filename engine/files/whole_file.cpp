#include "engine/files/whole_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tandem::files {

std::string write_failure_words(int error_number) {
  if (error_number == ENOSPC || error_number == EDQUOT)
    return "the disk is full; free some space or choose a folder on another disk";
  if (error_number == EFBIG) {
    return "the file would be larger than this disk's file system or the limit on file size "
           "(ulimit -f) allows; choose a folder on another disk (FAT32 holds at most 4 GiB a "
           "file)";
  }
  return std::string(std::strerror(error_number)) + "; check the disk and the folder";
}

bool folder_writable_for(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::absolute(path, ec).parent_path();
  return !ec && std::filesystem::is_directory(folder, ec) && ::access(folder.c_str(), W_OK) == 0;
}

std::string write_whole_file(const std::string& path, std::string_view bytes, bool executable) {
  const std::string part = path + ".part";
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        executable ? 0777 : 0666);  // less the umask
  if (fd < 0) return write_failure_words(errno);
  const auto fail = [&](int error_number) {
    ::close(fd);
    ::unlink(part.c_str());
    return write_failure_words(error_number);
  };
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return fail(errno);
  if (::close(fd) != 0) {
    const int error_number = errno;
    ::unlink(part.c_str());
    return write_failure_words(error_number);
  }
  if (std::rename(part.c_str(), path.c_str()) != 0) {
    const int error_number = errno;
    ::unlink(part.c_str());
    return write_failure_words(error_number);
  }
  return {};
}

}  // namespace tandem::files
