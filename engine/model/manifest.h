// The manifest of a converted folder (tandem-manifest.json): what was converted from which
// source, how, and where each packed tensor lies. It is rewritten after every finished file,
// so an interrupted conversion can resume, and says "complete" only when everything is in
// place; a loader refuses a folder whose manifest does not.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/packed/matmul.h"

namespace tandem::model {

inline constexpr const char* kManifestName = "tandem-manifest.json";
// A folder converted from a GGUF model holds the source's metadata (its tokenizer and chat
// template among it) and the tensors used as stored in this file; see gguf/model.h.
inline constexpr const char* kConvertedGgufName = "base.gguf";
// The path of that file when `path` is a folder converted from a GGUF model; empty otherwise.
std::string converted_gguf(const std::string& path);
// 2: routed experts may be split for several pools (`pools`), each slice a tensor of its
// own. Version 1 folders (always one pool) still load.
// 3: INT4 keeps a scale and an offset per group in headers beside the weights (before: one
// symmetric scale per group, apart); older INT4 tensors are refused with a sentence, older
// INT8, BF16 and MXFP4 ones still load.
// 5: INT8 tensors may be rotated (`rotation`: the block, kernels::pack_int8_rotated); a Tandem
// that reads version 4 would multiply them unrotated, so it refuses them by their version.
inline constexpr int kFormatVersion = 5;
inline constexpr int kFirstAsymmetricInt4Version = 3;
// INT8 with an FP16 scale per 32 columns in the blocks (one float per row before).
inline constexpr int kFirstGroupedInt8Version = 4;

// Mxfp4: the routed experts kept as MXFP4 (models that store them so: gpt-oss), the rest
// INT8 as for Int4. Int4Down8: as Int4, the routed experts' down projections INT8 too.
// Int8Rotated: INT8 rotated, one scale per row and rotation block (kernels::pack_int8_rotated).
enum class Method { Int8, Int4, Bf16, Mxfp4, Int4Down8, Int8Rotated };
// Every method, in the order a sentence lists them.
inline constexpr Method kMethods[] = {Method::Int8,      Method::Int8Rotated, Method::Int4,
                                      Method::Int4Down8, Method::Bf16,        Method::Mxfp4};
std::string_view method_name(Method m);
bool parse_method(std::string_view name, Method& out);
// "int8, int8-rotated, int4, int4-down8, bf16 or mxfp4": every method's name, for a sentence.
std::string method_names_in_words();
// Names joined for a sentence: "a, b or c".
std::string names_in_words(const std::vector<std::string_view>& names);
// The format of the routed experts' gate and up projections (their downs may differ:
// model::packed_format_for).
kernels::PackedFormat packed_format(Method m);

// A source shard, fingerprinted by its size and the sha256 of its safetensors header (the
// JSON that names every tensor, its dtype, shape and offsets), not of its contents: hashing
// 60 GB would add minutes to every conversion and every resume, while any re-download,
// different revision or truncation changes the header or the size.
struct SourceFile {
  std::string name;
  std::uint64_t bytes = 0;
  std::string header_sha256;
  bool operator==(const SourceFile&) const = default;
};

// A finished output file with the sha256 of its contents, checked before a resume keeps it.
struct OutputFile {
  std::string name;
  std::uint64_t bytes = 0;
  std::string sha256;
};

struct PackedTensor {
  std::string file;
  kernels::PackedFormat format = kernels::PackedFormat::Int8;
  std::int64_t rows = 0, cols = 0, cols_padded = 0, group = 0;
  std::int64_t rotation = 0;  // INT8 rotated in blocks of this many columns; 0: not rotated
  std::uint64_t offset = 0, size = 0;              // packed bytes, absolute in the file
  std::uint64_t scale_offset = 0, scale_size = 0;  // fp32 scales (none for BF16)
};

struct Manifest {
  int format_version = kFormatVersion;
  bool complete = false;
  Method method = Method::Int8;
  std::int64_t group = 0;
  int pools = 1;            // the thread pools the experts are split for
  bool dense_bf16 = false;  // "dense_format": "bf16"; absent or "same": as the method
  std::string source_folder;
  std::string config_sha256;
  std::vector<SourceFile> source_files;
  std::vector<OutputFile> files;
  std::map<std::string, PackedTensor> tensors;
};

// Throws model::ModelError with a sentence for a missing or malformed manifest.
Manifest read_manifest(const std::string& folder);
// Writes the manifest under a temporary name and renames it into place.
void write_manifest(const std::string& folder, const Manifest& manifest);

}  // namespace tandem::model
