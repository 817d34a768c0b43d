#include "engine/hub/part_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/hub/hub_error.h"

namespace tandem::hub {
namespace {

class PosixPartFile final : public PartFileWriter {
 public:
  PosixPartFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixPartFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(std::string_view bytes) override {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_write_error(path_, errno);
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  void finish() override {
    if (::fsync(fd_) != 0) throw_write_error(path_, errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw_write_error(path_, errno);
  }

 private:
  std::filesystem::path path_;
  int fd_;
};

}  // namespace

void throw_write_error(const std::filesystem::path& path, int error_number) {
  if (error_number == ENOSPC || error_number == EDQUOT) {
    throw HubError(
        HubErrorKind::DiskFull,
        fmt::format("The disk is full: writing {} failed. Free some space (or choose another "
                    "folder), then resume; what was downloaded so far is kept.",
                    path.string()));
  }
  if (error_number == EFBIG) {
    throw HubError(HubErrorKind::WriteFailed,
                   fmt::format("Could not write {}: the file is larger than this disk's file "
                               "system or the limit on file size (ulimit -f) allows. Choose a "
                               "folder on another disk (FAT32 holds at most 4 GiB a file).",
                               path.string()));
  }
  throw HubError(HubErrorKind::WriteFailed,
                 fmt::format("Could not write {}: {}. Check that the folder is writable.",
                             path.string(), std::strerror(error_number)));
}

std::unique_ptr<PartFileWriter> open_part_file(const std::filesystem::path& part,
                                               std::uint64_t keep_bytes) {
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(part, errno);
  // Two downloads writing one .part would interleave their bytes; the lock (released when
  // the file is closed, or the process dies) keeps a second one out before it truncates.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error_number = errno;
    ::close(fd);
    if (error_number == EWOULDBLOCK) {
      throw HubError(
          HubErrorKind::WriteFailed,
          fmt::format("{} is being downloaded by another Tandem window or tandem download "
                      "command; let that one finish or stop it, then try again.",
                      part.string()));
    }
    throw_write_error(part, error_number);
  }
  if (::ftruncate(fd, static_cast<off_t>(keep_bytes)) != 0 ||
      ::lseek(fd, static_cast<off_t>(keep_bytes), SEEK_SET) < 0) {
    const int error_number = errno;
    ::close(fd);
    throw_write_error(part, error_number);
  }
  return std::make_unique<PosixPartFile>(part, fd);
}

}  // namespace tandem::hub
