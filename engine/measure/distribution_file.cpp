#include "engine/measure/distribution_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/files/whole_file.h"
#include "engine/hw/disk_space.h"
#include "kernels/cpu/dtype.h"

namespace tandem::measure {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'D', 'I', 'S', 'T'};
constexpr int kVersion = 1;

nlohmann::json to_json(const DistributionHeader& h) {
  return {{"version", kVersion},
          {"vocab", h.vocab},
          {"context", h.context},
          {"text_tokens", h.text_tokens},
          {"evaluated_tokens", h.evaluated_tokens},
          {"ids_digest", h.ids_digest},
          {"model", h.model},
          {"cpu_format", h.cpu_format},
          {"kv_cache", h.kv_cache}};
}

// "714.8 MiB", "2.2 GiB".
std::string size_words(double bytes) {
  return bytes < double(1 << 30) ? fmt::format("{:.1f} MiB", bytes / (1 << 20))
                                 : fmt::format("{:.1f} GiB", bytes / (1 << 30));
}

std::runtime_error not_ours(const std::string& path, const std::string& why) {
  return std::runtime_error(path + " is not distributions saved by tandem perplexity " +
                            "--save-logits (" + why + "); save them again.");
}

}  // namespace

std::string digest_ids(std::span<const text::TokenId> ids) {
  std::uint64_t h = 14695981039346656037ull;
  for (const text::TokenId id : ids) {
    auto v = static_cast<std::uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return fmt::format("{:016x}", h);
}

DistributionWriter::DistributionWriter(std::string path, const DistributionHeader& header)
    : path_(std::move(path)), part_(path_ + ".part") {
  expected_ = header.evaluated_tokens;
  const double needed = static_cast<double>(header.evaluated_tokens) *
                        static_cast<double>(sizeof(float) + 2 * header.vocab);
  const hw::DiskSpace disk = hw::probe_disk_space(part_);
  if (disk.error.empty() && needed > static_cast<double>(disk.free_bytes)) {
    throw std::runtime_error(fmt::format(
        "--save-logits {} would take {} (the distributions of {} tokens over a vocabulary of "
        "{}, 2 bytes each), and {} has {} free; choose a folder on a disk with room, or a "
        "shorter text.",
        path_, size_words(needed), header.evaluated_tokens, header.vocab, disk.measured_path,
        size_words(static_cast<double>(disk.free_bytes))));
  }
  file_ = std::fopen(part_.c_str(), "wb");
  if (file_ == nullptr) {
    throw std::runtime_error("--save-logits " + path_ +
                             " cannot be written: " + files::write_failure_words(errno) + ".");
  }
  const std::string json = to_json(header).dump();
  const auto length = static_cast<std::uint32_t>(json.size());
  write(kMagic, sizeof kMagic);
  write(&length, sizeof length);
  write(json.data(), json.size());
  record_.resize(static_cast<std::size_t>(header.vocab));
}

DistributionWriter::~DistributionWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    ::unlink(part_.c_str());
  }
}

void DistributionWriter::write(const void* data, std::size_t bytes) {
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    const int error_number = errno;
    std::fclose(file_);
    file_ = nullptr;
    ::unlink(part_.c_str());
    throw std::runtime_error("--save-logits " + path_ + " cannot be written: " +
                             files::write_failure_words(error_number) + ".");
  }
}

void DistributionWriter::add(const std::vector<double>& log_p) {
  // Below the likeliest token's, where FP16 is finest for the tokens that carry the mass.
  const auto largest = static_cast<float>(*std::max_element(log_p.begin(), log_p.end()));
  for (std::size_t i = 0; i < record_.size(); ++i)
    record_[i] = kernels::f32_to_f16(static_cast<float>(log_p[i] - largest));
  write(&largest, sizeof largest);
  write(record_.data(), record_.size() * sizeof(std::uint16_t));
  ++written_;
}

void DistributionWriter::finish() {
  if (written_ != expected_) {
    throw std::logic_error(fmt::format("{} distributions written of {}", written_, expected_));
  }
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fflush(file) != 0 || ::fsync(fileno(file)) != 0 || std::fclose(file) != 0) {
    const int error_number = errno;
    ::unlink(part_.c_str());
    throw std::runtime_error("--save-logits " + path_ + " cannot be written: " +
                             files::write_failure_words(error_number) + ".");
  }
  if (std::rename(part_.c_str(), path_.c_str()) != 0) {
    const int error_number = errno;
    ::unlink(part_.c_str());
    throw std::runtime_error("--save-logits " + path_ + " cannot be put in place: " +
                             files::write_failure_words(error_number) + ".");
  }
}

DistributionReader::DistributionReader(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (file_ == nullptr) {
    throw std::runtime_error("cannot read " + path_ + " (" + std::strerror(errno) +
                             "); check the path.");
  }
  char magic[sizeof kMagic] = {};
  std::uint32_t length = 0;
  if (std::fread(magic, 1, sizeof magic, file_) != sizeof magic ||
      std::memcmp(magic, kMagic, sizeof kMagic) != 0 ||
      std::fread(&length, sizeof length, 1, file_) != 1 || length > (1u << 20)) {
    std::fclose(file_);
    file_ = nullptr;
    throw not_ours(path_, "its first bytes are another file's");
  }
  std::string text(length, '\0');
  nlohmann::json j;
  try {
    if (std::fread(text.data(), 1, length, file_) != length) throw std::runtime_error("short");
    j = nlohmann::json::parse(text);
    if (j.at("version").get<int>() != kVersion)
      throw std::runtime_error("version " + j.at("version").dump());
    header_.vocab = j.at("vocab").get<std::int64_t>();
    header_.context = j.at("context").get<std::int64_t>();
    header_.text_tokens = j.at("text_tokens").get<std::int64_t>();
    header_.evaluated_tokens = j.at("evaluated_tokens").get<std::int64_t>();
    header_.ids_digest = j.at("ids_digest").get<std::string>();
    header_.model = j.at("model").get<std::string>();
    header_.cpu_format = j.at("cpu_format").get<std::string>();
    header_.kv_cache = j.at("kv_cache").get<std::string>();
    if (header_.vocab <= 0 || header_.vocab > (std::int64_t{1} << 24) ||
        header_.evaluated_tokens < 0)
      throw std::runtime_error("sizes out of range");
  } catch (const std::exception& e) {
    std::fclose(file_);
    file_ = nullptr;
    throw not_ours(path_, std::string("its header cannot be read: ") + e.what());
  }
  record_.resize(static_cast<std::size_t>(header_.vocab));
}

DistributionReader::~DistributionReader() {
  if (file_ != nullptr) std::fclose(file_);
}

double DistributionReader::next_kl(const std::vector<double>& log_q) {
  float largest = 0.0f;
  if (read_ >= header_.evaluated_tokens || std::fread(&largest, sizeof largest, 1, file_) != 1 ||
      std::fread(record_.data(), sizeof(std::uint16_t), record_.size(), file_) != record_.size()) {
    throw std::runtime_error(path_ + " ends after " + std::to_string(read_) + " of its " +
                             std::to_string(header_.evaluated_tokens) +
                             " tokens' distributions; save them again.");
  }
  ++read_;
  // Normalised again after FP16's rounding, so that a model compared with itself gives 0, not a
  // rounding's worth below it.
  values_.resize(record_.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < record_.size(); ++i) {
    values_[i] = static_cast<double>(largest) + kernels::f16_to_f32(record_[i]);
    sum += std::exp(values_[i]);
  }
  const double log_sum = std::log(sum);
  double kl = 0.0;
  for (std::size_t i = 0; i < record_.size(); ++i) {
    const double lp = values_[i] - log_sum;
    if (std::isinf(lp)) continue;  // no probability
    kl += std::exp(lp) * (lp - log_q[i]);
  }
  return kl;
}

}  // namespace tandem::measure
