#include "engine/model/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/model/model_error.h"

namespace tandem::model {

std::string_view method_name(Method m) {
  switch (m) {
    case Method::Int8:
      return "int8";
    case Method::Int4:
      return "int4";
    case Method::Bf16:
      return "bf16";
    case Method::Mxfp4:
      return "mxfp4";
    case Method::Int4Down8:
      return "int4-down8";
    case Method::Int8Rotated:
      return "int8-rotated";
  }
  return "int8";
}

bool parse_method(std::string_view name, Method& out) {
  for (Method m : kMethods) {
    if (name == method_name(m)) {
      out = m;
      return true;
    }
  }
  return false;
}

std::string names_in_words(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

std::string method_names_in_words() {
  std::vector<std::string_view> names;
  for (Method m : kMethods) names.push_back(method_name(m));
  return names_in_words(names);
}

kernels::PackedFormat packed_format(Method m) {
  switch (m) {
    case Method::Int8:
    case Method::Int8Rotated:
      return kernels::PackedFormat::Int8;
    case Method::Int4:
    case Method::Int4Down8:
      return kernels::PackedFormat::Int4;
    case Method::Bf16:
      return kernels::PackedFormat::Bf16;
    case Method::Mxfp4:
      return kernels::PackedFormat::Mxfp4;
  }
  return kernels::PackedFormat::Int8;
}

namespace {

// A count or byte offset of the manifest: a whole number from 0 up, never a float cast
// (a float out of range is undefined behaviour, as fuzzing found).
template <typename T>
T whole(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() ||
      (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    throw nlohmann::json::type_error::create(
        302, std::string("\"") + key + "\" is not a whole number from 0 up", &v);
  return v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>())
                                : static_cast<T>(v.get<std::int64_t>());
}

}  // namespace

std::string converted_gguf(const std::string& path) {
  const std::filesystem::path folder(path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(folder / kManifestName, ec) ||
      !std::filesystem::is_regular_file(folder / kConvertedGgufName, ec))
    return {};
  return (folder / kConvertedGgufName).string();
}

Manifest read_manifest(const std::string& folder) {
  const std::string path = (std::filesystem::path(folder) / kManifestName).string();
  std::ifstream in(path);
  if (!in)
    throw model::ModelError(path + ": cannot be read; is this a folder written by tandem convert?");
  Manifest m;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    m.format_version = whole<int>(j, "format_version");
    if (m.format_version < 1 || m.format_version > kFormatVersion) {
      throw model::ModelError(
          path + ": converted with format version " + std::to_string(m.format_version) +
          ", but this Tandem reads versions 1 to " + std::to_string(kFormatVersion) +
          "; convert the model again with this version.");
    }
    m.complete = j.at("complete").get<bool>();
    if (!parse_method(j.at("method").get<std::string>(), m.method)) {
      throw model::ModelError(path + ": unknown conversion method " + j.at("method").dump() + ".");
    }
    m.group = whole<std::int64_t>(j, "group");
    m.pools = m.format_version >= 2 ? whole<int>(j, "pools") : 1;
    m.dense_bf16 = j.value("dense_format", std::string("same")) == "bf16";
    if (m.pools < 1) {
      throw model::ModelError(path + ": the manifest names " + std::to_string(m.pools) +
                              " pools; the folder is damaged, convert the model again.");
    }
    const auto& source = j.at("source");
    m.source_folder = source.at("folder").get<std::string>();
    m.config_sha256 = source.at("config_sha256").get<std::string>();
    for (const auto& f : source.at("files")) {
      m.source_files.push_back(
          {f.at("name"), whole<std::uint64_t>(f, "bytes"), f.at("header_sha256")});
    }
    for (const auto& f : j.at("files"))
      m.files.push_back({f.at("name"), whole<std::uint64_t>(f, "bytes"), f.at("sha256")});
    for (const auto& [name, t] : j.at("tensors").items()) {
      PackedTensor p;
      p.file = t.at("file").get<std::string>();
      const std::string format = t.at("format").get<std::string>();
      Method fm;
      // A tensor's format is a kernel format; int4-down8 names a mix of two, int8-rotated
      // is int8 with a rotation.
      if (!parse_method(format, fm) || fm == Method::Int4Down8 || fm == Method::Int8Rotated)
        throw model::ModelError(path + ": tensor " + name + " has unknown format " + format + ".");
      p.format = packed_format(fm);
      p.rows = whole<std::int64_t>(t, "rows");
      p.cols = whole<std::int64_t>(t, "cols");
      p.cols_padded = whole<std::int64_t>(t, "cols_padded");
      p.group = whole<std::int64_t>(t, "group");
      p.offset = whole<std::uint64_t>(t, "offset");
      p.size = whole<std::uint64_t>(t, "size");
      p.scale_offset = whole<std::uint64_t>(t, "scale_offset");
      p.scale_size = whole<std::uint64_t>(t, "scale_size");
      p.rotation = t.contains("rotation") ? whole<std::int64_t>(t, "rotation") : 0;
      if (p.rotation != 0 && (p.format != kernels::PackedFormat::Int8 ||
                              p.rotation != kernels::int8_rotation_for(p.cols))) {
        throw model::ModelError(path + ": tensor " + name + " names a rotation of " +
                                std::to_string(p.rotation) +
                                " columns that its format and width (" + std::to_string(p.cols) +
                                ") do not take; the folder is damaged, convert the model again.");
      }
      m.tensors.emplace(name, std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    throw model::ModelError(path + ": the manifest is damaged (" + std::string(e.what()) +
                            "); delete the folder and convert again.");
  }
  // Packed formats whose layout changed since the folder was written: one sentence, INT4's
  // first (the older change).
  const auto holds = [&](kernels::PackedFormat f) {
    return std::any_of(m.tensors.begin(), m.tensors.end(),
                       [&](const auto& named) { return named.second.format == f; });
  };
  if (m.format_version < kFirstAsymmetricInt4Version && holds(kernels::PackedFormat::Int4)) {
    throw model::ModelError(
        path +
        ": its INT4 weights were written by an earlier Tandem, with one symmetric scale per "
        "group; this version keeps a scale and an offset per group beside the weights. "
        "Delete the folder and convert the model again.");
  }
  if (m.format_version < kFirstGroupedInt8Version && holds(kernels::PackedFormat::Int8)) {
    throw model::ModelError(
        path +
        ": its INT8 weights were written by an earlier Tandem, with one scale per row; this "
        "version keeps a scale per 32 columns, which holds a model's predictions closer to the "
        "original. Delete the folder and convert the model again.");
  }
  return m;
}

void write_manifest(const std::string& folder, const Manifest& m) {
  nlohmann::json j;
  j["format"] = "tandem-cpu-weights";
  j["format_version"] = m.format_version;
  j["complete"] = m.complete;
  j["method"] = method_name(m.method);
  j["group"] = m.group;
  j["pools"] = m.pools;
  j["dense_format"] = m.dense_bf16 ? "bf16" : "same";
  nlohmann::json files = nlohmann::json::array();
  for (const SourceFile& f : m.source_files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"header_sha256", f.header_sha256}});
  j["source"] = {{"folder", m.source_folder}, {"config_sha256", m.config_sha256}, {"files", files}};
  nlohmann::json out = nlohmann::json::array();
  for (const OutputFile& f : m.files)
    out.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  j["files"] = out;
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : m.tensors) {
    tensors[name] = {{"file", t.file},
                     {"format", kernels::packed_format_name(t.format)},
                     {"rows", t.rows},
                     {"cols", t.cols},
                     {"cols_padded", t.cols_padded},
                     {"group", t.group},
                     {"offset", t.offset},
                     {"size", t.size},
                     {"scale_offset", t.scale_offset},
                     {"scale_size", t.scale_size},
                     {"rotation", t.rotation}};
  }
  j["tensors"] = tensors;
  const std::filesystem::path final_path = std::filesystem::path(folder) / kManifestName;
  const std::string temp = final_path.string() + ".tmp";
  {
    std::ofstream o(temp, std::ios::trunc);
    o << j.dump(1) << '\n';
    o.flush();
    if (!o) {
      std::filesystem::remove(temp);
      throw model::ModelError(temp +
                              ": cannot be written; is the disk full or the folder read-only?");
    }
  }
  std::filesystem::rename(temp, final_path);
}

}  // namespace tandem::model
