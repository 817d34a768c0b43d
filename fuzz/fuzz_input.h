// What the fuzz targets share: the input as a file (the parsers read files, as Tandem reads
// what it downloads), written to an anonymous in-memory file so nothing touches the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace tandem::fuzz {

// An in-memory file holding the input, reachable by a path while it lives.
class MemoryFile {
 public:
  MemoryFile(const std::uint8_t* data, std::size_t size) {
    fd_ = ::memfd_create("tandem-fuzz", 0);
    std::size_t done = 0;
    while (fd_ >= 0 && done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A folder with one file of the input under `name`, for the parsers that read a model
// folder (tokenizer.json, tandem-manifest.json). Made once per process, in memory (/dev/shm).
inline std::string folder_with(const std::string& name, const std::uint8_t* data,
                               std::size_t size) {
  static const std::string folder = [] {
    std::string f = "/dev/shm/tandem-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(f);
    return f;
  }();
  const std::string path = folder + "/" + name;
  if (std::FILE* out = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, out);
    std::fclose(out);
  }
  return folder;
}

}  // namespace tandem::fuzz
