// The file a download is written to until it is verified: FILE.part, next to where the
// file will be. Opening it is injectable so tests can make writes fail (a full disk).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string_view>

namespace tandem::hub {

class PartFileWriter {
 public:
  virtual ~PartFileWriter() = default;
  // Appends; throws HubError (DiskFull or WriteFailed) with a sentence naming the file.
  virtual void write(std::string_view bytes) = 0;
  // Makes the bytes durable (fsync) and closes; throws like write().
  virtual void finish() = 0;
};

// Opens `part`, creating it, locks it against a second writer (HubError WriteFailed when
// another holds it), keeps its first `keep_bytes` bytes (dropping anything after, which a
// crash may have left half-written) and positions at the end.
using PartFileOpener = std::function<std::unique_ptr<PartFileWriter>(
    const std::filesystem::path& part, std::uint64_t keep_bytes)>;

std::unique_ptr<PartFileWriter> open_part_file(const std::filesystem::path& part,
                                               std::uint64_t keep_bytes);

// The sentence for a failed write or rename of `path` with errno `error_number`.
[[noreturn]] void throw_write_error(const std::filesystem::path& path, int error_number);

inline std::filesystem::path part_path_for(const std::filesystem::path& final_path) {
  return std::filesystem::path(final_path.string() + ".part");
}

}  // namespace tandem::hub
