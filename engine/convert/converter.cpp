#include "engine/convert/converter.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "engine/hub/content_digest.h"
#include "engine/hw/pool_placement.h"
#include "engine/hw/topology.h"
#include "engine/log/log.h"
#include "engine/model/checkpoint.h"
#include "engine/model/expert_slicing.h"
#include "engine/model/ggml_type.h"
#include "engine/model/gguf/model.h"
#include "engine/model/gguf/writer.h"
#include "engine/model/loaded_model.h"
#include "engine/model/model_error.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/model/safetensors_file.h"
#include "engine/model/safetensors_writer.h"

namespace tandem::convert {

using model::Manifest;
using model::Method;
using model::OutputFile;
using model::PackedTensor;
using model::SourceFile;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kBaseFile = "base.safetensors";
constexpr const char* kOutputHeadFile = "output.safetensors";
// Source bytes per second and packing thread assumed by estimates, as measured on the
// Qwen3-30B-A3B-shaped model (AVX-512 laptop-class core, bf16 source): INT8 and BF16 about
// 200 MB/s, INT4 about 75 MB/s (its scale search tries nine clipping factors per group).
// INT4 with INT8 downs took as long as INT4 (the 8-layer synthetic, 2 threads: 55.4 s
// against 54.5 s; INT8 16.2 s).
double estimated_bytes_per_second_per_thread(model::Method m) {
  return model::has_int4(model::cpu_format_of(m)) ? 75e6 : 200e6;
}

struct PackedItem {
  std::string name;
  const kernels::WeightMatrix* matrix = nullptr;
  const model::TensorRef* source = nullptr;
  kernels::PackedMatrix shape;  // sizes only
  // A routed expert's matrix split for several pools is one item per pool, each packing
  // `range` of the matrix along `axis`; the source's bytes count 1/pools to each, and its
  // pages are released after the last.
  bool sliced = false;
  model::SliceAxis axis = model::SliceAxis::Rows;
  model::SliceRange range;
  std::uint64_t source_bytes = 0;
  bool last_of_source = true;
};

struct RawItem {
  std::string name;
  const model::TensorRef* ref = nullptr;
};

// One output file: the tensors used as stored, one layer's packed matrices, or the head.
struct Unit {
  std::string file;
  int layer = 0;
  std::vector<RawItem> raw;
  std::vector<PackedItem> packed;
  // base.gguf of a GGUF source: the stored tensors it copies, and those it leaves out.
  std::vector<std::string> gguf_tensors, gguf_omitted;
  std::uint64_t source_bytes = 0;
  std::uint64_t output_bytes = 0;
};

struct Plan {
  model::ModelSpec spec;
  std::unique_ptr<model::Checkpoint> checkpoint;
  model::ModelWeights weights;
  std::int64_t group = 0;
  int pools = 1;
  std::vector<Unit> units;
  std::uint64_t source_bytes = 0;
  std::uint64_t output_bytes = 0;
};

std::uint64_t tensor_bytes(const model::TensorRef& r) {
  return r.info->end - r.info->begin;
}

std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9);
}

int threads_for(const ConvertOptions& o) {
  return o.threads > 0 ? o.threads
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::int64_t checked_group(const ConvertOptions& o) {
  if (!model::has_int4(model::cpu_format_of(o.method))) {
    if (o.group != 0)
      throw ConvertError("An INT4 group size was given for a conversion to " +
                         std::string(model::method_name(o.method)) +
                         "; it applies to INT4 alone. Leave it out.");
    return 0;
  }
  const std::int64_t g = o.group == 0 ? kernels::kDefaultInt4Group : o.group;
  if (g < 8 || g > 4096 || g % 8 != 0) {
    throw ConvertError(
        "The INT4 group size must be a multiple of 8 between 8 and 4096 (32, 64 "
        "or 128 are usual); it is " +
        std::to_string(g) + ".");
  }
  return g;
}

// The pool count to slice the experts for: the one asked for, which must split them; by
// default one per NUMA node of this machine, or the most below that the experts allow.
int checked_pools(const ConvertOptions& o, const Plan& p) {
  const bool experts =
      std::any_of(p.weights.layers.begin(), p.weights.layers.end(),
                  [](const model::LayerWeights& l) { return l.moe && !l.experts.experts.empty(); });
  const kernels::PackedFormat expert_format =
      model::packed_format_for(model::cpu_format_of(o.method), model::MatrixRole::Expert, experts);
  const std::int64_t int4_group = model::scale_group(expert_format, p.group);
  const std::int64_t width = p.spec.moe_intermediate_size;
  if (o.pools > 0) {
    if (o.pools > 1 && !experts) {
      throw ConvertError("--pools " + std::to_string(o.pools) +
                         ": this model has no routed experts, and pools split only experts; "
                         "convert it with --pools 1.");
    }
    const std::string why =
        experts ? model::expert_slicing_error(width, o.pools, int4_group) : std::string();
    if (!why.empty()) throw ConvertError("--pools " + std::to_string(o.pools) + ": " + why + ".");
    return o.pools;
  }
  if (!experts) return 1;
  int pools = hw::default_pool_count(hw::probe_topology());
  while (!model::can_slice_experts(width, pools, int4_group)) --pools;
  return pools;
}

bool gguf_source(const ConvertOptions& o) {
  return model::is_gguf_path(o.input);
}

// Everything a Hugging Face checkpoint stores that is not packed, as stored; the embedding
// always (with tied embeddings it is also packed, as the output head).
Unit safetensors_base_unit(const model::Checkpoint& checkpoint,
                           const std::set<std::string>& packed_names, const std::string& embedding,
                           const std::string& scale_suffix) {
  Unit base{kBaseFile, 0, {}, {}, {}, {}, 0, 0};
  for (const auto& file : checkpoint.files()) {
    for (const auto& [name, info] : file->tensors()) {
      const bool packed = packed_names.count(name) != 0 && name != embedding;
      const std::string scaled =
          name.ends_with(scale_suffix) ? name.substr(0, name.size() - scale_suffix.size()) : "";
      const bool packed_scale =
          !scaled.empty() && packed_names.count(scaled) != 0 && scaled != embedding;
      // What binding derived tensors from is written as those (packed above), not as stored.
      if (packed || packed_scale || checkpoint.consumed(name)) continue;
      const model::TensorRef* ref = checkpoint.find(name);
      base.raw.push_back({name, ref});
      base.source_bytes += tensor_bytes(*ref);
      base.output_bytes += tensor_bytes(*ref);
    }
  }
  std::sort(base.raw.begin(), base.raw.end(),
            [](const RawItem& a, const RawItem& b) { return a.name < b.name; });
  return base;
}

// base.gguf of a GGUF source: the stored tensors Tandem reads as they are, in their block
// formats (safetensors cannot hold those), under their GGUF names. A stored tensor stays when
// any tensor bound from it is not packed (a routed experts tensor goes when all its experts
// are packed); the embedding always stays. What Tandem never reads (a next-token-prediction
// layer) is left out too.
Unit gguf_base_unit(const model::Checkpoint& checkpoint, const std::set<std::string>& packed_names,
                    const std::string& embedding) {
  Unit base{model::kConvertedGgufName, 0, {}, {}, {}, {}, 0, 0};
  std::map<std::string, bool> kept;  // by stored name: whether some tensor bound from it stays
  for (const auto& [name, ref] : checkpoint.tensors()) {
    const std::string stored = checkpoint.gguf_tensor(name);
    if (stored.empty()) continue;
    const bool packed = packed_names.count(name) != 0 && name != embedding;
    kept[stored] = kept[stored] || !packed;
  }
  const model::GgufSet& set = *checkpoint.gguf();
  for (const auto& [name, t] : set.tensors()) {
    const auto it = kept.find(name);
    if (it == kept.end() || !it->second) {
      base.gguf_omitted.push_back(name);
      continue;
    }
    base.gguf_tensors.push_back(name);
    base.source_bytes += t.info->size_bytes;
    base.output_bytes += t.info->size_bytes;
  }
  return base;
}

Plan make_plan(const ConvertOptions& o) {
  const bool gguf = gguf_source(o);
  if (gguf && !fs::is_regular_file(o.input)) {
    throw ConvertError(o.input +
                       " does not exist; give --in a .gguf file (any part of a split set) or the "
                       "folder of a downloaded Hugging Face model.");
  }
  if (!gguf && (o.input.empty() || !fs::is_directory(o.input))) {
    throw ConvertError(o.input +
                       " is not a folder; give --in the folder of a downloaded Hugging Face model "
                       "or a .gguf file.");
  }
  if (!gguf && !fs::is_regular_file(fs::path(o.input) / "config.json")) {
    throw ConvertError(
        o.input +
        " is not a model folder: it has no config.json. Give --in the folder that holds "
        "config.json and the .safetensors files.");
  }
  if (!gguf && fs::exists(fs::path(o.input) / model::kManifestName)) {
    throw ConvertError(o.input +
                       " is already a converted model; convert its source folder instead.");
  }
  if (o.pools < 0) {
    throw ConvertError("--pools " + std::to_string(o.pools) +
                       ": give at least 1 pool (one per NUMA node is usual).");
  }
  if (o.output.empty())
    throw ConvertError("give --out the folder to write the converted model to.");
  Plan p;
  p.group = checked_group(o);
  p.checkpoint = model::LoadedModel::open_checkpoint(o.input, p.spec);
  p.checkpoint->set_fp8_scales(p.spec.fp8);
  p.weights = model::bind_weights(p.spec, *p.checkpoint);
  if (o.method == Method::Mxfp4) {
    const std::string why = model::mxfp4_refusal(p.spec);
    if (!why.empty()) throw ConvertError(o.input + ": " + why);
  }
  if (model::has_int4(model::cpu_format_of(o.method)) && p.spec.mxfp4_experts) {
    log::warn(
        "{}: its experts are MXFP4 already; int4 rounds them a second time, while --method "
        "mxfp4 keeps them exactly at the same size",
        o.input);
  }
  p.pools = checked_pools(o, p);

  std::unordered_map<const void*, std::string> name_of_data;
  for (const auto& [name, ref] : p.checkpoint->tensors()) name_of_data.emplace(ref.data(), name);
  // Derived tensors (gpt-oss's experts, split per expert) first: a view may share its
  // address with the stored tensor it came from, and the derived name is the one packed.
  for (const std::string& name : p.checkpoint->derived_names())
    name_of_data[p.checkpoint->find(name)->data()] = name;
  const std::string embedding = name_of_data.at(p.weights.embedding.data);

  std::vector<Unit> layers(static_cast<std::size_t>(p.spec.num_layers));
  for (int l = 0; l < p.spec.num_layers; ++l) {
    layers[static_cast<std::size_t>(l)].file = fmt::format("layer-{:05d}.safetensors", l);
    layers[static_cast<std::size_t>(l)].layer = l;
  }
  Unit head{kOutputHeadFile, static_cast<int>(p.spec.num_layers) - 1, {}, {}, {}, {}, 0, 0};
  std::set<std::string> packed_names;
  for (const model::PackableMatrix& m : model::packable_matrices(p.weights)) {
    const std::string& name = name_of_data.at(m.matrix->data);
    if (!packed_names.insert(name).second) continue;
    const kernels::PackedFormat format = model::packed_format_for(
        model::cpu_format_of(o.method), m.role, p.spec.num_experts > 0, o.dense_bf16, m.down);
    Unit& unit = m.layer < 0 ? head : layers[static_cast<std::size_t>(m.layer)];
    const model::TensorRef* source = p.checkpoint->find(name);
    const std::uint64_t source_bytes = tensor_bytes(*source);
    unit.source_bytes += source_bytes;
    std::vector<PackedItem> items;
    if (m.role == model::MatrixRole::Expert && p.pools > 1) {
      for (int pool = 0; pool < p.pools; ++pool) {
        PackedItem item;
        item.name = model::pool_slice_name(name, pool);
        item.matrix = m.matrix;
        item.source = source;
        item.sliced = true;
        item.axis = m.slice_axis;
        item.range = model::expert_slice(p.spec.moe_intermediate_size, p.pools, pool);
        item.shape = model::slice_shape(m.matrix->rows, m.matrix->cols, item.axis, item.range,
                                        format, p.group);
        item.source_bytes =
            source_bytes * static_cast<std::uint64_t>(pool + 1) /
                static_cast<std::uint64_t>(p.pools) -
            source_bytes * static_cast<std::uint64_t>(pool) / static_cast<std::uint64_t>(p.pools);
        item.last_of_source = pool + 1 == p.pools;
        items.push_back(std::move(item));
      }
    } else {
      PackedItem item;
      item.name = name;
      item.matrix = m.matrix;
      item.source = source;
      item.shape = kernels::packed_shape(m.matrix->rows, m.matrix->cols, format, p.group);
      item.source_bytes = source_bytes;
      items.push_back(std::move(item));
    }
    for (PackedItem& item : items) {
      unit.output_bytes +=
          static_cast<std::uint64_t>(item.shape.blocks) * item.shape.block_bytes() +
          kernels::packed_scale_count(item.shape) * sizeof(float);
      unit.packed.push_back(std::move(item));
    }
  }
  // Everything else is copied as stored; the embedding always is (with tied embeddings it is
  // also packed, as the output head).
  if (gguf) {
    p.units.push_back(gguf_base_unit(*p.checkpoint, packed_names, embedding));
  } else {
    p.units.push_back(
        safetensors_base_unit(*p.checkpoint, packed_names, embedding, p.spec.fp8.suffix));
  }
  for (Unit& u : layers) p.units.push_back(std::move(u));
  if (!head.packed.empty()) p.units.push_back(std::move(head));
  for (const Unit& u : p.units) {
    p.source_bytes += u.source_bytes;
    p.output_bytes += u.output_bytes;
  }
  return p;
}
std::string sha256_of_file(const fs::path& path) {
  hub::ContentDigest digest(hub::DigestKind::Sha256, 0);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(8 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    digest.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  return digest.hex();
}

model::SourceFile fingerprint(const fs::path& path) {
  model::SourceFile f{path.filename().string(), fs::file_size(path), {}};
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), 8);
  std::string bytes(8 + std::min<std::uint64_t>(header, f.bytes), '\0');
  std::memcpy(bytes.data(), &header, 8);
  in.read(bytes.data() + 8, static_cast<std::streamsize>(bytes.size() - 8));
  f.header_sha256 = hub::sha256_hex(bytes);
  return f;
}

std::uint64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Drops the pages of a mapped source range from this process, so resident memory stays at
// about one layer however large the checkpoint (the page cache may keep them).
void release(const void* data, std::uint64_t bytes) {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

double relative_error(const kernels::WeightMatrix& source, const kernels::PackedMatrix& packed) {
  std::vector<float> want(static_cast<std::size_t>(source.cols)), got(want.size());
  double err = 0, norm = 0;
  for (std::int64_t r = 0; r < source.rows; ++r) {
    source.row_f32(r, want.data());
    kernels::unpack_row(packed, r, got.data());
    for (std::size_t c = 0; c < want.size(); ++c) {
      err += (double(got[c]) - want[c]) * (double(got[c]) - want[c]);
      norm += double(want[c]) * want[c];
    }
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

// A GGUF part, fingerprinted as a safetensors shard is: its size and the sha256 of everything
// before its tensor data (the metadata and the tensor table).
model::SourceFile gguf_fingerprint(const model::GgufFile& part) {
  model::SourceFile f{fs::path(part.path()).filename().string(), fs::file_size(part.path()), {}};
  std::ifstream in(part.path(), std::ios::binary);
  std::string bytes(part.data_offset_bytes(), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.header_sha256 = hub::sha256_hex(bytes);
  return f;
}

// Writes base.gguf (see gguf_base_unit): the source's metadata, less what splits a set, with
// the names of the tensors left out; then the kept tensors' bytes. `done` is told of every
// piece written.
void write_gguf_base(const model::GgufSet& set, const Unit& unit, const std::string& path,
                     const std::function<void()>& check_cancelled,
                     const std::function<void(std::uint64_t, const std::string&)>& done) {
  std::map<std::string, model::GgufValue> metadata = set.metadata_file().metadata();
  for (auto it = metadata.begin(); it != metadata.end();) {
    it = it->first.starts_with("split.") ? metadata.erase(it) : std::next(it);
  }
  model::GgufArray omitted{model::GgufType::kString, {}};
  for (const std::string& name : unit.gguf_omitted)
    omitted.elements.emplace_back(model::GgufType::kString, name);
  metadata[model::kGgufOmittedTensorsKey] = model::GgufValue(model::GgufType::kArray, omitted);
  std::vector<model::GgufWriter::Declared> declared;
  for (const std::string& name : unit.gguf_tensors) {
    const model::GgufTensorInfo& info = *set.tensors().at(name).info;
    declared.push_back({name, info.dims, info.ggml_type, info.size_bytes});
  }
  model::GgufWriter writer(path, metadata, declared);
  for (const std::string& name : unit.gguf_tensors) {
    const std::span<const std::byte> data = set.tensor_data(set.tensors().at(name));
    for (std::uint64_t at = 0; at < data.size(); at += (64u << 20)) {
      check_cancelled();
      const std::uint64_t n = std::min<std::uint64_t>(64u << 20, data.size() - at);
      writer.write(data.data() + at, n);
      release(data.data() + at, n);
      done(n, name);
    }
    if (data.empty()) done(0, name);
  }
  writer.finish();
}

// Writes `text` to `target` under a temporary name, renamed into place when whole.
void write_side_file(const fs::path& target, const std::string& text) {
  const fs::path temp = target.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(temp, ec);
      throw ConvertError(target.string() + " cannot be written; is the disk full?");
    }
  }
  std::error_code ec;
  fs::rename(temp, target, ec);
  if (ec) {
    fs::remove(temp, ec);
    throw ConvertError(
        fmt::format("{} cannot be written ({}); is the disk full?", target.string(), ec.message()));
  }
}

bool is_side_file(const fs::directory_entry& e) {
  if (!e.is_regular_file()) return false;
  const std::string name = e.path().filename().string();
  const std::string ext = e.path().extension().string();
  if (name.empty() || name[0] == '.') return false;
  if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")) return false;
  for (const char* skip :
       {".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".part", ".tmp"}) {
    if (ext == skip) return false;
  }
  return true;
}

}  // namespace

ConvertEstimate estimate_conversion(const ConvertOptions& options) {
  const Plan plan = make_plan(options);
  ConvertEstimate e;
  e.output_bytes = plan.output_bytes;
  e.seconds = static_cast<double>(plan.source_bytes) /
              (estimated_bytes_per_second_per_thread(options.method) * threads_for(options));
  if (const model::GgufSet* set = plan.checkpoint->gguf())
    e.advice = gguf_conversion_advice(*set, kernels::active_variant());
  return e;
}

std::string gguf_conversion_advice(const model::GgufSet& set, kernels::CpuVariant variant) {
  // The experts' format (what most of a MoE model is), else that of the layers' matrices;
  // and the bits of the experts' down projections, which 4-bit mixes keep finer in many
  // layers (Q4_K_M: Q6_K).
  std::map<std::uint32_t, std::uint64_t> expert_bytes, layer_bytes;
  double down_bytes = 0, down_weights = 0;
  for (const auto& [name, t] : set.tensors()) {
    if (t.info->dims.size() < 2 || !name.starts_with("blk.")) continue;
    (name.find("_exps.") != std::string::npos ? expert_bytes : layer_bytes)[t.info->ggml_type] +=
        t.info->size_bytes;
    if (name.find("ffn_down_exps.") != std::string::npos) {
      if (const auto l = model::ggml_type_layout(t.info->ggml_type)) {
        down_bytes += static_cast<double>(t.info->size_bytes);
        down_weights +=
            static_cast<double>(t.info->size_bytes) * l->elements_per_block / l->bytes_per_block;
      }
    }
  }
  const auto& bytes = expert_bytes.empty() ? layer_bytes : expert_bytes;
  if (bytes.empty()) return {};
  const auto main = std::max_element(
      bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const auto layout = model::ggml_type_layout(main->first);
  if (!layout) return {};
  const double bits = 8.0 * layout->bytes_per_block / layout->elements_per_block;
  std::uint64_t total = 0;
  for (const auto& [type, n] : bytes) total += n;
  const bool mixed = static_cast<double>(main->second) < 0.95 * static_cast<double>(total);
  const std::string what = fmt::format("{} {}{} ({:.1f} bits a weight)",
                                       expert_bytes.empty() ? "Its weights are" : "Its experts are",
                                       mixed ? "mostly " : "", layout->name, bits);
  const double int4_bits = kernels::int4_bits_per_weight(kernels::kDefaultInt4Group);
  const std::string int8_size =
      bits >= 12.0  ? "half their memory"
      : bits >= 7.5 ? "about their memory"
                    : fmt::format("{:.1f}x their memory", kernels::int8_bits_per_weight() / bits);
  // INT4's groups of 32 with a scale and an offset hold these blocks' 4-bit grids (up to the
  // FP16 rounding of Q4_K's scales); other formats it rounds again.
  const bool grid_kept = layout->name == "Q4_0" || layout->name == "Q4_1" || layout->name == "Q4_K";
  const std::string int4_keeps = grid_kept ? "INT4 keeps these 4-bit blocks nearly exactly"
                                           : "INT4 rounds the weights a second time";
  // Downs stored finer than the rest by most of a bit: INT4 would round them to 4 bits.
  const double down_bits = down_weights > 0 ? 8.0 * down_bytes / down_weights : 0.0;
  const std::string downs =
      down_bits >= bits + 0.75
          ? fmt::format(
                " Its experts' down projections are stored finer ({:.1f} bits a weight): "
                "int4-down8 keeps them in INT8, where INT4 would round them to 4 bits.",
                down_bits)
          : std::string();
  const bool amx = variant == kernels::CpuVariant::Amx;
  // Under about 4 bits a weight (IQ3, Q3_K, Q2_K and below) INT4 only grows the file.
  if (bits < 4.25) {
    return what +
           fmt::format(
               ": as INT4 ({:.1f} bits) or INT8 they would take more memory and be no more "
               "accurate. Run the file as it is{}",
               int4_bits,
               amx ? ", unless prompts matter most and the memory allows a larger copy: this "
                     "CPU's AMX tiles run converted prompts faster."
                   : ".");
  }
  if (amx) {
    return what +
           ". This CPU has AMX: converted, prompts run on its tile unit, which the blocks as "
           "stored do not use, so long prompts go faster; replies read about as many bytes "
           "either way. INT8 takes " +
           int8_size + (bits < 7.5 ? "; " + int4_keeps + "." + downs : ".");
  }
  if (bits >= 7.5) {
    // INT8's groups are Q8_0's blocks: an FP16 scale and integers per 32 columns.
    const std::string kept = layout->name == "Q8_0" ? ", keeping these blocks exactly" : "";
    return what + ". Converted to INT8 (" + int8_size + kept +
           "), prompts and replies both ran faster than these blocks as stored in Tandem's "
           "measurements (AVX-512); the file also runs as it is.";
  }
  return what +
         fmt::format(
             ". Converted to INT4 ({:.1f} bits a weight), prompts ran 5-25% faster than 4-bit "
             "blocks as stored in Tandem's measurements (AVX-512), but replies about a sixth "
             "slower; {} (INT8 takes {}). Convert for long prompts; for chat, the file as it is "
             "does better.{}",
             int4_bits, int4_keeps, int8_size, downs);
}

Converter::Converter(ConvertOptions options) : options_(std::move(options)) {}

ConvertResult Converter::run(const std::function<void(const ConvertProgress&)>& progress) {
  const auto started = Clock::now();
  const Plan plan = make_plan(options_);
  const bool rotate = model::rotates_int8(model::cpu_format_of(options_.method));
  const fs::path out(options_.output);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    throw ConvertError(options_.output + " cannot be created (" + ec.message() +
                       "); choose a folder you can write to.");
  }

  model::Manifest manifest;
  manifest.method = options_.method;
  manifest.group = plan.group;
  manifest.dense_bf16 = options_.dense_bf16;
  manifest.pools = plan.pools;
  manifest.source_folder = fs::absolute(options_.input).lexically_normal().string();
  if (const model::GgufSet* set = plan.checkpoint->gguf()) {
    for (std::size_t i = 0; i < set->part_count(); ++i)
      manifest.source_files.push_back(gguf_fingerprint(set->part(i)));
    // The metadata is the config: it lies in the first part's header.
    manifest.config_sha256 = manifest.source_files.front().header_sha256;
  } else {
    std::ifstream config(fs::path(options_.input) / "config.json", std::ios::binary);
    manifest.config_sha256 =
        hub::sha256_hex(std::string(std::istreambuf_iterator<char>(config), {}));
    for (const auto& file : plan.checkpoint->files())
      manifest.source_files.push_back(fingerprint(file->path()));
  }

  ConvertResult result;
  std::set<std::string> kept;
  if (fs::exists(out / model::kManifestName)) {
    const model::Manifest old = model::read_manifest(options_.output);
    if (old.method != manifest.method || old.group != manifest.group ||
        old.dense_bf16 != manifest.dense_bf16 || old.pools != manifest.pools ||
        old.config_sha256 != manifest.config_sha256 || old.source_files != manifest.source_files) {
      throw ConvertError(options_.output +
                         " already holds a conversion with other settings or from another source; "
                         "choose an empty folder, or delete this one to start over.");
    }
    // Keep every finished file whose contents still match what the manifest recorded.
    for (const model::OutputFile& f : old.files) {
      const fs::path path = out / f.name;
      if (!fs::is_regular_file(path) || fs::file_size(path) != f.bytes ||
          sha256_of_file(path) != f.sha256)
        continue;
      kept.insert(f.name);
      manifest.files.push_back(f);
    }
    for (const auto& [name, t] : old.tensors) {
      if (kept.count(t.file) != 0) manifest.tensors.emplace(name, t);
    }
    result.resumed = true;
  } else {
    for (const auto& e : fs::directory_iterator(out)) {
      if (e.path().extension() != ".tmp") {
        throw ConvertError(options_.output +
                           " is not empty; choose an empty or new folder for the converted model.");
      }
    }
  }
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() == ".tmp") fs::remove(e.path(), ec);  // left by an interrupted run
  }

  std::uint64_t bytes_total = 0, bytes_needed = 0;
  for (const Unit& u : plan.units) {
    if (kept.count(u.file) != 0) continue;
    bytes_total += u.source_bytes;
    bytes_needed += u.output_bytes;
  }
  const fs::space_info space = fs::space(out, ec);
  if (!ec && space.available < bytes_needed + (64u << 20)) {
    throw ConvertError(fmt::format(
        "The converted model needs about {} more, but only {} are free on the disk of {}; "
        "free some space or choose another folder.",
        gib(bytes_needed), gib(space.available), options_.output));
  }
  manifest.complete = false;
  model::write_manifest(options_.output, manifest);

  const int threads = threads_for(options_);
  const auto writing_started = Clock::now();
  std::uint64_t bytes_done = 0;
  auto report = [&](const Unit& unit, const std::string& tensor) {
    if (!progress) return;
    ConvertProgress p;
    p.bytes_done = bytes_done;
    p.bytes_total = bytes_total;
    const double elapsed = std::chrono::duration<double>(Clock::now() - writing_started).count();
    p.bytes_per_s = elapsed > 0 ? static_cast<double>(bytes_done) / elapsed : 0;
    p.eta_s = p.bytes_per_s > 0 ? static_cast<double>(bytes_total - bytes_done) / p.bytes_per_s : 0;
    p.layer = unit.layer;
    p.layers = plan.spec.num_layers;
    p.tensor = tensor;
    progress(p);
  };
  auto check_cancelled = [&] {
    if (cancelled_.load()) throw ConvertCancelled();
  };

  for (const Unit& unit : plan.units) {
    if (kept.count(unit.file) != 0) continue;
    check_cancelled();
    if (unit.file == model::kConvertedGgufName) {
      write_gguf_base(*plan.checkpoint->gguf(), unit, (out / unit.file).string(), check_cancelled,
                      [&](std::uint64_t n, const std::string& tensor) {
                        bytes_done += n;
                        report(unit, tensor);
                      });
      const std::uint64_t size = fs::file_size(out / unit.file);
      manifest.files.push_back({unit.file, size, sha256_of_file(out / unit.file)});
      result.bytes_written += size;
      model::write_manifest(options_.output, manifest);
      continue;
    }
    std::vector<model::SafetensorsWriter::Declared> declared;
    for (const RawItem& r : unit.raw)
      declared.push_back({r.name, r.ref->info->dtype, r.ref->info->shape});
    for (const PackedItem& item : unit.packed) {
      const auto bytes = static_cast<std::int64_t>(
          item.shape.blocks * static_cast<std::int64_t>(item.shape.block_bytes()));
      declared.push_back(
          {item.name + std::string(model::kPackedTensorSuffix), kernels::DType::U8, {bytes}});
      const auto scales = static_cast<std::int64_t>(kernels::packed_scale_count(item.shape));
      if (scales > 0)
        declared.push_back(
            {item.name + std::string(model::kPackedScaleSuffix), kernels::DType::F32, {scales}});
    }
    const fs::path path = out / unit.file;
    model::SafetensorsWriter writer(path.string(), declared,
                                    {{"tandem_method", std::string(method_name(options_.method))}});
    for (const RawItem& r : unit.raw) {
      const auto* data = static_cast<const std::uint8_t*>(r.ref->data());
      const std::uint64_t size = tensor_bytes(*r.ref);
      for (std::uint64_t at = 0; at < size; at += (64u << 20)) {
        check_cancelled();
        const std::uint64_t n = std::min<std::uint64_t>(64u << 20, size - at);
        writer.write(data + at, n);
        release(data + at, n);
        bytes_done += n;
      }
      report(unit, r.name);
    }
    // Pack `threads` matrices at a time in parallel, then write them in file order.
    for (std::size_t first = 0; first < unit.packed.size();
         first += static_cast<std::size_t>(threads)) {
      check_cancelled();
      const std::size_t last =
          std::min(unit.packed.size(), first + static_cast<std::size_t>(threads));
      std::vector<kernels::PackedMatrix> packed(last - first);
      std::vector<double> errors(last - first, 0.0);
      std::vector<std::thread> workers;
      std::exception_ptr failure;
      std::mutex failure_lock;
      for (std::size_t i = first; i < last; ++i) {
        workers.emplace_back([&, i] {
          try {
            const PackedItem& item = unit.packed[i];
            if (item.sliced) {
              const model::SliceSource source(*item.matrix, item.axis, item.range);
              packed[i - first] =
                  model::pack_matrix(source.matrix(), item.shape.format, plan.group, rotate);
              if (options_.verify)
                errors[i - first] = relative_error(source.matrix(), packed[i - first]);
            } else {
              packed[i - first] =
                  model::pack_matrix(*item.matrix, item.shape.format, plan.group, rotate);
              if (options_.verify)
                errors[i - first] = relative_error(*item.matrix, packed[i - first]);
            }
          } catch (...) {
            const std::lock_guard lock(failure_lock);
            failure = std::current_exception();
          }
        });
      }
      for (std::thread& w : workers) w.join();
      if (failure) std::rethrow_exception(failure);
      for (std::size_t i = first; i < last; ++i) {
        const PackedItem& item = unit.packed[i];
        const kernels::PackedMatrix& p = packed[i - first];
        writer.write(p.bytes.data.get(), static_cast<std::size_t>(p.blocks) * p.block_bytes());
        if (!p.group_scale.empty())
          writer.write(p.group_scale.data(), p.group_scale.size() * sizeof(float));
        // Mapped pages come back from the file when read again; heap memory (a tensor
        // derived at load) would not, nor would its neighbours'.
        if (item.last_of_source && !item.source->owned)
          release(item.source->data(), tensor_bytes(*item.source));
        bytes_done += item.source_bytes;
        if (options_.verify) result.verification.push_back({item.name, errors[i - first]});
        report(unit, item.name);
      }
    }
    writer.finish();

    // Record where each packed tensor landed, then the file itself.
    const model::SafetensorsFile written(path.string());
    for (const PackedItem& item : unit.packed) {
      model::PackedTensor t;
      t.file = unit.file;
      t.format = item.shape.format;
      t.rows = item.shape.rows;
      t.cols = item.shape.cols;
      t.cols_padded = item.shape.cols_padded;
      t.group = item.shape.group;
      t.rotation = rotate && item.shape.format == kernels::PackedFormat::Int8
                       ? kernels::int8_rotation_for(item.shape.cols)
                       : 0;
      // Appended, not item.name + std::string(...): GCC 12 warns falsely (-Wrestrict) on that.
      std::string packed_name = item.name, scale_name = item.name;
      packed_name += model::kPackedTensorSuffix;
      scale_name += model::kPackedScaleSuffix;
      for (const auto& [name, info] : written.tensors()) {
        if (name == packed_name) {
          t.offset = info.begin;
          t.size = info.end - info.begin;
        } else if (name == scale_name) {
          t.scale_offset = info.begin;
          t.scale_size = info.end - info.begin;
        }
      }
      manifest.tensors[item.name] = t;
    }
    const std::uint64_t size = fs::file_size(path);
    manifest.files.push_back({unit.file, size, sha256_of_file(path)});
    result.bytes_written += size;
    model::write_manifest(options_.output, manifest);
  }

  if (const model::GgufSet* set = plan.checkpoint->gguf()) {
    // The model's config as Hugging Face would write it, for what reads a folder's shape
    // (the model library, the planner); the engine reads the metadata in base.gguf.
    nlohmann::json config = model::gguf_model_config(*set);
    config["tandem_converted_from"] = fs::path(set->path()).filename().string();
    write_side_file(out / "config.json", config.dump(2) + "\n");
    result.bytes_written += fs::file_size(out / "config.json");
  } else {
    // config.json, the tokenizer, generation_config.json and the like, so the folder stands
    // alone.
    for (const auto& e : fs::directory_iterator(options_.input)) {
      if (!is_side_file(e)) continue;
      const fs::path target = out / e.path().filename();
      const fs::path temp = target.string() + ".tmp";
      fs::copy_file(e.path(), temp, fs::copy_options::overwrite_existing, ec);
      if (!ec) fs::rename(temp, target, ec);
      if (ec) {
        fs::remove(temp);
        throw ConvertError(fmt::format("{} cannot be written ({}); is the disk full?",
                                       target.string(), ec.message()));
      }
      result.bytes_written += fs::file_size(target);
    }
  }
  manifest.complete = true;
  model::write_manifest(options_.output, manifest);
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  result.peak_memory_bytes = peak_resident_bytes();
  return result;
}

}  // namespace tandem::convert
