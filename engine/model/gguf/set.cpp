#include "engine/model/gguf/set.h"

#include <fmt/format.h>

#include <filesystem>
#include <regex>
#include <stdexcept>

namespace tandem::model {
namespace {

namespace fs = std::filesystem;

// The split keys of one part; absent ones are -1.
struct SplitKeys {
  std::int64_t number = -1, count = -1, tensors = -1;  // split.no is 0-based
};

std::int64_t integer_or(const GgufFile& file, const char* key) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return -1;
  if (!v->is_integer()) {
    throw std::runtime_error(
        fmt::format("{}: {} is a {}, not a whole number. The file is "
                    "damaged; download it again.",
                    file.path(), key, gguf_type_name(v->type())));
  }
  return v->as_int();
}

SplitKeys split_keys(const GgufFile& file) {
  return {integer_or(file, "split.no"), integer_or(file, "split.count"),
          integer_or(file, "split.tensors.count")};
}

std::string file_name(const std::string& path) {
  return fs::path(path).filename().string();
}

}  // namespace

std::string GgufSplitName::part_path(int n) const {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, n, count);
}

std::optional<GgufSplitName> parse_gguf_split_name(const std::string& path) {
  static const std::regex pattern(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)");
  std::smatch m;
  if (!std::regex_match(path, m, pattern)) return std::nullopt;
  return GgufSplitName{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
}

GgufSet::GgufSet(const std::string& path) {
  const std::optional<GgufSplitName> name = parse_gguf_split_name(path);
  if (!name) {
    parts_.push_back(std::make_unique<GgufFile>(path));
    const SplitKeys keys = split_keys(*parts_.front());
    if (keys.count > 1) {
      throw std::runtime_error(fmt::format(
          "{} is part {} of a GGUF set of {} files, but its name does not say so; keep the "
          "names the parts were downloaded with (NAME-00001-of-{:05d}.gguf) and open any part.",
          path, keys.number + 1, keys.count, keys.count));
    }
  } else {
    if (name->count < 1 || name->number < 1 || name->number > name->count) {
      throw std::runtime_error(
          fmt::format("{}: the name says part {} of {}, which cannot be; rename the file as it was "
                      "downloaded.",
                      path, name->number, name->count));
    }
    // Every part present before any is opened, so the sentence names all that are missing.
    std::vector<std::string> missing;
    for (int n = 1; n <= name->count; ++n) {
      std::error_code ec;
      if (!fs::is_regular_file(name->part_path(n), ec)) missing.push_back(name->part_path(n));
    }
    if (!missing.empty()) {
      throw std::runtime_error(fmt::format(
          "{} is part of a set of {} GGUF files, and {} of them {} missing ({}{}); download "
          "every part of the set into the same folder, then open it again.",
          file_name(path), name->count, missing.size(), missing.size() == 1 ? "is" : "are",
          missing.front(), missing.size() > 1 ? " and others" : ""));
    }
    for (int n = 1; n <= name->count; ++n) {
      parts_.push_back(std::make_unique<GgufFile>(name->part_path(n)));
      const GgufFile& part = *parts_.back();
      const SplitKeys keys = split_keys(part);
      if (name->count > 1 && (keys.count != name->count || keys.number != n - 1)) {
        throw std::runtime_error(fmt::format(
            "{} is named part {} of {}, but its metadata says {}; the parts come from "
            "different downloads. Download the set again.",
            part.path(), n, name->count,
            keys.count < 0 ? std::string("it is not part of a split set")
                           : fmt::format("part {} of {}", keys.number + 1, keys.count)));
      }
    }
  }

  for (const auto& part : parts_) {
    std::error_code ec;
    file_bytes_ += fs::file_size(part->path(), ec);
    for (const GgufTensorInfo& t : part->tensors()) {
      const auto [at, inserted] = tensors_.emplace(t.name, Tensor{part.get(), &t});
      if (!inserted) {
        throw std::runtime_error(fmt::format(
            "The tensor {} is in both {} and {}; the parts come from different downloads. "
            "Download the set again.",
            t.name, file_name(at->second.file->path()), file_name(part->path())));
      }
    }
  }
  const SplitKeys first = split_keys(*parts_.front());
  if (first.tensors >= 0 && static_cast<std::uint64_t>(first.tensors) != tensors_.size()) {
    throw std::runtime_error(fmt::format(
        "{} says the set holds {} tensors, but its {} part{} hold {}; a part comes from "
        "another download. Download the set again.",
        parts_.front()->path(), first.tensors, parts_.size(), parts_.size() == 1 ? "" : "s",
        tensors_.size()));
  }
}

}  // namespace tandem::model
