#include "engine/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "engine/model/model_error.h"

namespace tandem::model {

namespace {

ModelError system_error(const std::string& path, const char* what) {
  return ModelError("Could not " + std::string(what) + " " + path + ": " + std::strerror(errno) +
                    ". Check that the path is right and readable.");
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error(path, "open");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    throw system_error(path, "inspect");
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw ModelError(path + " is not a regular file. Give the path of a model file.");
  }
  size_bytes_ = static_cast<std::size_t>(info.st_size);
  // mmap rejects a zero length; an empty file maps to an empty span and fails the
  // format's own size checks with a clearer sentence.
  if (size_bytes_ > 0) {
    void* address = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      throw system_error(path, "map");
    }
    data_ = static_cast<const std::byte*>(address);
  }
  ::close(fd);  // the mapping keeps the file referenced
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_bytes_);
  data_ = nullptr;
  size_bytes_ = 0;
}

}  // namespace tandem::model
