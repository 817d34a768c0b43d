#include "engine/model/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/model/file_writing.h"
#include "engine/model/model_error.h"

namespace tandem::model {

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Declared>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), temp_(path + ".tmp") {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const Declared& t : tensors) {
    std::uint64_t n = kernels::dtype_size(t.dtype);
    for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
    header[t.name] = {{"dtype", std::string(kernels::dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  expected_ = offset;
  std::string text = header.dump();
  // Pad the header with spaces so the data starts 8-byte aligned.
  text.append((8 - (text.size() + 8) % 8) % 8, ' ');
  file_ = std::fopen(temp_.c_str(), "wb");
  if (file_ == nullptr) {
    throw ModelError(temp_ + ": cannot create the file (" + std::strerror(errno) +
                     "); check the folder is writable.");
  }
  unsigned char len[8];
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  if (std::fwrite(len, 1, 8, file_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    throw_write_failed(temp_, errno);
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) std::remove(temp_.c_str());
}

void SafetensorsWriter::write(const void* data, std::size_t bytes) {
  if (written_ + bytes > expected_)
    throw ModelError(temp_ + ": more data than the declared tensors hold.");
  if (std::fwrite(data, 1, bytes, file_) != bytes) throw_write_failed(temp_, errno);
  written_ += bytes;
}

void SafetensorsWriter::finish() {
  if (written_ != expected_) {
    throw ModelError(temp_ + ": " + std::to_string(written_) + " of " + std::to_string(expected_) +
                     " bytes were written; the file is incomplete.");
  }
  put_in_place(file_, temp_, path_);
  finished_ = true;
}

}  // namespace tandem::model
