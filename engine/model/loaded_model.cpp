#include "engine/model/loaded_model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/hw/memory_info.h"
#include "engine/hw/pool_placement.h"
#include "engine/hw/topology.h"
#include "engine/log/log.h"
#include "engine/model/converted_model.h"
#include "engine/model/gguf/model.h"
#include "engine/model/manifest.h"
#include "engine/model/model_error.h"

namespace tandem::model {
namespace {

std::uint64_t matrix_bytes(const kernels::WeightMatrix& m) {
  if (m.data == nullptr) return 0;
  if (m.packed != nullptr) return kernels::packed_matrix_bytes(*m.packed);
  return kernels::dtype_bytes(m.dtype, m.rows * m.cols);
}

// Runs work(i) for i in [0, count) on `threads` threads (the caller's among them); the
// first exception is rethrown here once all have stopped.
// Tells `report` (if any) of `stage` as its items complete, once per percent, in order
// (the threads that finish items report one at a time).
struct StageProgress {
  const std::function<void(const LoadProgress&)>* report = nullptr;
  std::string stage;
  std::size_t total = 0;
  std::atomic<std::size_t> done{0};
  std::atomic<int> percent{-1};
  std::mutex order;
  StageProgress(const std::function<void(const LoadProgress&)>& r, std::string s, std::size_t n)
      : report(r ? &r : nullptr), stage(std::move(s)), total(n) {
    step(0);
  }
  void step(std::size_t n = 1) {
    if (report == nullptr || total == 0) return;
    const std::size_t now = done.fetch_add(n) + n;
    const int p = static_cast<int>(100 * now / total);
    if (p <= percent.load()) return;
    const std::lock_guard lock(order);
    // Under the lock: the furthest count reached, never one behind an earlier report.
    const std::size_t latest = done.load();
    const int q = static_cast<int>(100 * latest / total);
    if (q <= percent.load()) return;
    percent.store(q);
    (*report)({stage, latest, total});
  }
};

void for_each_on_threads(int threads, std::size_t count,
                         const std::function<void(std::size_t)>& work,
                         StageProgress* progress = nullptr) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_lock;
  auto run = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        work(i);
        if (progress != nullptr) progress->step();
      } catch (...) {
        const std::lock_guard lock(failure_lock);
        if (!failure) failure = std::current_exception();
        next.store(count);
      }
    }
  };
  const unsigned n = threads > 0 ? static_cast<unsigned>(threads)
                                 : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < n; ++i) workers.emplace_back(run);
  run();
  for (std::thread& t : workers) t.join();
  if (failure) std::rethrow_exception(failure);
}

std::string pools_phrase(int pools) {
  return std::to_string(pools) + (pools == 1 ? " pool" : " pools");
}

bool has_routed_experts(const model::ModelWeights& w) {
  return std::any_of(w.layers.begin(), w.layers.end(), [](const model::LayerWeights& l) {
    return l.moe && !l.experts.experts.empty();
  });
}

// The pool count for a folder that is not converted: the one asked for, which must split
// the experts when they are packed; by default one per NUMA node, or the most below that
// the experts' width allows.
int pools_for(const std::string& folder, int asked, bool split_experts, std::int64_t width,
              std::int64_t int4_group) {
  if (asked > 0) {
    const std::string why =
        split_experts ? expert_slicing_error(width, asked, int4_group) : std::string();
    if (!why.empty()) throw model::ModelError(folder + ": " + why + ".");
    return asked;
  }
  const int nodes = hw::default_pool_count(hw::probe_topology());
  int pools = nodes;
  while (split_experts && !can_slice_experts(width, pools, int4_group)) --pools;
  if (pools != nodes) {
    log::info("the experts of {} cannot be split into {} (one per NUMA node); running with {}",
              folder, pools_phrase(nodes), pools_phrase(pools));
  }
  return pools;
}

std::size_t packed_data_bytes(const kernels::PackedMatrix& m) {
  return (static_cast<std::size_t>(m.blocks) * m.block_bytes() + 63) / 64 * 64;
}

}  // namespace

std::vector<PackableMatrix> packable_matrices(model::ModelWeights& w) {
  std::vector<PackableMatrix> out;
  int layer = 0;
  MatrixRole role = MatrixRole::Attention;
  auto add = [&](kernels::WeightMatrix& m, SliceAxis axis = SliceAxis::Rows, bool down = false) {
    if (m.data != nullptr) out.push_back({layer, role, &m, axis, down});
  };
  auto add_ffn = [&](model::FeedForwardWeights& f, MatrixRole ffn_role = MatrixRole::FeedForward) {
    role = ffn_role;
    add(f.gate);
    add(f.up);
    add(f.down, SliceAxis::Columns, /*down=*/true);
  };
  for (model::LayerWeights& l : w.layers) {
    model::AttentionWeights& a = l.attention;
    role = MatrixRole::Attention;
    for (kernels::WeightMatrix* m : {&a.q, &a.q_gate, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a})
      add(*m);
    model::LinearAttentionWeights& la = l.linear_attention;
    for (kernels::WeightMatrix* m : {&la.in_qkvz, &la.in_ba, &la.out}) add(*m);
    if (l.moe) {
      for (model::FeedForwardWeights& e : l.experts.experts) add_ffn(e, MatrixRole::Expert);
      if (l.experts.shared) add_ffn(*l.experts.shared);
    } else {
      add_ffn(l.dense);
    }
    ++layer;
  }
  layer = -1;
  role = MatrixRole::Output;
  add(w.output);
  return out;
}

std::string mxfp4_refusal(const ModelSpec& spec) {
  if (spec.mxfp4_experts) return {};
  return spec.is_moe()
             ? "the mxfp4 format keeps routed experts stored as MXFP4 as they are, and this "
               "model's experts are not stored so; use int4 (or int8) instead."
             : "the mxfp4 format is for routed experts stored as MXFP4, and this model has "
               "none; use int4 (or int8) instead.";
}

CpuFormat cpu_format_of(Method method) {
  switch (method) {
    case Method::Int8:
      return CpuFormat::Int8;
    case Method::Int4:
      return CpuFormat::Int4;
    case Method::Mxfp4:
      return CpuFormat::Mxfp4;
    case Method::Int4Down8:
      return CpuFormat::Int4Down8;
    case Method::Int8Rotated:
      return CpuFormat::Int8Rotated;
    case Method::Bf16:
      break;
  }
  return CpuFormat::Bf16;
}

bool has_int4(CpuFormat f) {
  return f == CpuFormat::Int4 || f == CpuFormat::Int4Down8;
}

kernels::PackedFormat packed_format_for(CpuFormat format, MatrixRole role, bool has_experts,
                                        bool dense_bf16, bool ffn_down) {
  const bool expert_like =
      role == MatrixRole::Expert || (role == MatrixRole::FeedForward && !has_experts);
  if (dense_bf16 && !expert_like) return kernels::PackedFormat::Bf16;
  switch (format) {
    case CpuFormat::Int4:
      return expert_like && !(role == MatrixRole::FeedForward && ffn_down)
                 ? kernels::PackedFormat::Int4
                 : kernels::PackedFormat::Int8;
    case CpuFormat::Int4Down8:
      return expert_like && !ffn_down ? kernels::PackedFormat::Int4 : kernels::PackedFormat::Int8;
    case CpuFormat::Mxfp4:
      return role == MatrixRole::Expert ? kernels::PackedFormat::Mxfp4
                                        : kernels::PackedFormat::Int8;
    case CpuFormat::Bf16:
      return kernels::PackedFormat::Bf16;
    default:
      return kernels::PackedFormat::Int8;
  }
}

namespace {

// The variant for one matrix: the AVX-512 BF16 kernel needs AVX512_BF16, and the AVX2 code
// reads the same layout.

}  // namespace

bool onednn_for(DenseBackend backend, kernels::PackedFormat format, MatrixRole role) {
  // Only when asked for (see DenseBackend): oneDNN 2.6 has no INT4; in BF16 it only ties
  // with ours; the routed experts run in our batched expert path.
  return backend == DenseBackend::Onednn && format == kernels::PackedFormat::Int8 &&
         role != MatrixRole::Expert;
}

std::string_view cpu_format_name(CpuFormat f) {
  switch (f) {
    case CpuFormat::Native:
      return "native";
    case CpuFormat::Int8:
      return "int8";
    case CpuFormat::Int4:
      return "int4";
    case CpuFormat::Bf16:
      return "bf16";
    case CpuFormat::Mxfp4:
      return "mxfp4";
    case CpuFormat::Int4Down8:
      return "int4-down8";
    case CpuFormat::Int8Rotated:
      return "int8-rotated";
  }
  return "native";
}

bool parse_cpu_format(std::string_view name, CpuFormat& out) {
  for (CpuFormat f : kCpuFormats) {
    if (name == cpu_format_name(f)) {
      out = f;
      return true;
    }
  }
  return false;
}

std::string cpu_format_names_in_words() {
  std::vector<std::string_view> names;
  for (CpuFormat f : kCpuFormats) names.push_back(cpu_format_name(f));
  return names_in_words(names);
}

std::unique_ptr<model::Checkpoint> LoadedModel::open_checkpoint(const std::string& path,
                                                                model::ModelSpec& spec) {
  // A folder converted from a GGUF model reads as its source: metadata and the tensors used
  // as stored from its base.gguf, the packed matrices from the files beside it.
  const std::string base = model::converted_gguf(path);
  if (!model::is_gguf_path(path) && base.empty()) {
    spec = model::load_model_spec(path);
    return std::make_unique<model::Checkpoint>(path);
  }
  std::unique_ptr<model::GgufSet> set;
  try {
    set = std::make_unique<model::GgufSet>(base.empty() ? path : base);
  } catch (const model::ModelError&) {
    throw;
  } catch (const std::exception& e) {
    throw model::ModelError(e.what());
  }
  spec = model::gguf_model_spec(*set);
  auto checkpoint = std::make_unique<model::Checkpoint>(std::move(set), spec);
  if (!base.empty()) {
    // The packed layers beside it (load() has checked every file its manifest lists is there).
    std::vector<std::filesystem::path> layers;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") layers.push_back(e.path());
    }
    std::sort(layers.begin(), layers.end());
    for (const auto& layer : layers) checkpoint->add_safetensors(layer.string());
  }
  return checkpoint;
}

void LoadedModel::check(const std::string& path) {
  model::ModelSpec spec;
  open_checkpoint(path, spec);
}

std::unique_ptr<LoadedModel> LoadedModel::load(const std::string& folder,
                                               const LoadOptions& options) {
  auto m = std::unique_ptr<LoadedModel>(new LoadedModel);
  m->on_progress_ = options.on_progress;
  m->folder_ = folder;
  const bool gguf = model::is_gguf_path(folder);
  const bool converted =
      !gguf && std::filesystem::exists(std::filesystem::path(folder) / model::kManifestName);
  if (converted) {
    // An unfinished conversion is named as such before anything it lacks is complained about.
    const model::Manifest manifest = model::read_manifest(folder);
    if (!manifest.complete) {
      throw model::ModelError(
          folder +
          ": the conversion into this folder did not finish; run tandem convert again with "
          "the same options to resume it.");
    }
    for (const model::OutputFile& f : manifest.files) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(std::filesystem::path(folder) / f.name, ec)) {
        throw model::ModelError(folder + ": " + f.name +
                                " is missing from this converted model; run tandem convert again "
                                "with the same options to write it again (the other files are "
                                "kept).");
      }
    }
    if (options.pools > 0 && options.pools != manifest.pools) {
      throw model::ModelError(folder + " was converted for " + pools_phrase(manifest.pools) +
                              ", but " + pools_phrase(options.pools) +
                              (options.pools == 1 ? " was" : " were") +
                              " asked for; run it with --pools " + std::to_string(manifest.pools) +
                              " (or without --pools), or convert it again with --pools " +
                              std::to_string(options.pools) + ".");
    }
    m->pools_ = manifest.pools;
    const CpuFormat own = cpu_format_of(manifest.method);
    if (options.cpu_format_asked && options.cpu_format != CpuFormat::Native &&
        options.cpu_format != own) {
      throw model::ModelError(
          folder + " was converted to " + std::string(cpu_format_name(own)) +
          ", the format it runs in; --cpu-format " +
          std::string(cpu_format_name(options.cpu_format)) +
          " would not be used. Leave --cpu-format out, or convert the original model again with "
          "--method " +
          std::string(cpu_format_name(options.cpu_format)) + ".");
    }
    if (options.dense_bf16 && !manifest.dense_bf16 && own != CpuFormat::Bf16) {
      throw model::ModelError(
          folder +
          " was converted with attention, shared experts, dense layers and the output "
          "head in int8" +
          (own == CpuFormat::Int8 ? std::string()
                                  : " (the rest in " + std::string(cpu_format_name(own)) + ")") +
          ", the format they run in; --dense-bf16 would not be used. Leave it out, or convert the "
          "original model again with --dense-bf16.");
    }
  }
  if (!converted && options.dense_bf16 && options.cpu_format == CpuFormat::Native) {
    throw model::ModelError(
        "--dense-bf16 keeps attention, shared experts, dense layers and the output head in BF16 "
        "beside weights packed at load, and the weights run as stored here (native); give "
        "--cpu-format int8 or int4 with it.");
  }
  m->checkpoint_ = open_checkpoint(folder, m->spec_);
  m->checkpoint_->set_fp8_scales(m->spec_.fp8);
  m->weights_ = model::bind_weights(m->spec_, *m->checkpoint_);
  m->cpu_format_ = options.cpu_format;
  m->variant_ = kernels::active_variant();
  const bool experts = has_routed_experts(m->weights_);
  if (converted) {
    if (options.cpu_format != CpuFormat::Native) {
      log::info(
          "{} was converted; its packed weights are used and the requested CPU format is ignored",
          folder);
    }
    m->load_converted(folder, options.threads);
  } else if (options.cpu_format != CpuFormat::Native) {
    const auto started = std::chrono::steady_clock::now();
    const CpuFormat format = options.cpu_format;
    if (format == CpuFormat::Bf16 && m->variant_ == kernels::CpuVariant::Avx512 &&
        !kernels::detect_isa().usable.avx512_bf16) {
      // The AVX-512 BF16 kernel needs AVX512_BF16; AVX2 code reads the same layout.
      m->variant_ = kernels::CpuVariant::Avx2;
    }
    const kernels::PackedFormat expert_format =
        packed_format_for(format, MatrixRole::Expert, m->spec_.num_experts > 0);
    const kernels::PackedFormat expert_down_format = packed_format_for(
        format, MatrixRole::Expert, m->spec_.num_experts > 0, options.dense_bf16, true);
    if (format == CpuFormat::Mxfp4) {
      const std::string why = mxfp4_refusal(m->spec_);
      if (!why.empty()) throw model::ModelError(folder + ": " + why);
    }
    if (has_int4(format) && m->spec_.mxfp4_experts) {
      log::warn(
          "{}: its experts are MXFP4 already; int4 rounds them a second time, while mxfp4 keeps "
          "them exactly at the same size",
          folder);
    }
    const std::int64_t expert_group = scale_group(expert_format, options.int4_group);
    m->pools_ =
        pools_for(folder, options.pools, experts, m->spec_.moe_intermediate_size, expert_group);
    const bool sliced = experts && m->pools_ > 1;
    std::vector<kernels::WeightMatrix*> targets;
    std::vector<kernels::PackedFormat> formats;
    for (const PackableMatrix& p : packable_matrices(m->weights_)) {
      if (sliced && p.role == MatrixRole::Expert) continue;
      targets.push_back(p.matrix);
      formats.push_back(
          packed_format_for(format, p.role, m->spec_.num_experts > 0, options.dense_bf16, p.down));
    }
    m->packed_.resize(targets.size());
    StageProgress packing(m->on_progress_, "packing the weights", targets.size());
    for_each_on_threads(
        options.threads, targets.size(),
        [&](std::size_t i) {
          m->packed_[i] = std::make_unique<kernels::PackedMatrix>(
              pack_matrix(*targets[i], formats[i], options.int4_group, rotates_int8(format)));
        },
        &packing);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      targets[i]->packed = m->packed_[i].get();
      targets[i]->packed_variant = kernels::packed_variant_for(formats[i], m->variant_);
    }
    if (sliced) {
      const std::int64_t inner = m->spec_.moe_intermediate_size;
      const int pools = m->pools_;
      m->make_expert_slices(
          expert_format, expert_down_format, expert_group, options.threads,
          [&](const kernels::WeightMatrix& matrix, SliceAxis axis, int pool,
              std::uint8_t* destination, kernels::PackedFormat part_format) {
            const SliceSource source(matrix, axis, expert_slice(inner, pools, pool));
            kernels::PackedMatrix p =
                pack_matrix(source.matrix(), part_format, expert_group, rotates_int8(format));
            const std::size_t bytes = static_cast<std::size_t>(p.blocks) * p.block_bytes();
            std::memcpy(destination, p.bytes.data.get(), bytes);
            p.bytes = kernels::AlignedBytes::view(destination, bytes);
            return p;
          });
    }
    log::info("packed {} matrices as {} in {:.1f} s ({:.2f} GiB)", m->packed_.size(),
              cpu_format_name(options.cpu_format),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              static_cast<double>(m->packed_bytes()) / (1u << 30));
  } else {
    // The reference path splits no expert; the pools only group the threads.
    m->pools_ = options.pools > 0 ? options.pools : hw::default_pool_count(hw::probe_topology());
  }
  m->map_in_stored_weights(options.threads);
  if (m->cpu_format_ != CpuFormat::Native && options.dense == DenseBackend::Onednn)
    m->attach_onednn(options.dense, options.threads);
  log::info("loaded {} ({}, {} layers, hidden {}, {} experts) from {}", m->spec_.architecture,
            model::family_name(m->spec_.family), m->spec_.num_layers, m->spec_.hidden_size,
            m->spec_.num_experts, folder);
  m->on_progress_ = nullptr;  // the load is over: nothing is told after it returns
  return m;
}

// A mapped file's pages come into the process on first touch, one fault for a few pages at
// a time, so without this the first prompts paid for every expert they met first: on the
// Q8_0 synthetic (5.5 GB, cached) a first prompt of 16 tokens ran at 17 tokens/s and the
// next at 136-160 (2 threads, Zen 5 VM). Mapped in at load, the first ran at 149-155, for
// 0.4 s more of loading. A file not yet cached is read here, in long runs, instead of by
// the faults of the first prompts. Weights larger than the memory available are left to
// come in as they are used: mapping them all in would only push out the ones mapped first.
void LoadedModel::map_in_stored_weights(int threads) {
  const auto started = std::chrono::steady_clock::now();
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
  const auto add = [&](const kernels::WeightMatrix& w) {
    if (w.data == nullptr || w.packed != nullptr) return;
    const auto begin = reinterpret_cast<std::uintptr_t>(w.data);
    const std::uintptr_t end = begin + kernels::dtype_bytes(w.dtype, w.rows * w.cols);
    spans.emplace_back(begin / page * page, (end + page - 1) / page * page);
  };
  // The embedding table is never packed: a decoded token reads one row of it. Left to come
  // in as rows are first met, its faults took 1-2.7 ms of a token's 12-14 ms on the
  // Qwen3-shaped synthetic's INT8 folder, whose files had left the page cache.
  add(weights_.embedding);
  bool stored_matrices = false;
  for (const PackableMatrix& p : packable_matrices(weights_)) {
    if (experts_sliced_ && p.role == MatrixRole::Expert) continue;  // read from their slices
    stored_matrices = stored_matrices || (p.matrix->data != nullptr && p.matrix->packed == nullptr);
    add(*p.matrix);
  }
  std::sort(spans.begin(), spans.end());
  // Merged where they touch, then cut into pieces of 64 MiB for the threads and the bar.
  constexpr std::uintptr_t kPiece = std::uintptr_t{64} << 20;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> pieces;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < spans.size();) {
    std::uintptr_t begin = spans[i].first, end = spans[i].second;
    for (++i; i < spans.size() && spans[i].first <= end; ++i) end = std::max(end, spans[i].second);
    total += end - begin;
    for (; begin < end; begin += kPiece) pieces.emplace_back(begin, std::min(end, begin + kPiece));
  }
  if (pieces.empty()) return;
  const hw::MemoryInfo memory = hw::probe_memory();
  if (!memory.error.empty() || total > memory.available_bytes) {
    log::info(
        "the weights ({:.1f} GiB) are larger than the memory available ({:.1f} GiB): they are "
        "read from disk as they are first used",
        static_cast<double>(total) / (1u << 30),
        static_cast<double>(memory.available_bytes) / (1u << 30));
    return;
  }
  StageProgress reading(on_progress_,
                        stored_matrices ? "reading the weights" : "reading the embedding table",
                        pieces.size());
  for_each_on_threads(
      threads, pieces.size(),
      [&](std::size_t i) {
        auto* begin = reinterpret_cast<char*>(pieces[i].first);
        const std::size_t length = pieces[i].second - pieces[i].first;
#ifdef MADV_POPULATE_READ
        if (::madvise(begin, length, MADV_POPULATE_READ) == 0) return;
#endif
        // Linux before 5.14: a read of each page does the same.
        volatile char sink = 0;
        for (std::size_t at = 0; at < length; at += page) sink = sink + begin[at];
      },
      &reading);
  log::info("read {:.1f} GiB of {} into memory in {:.1f} s",
            static_cast<double>(total) / (1u << 30),
            stored_matrices ? "weights" : "the embedding table",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

// The packed matrices of a converted folder are copied from its mapped files into aligned
// memory as they are; nothing is re-packed.
void LoadedModel::load_converted(const std::string& folder, int threads) {
  const auto started = std::chrono::steady_clock::now();
  const model::ConvertedWeights converted(*checkpoint_, model::read_manifest(folder));
  const model::Manifest& manifest = converted.manifest();
  cpu_format_ = cpu_format_of(manifest.method);
  if (cpu_format_ == CpuFormat::Bf16 && variant_ == kernels::CpuVariant::Avx512 &&
      !kernels::detect_isa().usable.avx512_bf16) {
    variant_ = kernels::CpuVariant::Avx2;
  }
  const bool sliced = has_routed_experts(weights_) && pools_ > 1;
  const kernels::PackedFormat expert_format =
      packed_format_for(cpu_format_, MatrixRole::Expert, spec_.num_experts > 0);
  const kernels::PackedFormat expert_down_format = packed_format_for(
      cpu_format_, MatrixRole::Expert, spec_.num_experts > 0, manifest.dense_bf16, true);
  const std::int64_t expert_group = scale_group(expert_format, manifest.group);
  if (sliced && !can_slice_experts(spec_.moe_intermediate_size, pools_, expert_group)) {
    throw model::ModelError(folder + ": the manifest says " + pools_phrase(pools_) +
                            ", which cannot split this model's experts; the folder is damaged, "
                            "convert the model again.");
  }
  std::vector<PackableMatrix> targets;
  for (const PackableMatrix& p : packable_matrices(weights_)) {
    if (!(sliced && p.role == MatrixRole::Expert)) targets.push_back(p);
  }
  packed_.resize(targets.size());
  // Several threads copy at once: one alone is bound by page faults, not by memory.
  StageProgress reading(on_progress_, "reading the converted weights", targets.size());
  for_each_on_threads(
      threads, targets.size(),
      [&](std::size_t i) {
        packed_[i] = std::make_unique<kernels::PackedMatrix>(converted.load(*targets[i].matrix));
      },
      &reading);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    targets[i].matrix->packed = packed_[i].get();
    targets[i].matrix->packed_variant = kernels::packed_variant_for(packed_[i]->format, variant_);
  }
  if (sliced) {
    const std::int64_t inner = spec_.moe_intermediate_size;
    make_expert_slices(
        expert_format, expert_down_format, expert_group, threads,
        [&](const kernels::WeightMatrix& matrix, SliceAxis axis, int pool,
            std::uint8_t* destination, kernels::PackedFormat part_format) {
          const kernels::PackedMatrix shape =
              slice_shape(matrix.rows, matrix.cols, axis, expert_slice(inner, pools_, pool),
                          part_format, expert_group);
          return converted.load_slice(matrix, pool, shape.rows, shape.cols, destination);
        });
  }
  converted_ = true;
  log::info("loaded {} converted {} matrices in {:.1f} s ({:.2f} GiB)", packed_.size(),
            cpu_format_name(cpu_format_),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
            static_cast<double>(packed_bytes()) / (1u << 30));
}

void LoadedModel::make_expert_slices(kernels::PackedFormat format,
                                     kernels::PackedFormat down_format, std::int64_t int4_group,
                                     int threads, const SliceMaker& make) {
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t inner = spec_.moe_intermediate_size;
  const auto pools = static_cast<std::size_t>(pools_);
  const std::vector<std::vector<int>> nodes = hw::pool_numa_nodes(hw::probe_topology(), pools_);
  // Every slice has one shape (the pools split the width evenly); in a pool's memory each
  // expert's gate, up and down slices lie one after another.
  const SliceRange range = expert_slice(inner, pools_, 0);
  const std::size_t gate_bytes =
      packed_data_bytes(slice_shape(inner, h, SliceAxis::Rows, range, format, int4_group));
  const std::size_t down_bytes =
      packed_data_bytes(slice_shape(h, inner, SliceAxis::Columns, range, down_format, int4_group));
  const std::size_t part_offset[3] = {0, gate_bytes, 2 * gate_bytes};
  const std::size_t stride = 2 * gate_bytes + down_bytes;

  struct Expert {
    model::FeedForwardWeights* weights;
    std::size_t memory;  // index in expert_memory_ of pool 0's memory of its layer
    std::size_t index;   // within its layer
  };
  std::vector<Expert> experts;
  bool bound = true;
  for (model::LayerWeights& layer : weights_.layers) {
    if (!layer.moe || layer.experts.experts.empty()) continue;
    const std::size_t memory = expert_memory_.size();
    for (std::size_t p = 0; p < pools; ++p) {
      expert_memory_.emplace_back(layer.experts.experts.size() * stride, nodes[p]);
      bound = bound && expert_memory_.back().bound();
    }
    for (std::size_t e = 0; e < layer.experts.experts.size(); ++e) {
      layer.experts.experts[e].slices.resize(pools);
      experts.push_back({&layer.experts.experts[e], memory, e});
    }
  }
  const std::size_t first = packed_.size();
  packed_.resize(first + experts.size() * pools * 3);
  StageProgress splitting(on_progress_, "splitting the experts", experts.size());
  for_each_on_threads(
      threads, experts.size(),
      [&](std::size_t i) {
        const Expert& expert = experts[i];
        const kernels::WeightMatrix* parts[3] = {&expert.weights->gate, &expert.weights->up,
                                                 &expert.weights->down};
        const SliceAxis axes[3] = {SliceAxis::Rows, SliceAxis::Rows, SliceAxis::Columns};
        for (std::size_t p = 0; p < pools; ++p) {
          std::uint8_t* base = expert_memory_[expert.memory + p].data() + expert.index * stride;
          std::unique_ptr<kernels::PackedMatrix>* slot = &packed_[first + (i * pools + p) * 3];
          for (std::size_t k = 0; k < 3; ++k) {
            slot[k] = std::make_unique<kernels::PackedMatrix>(
                make(*parts[k], axes[k], static_cast<int>(p), base + part_offset[k],
                     k == 2 ? down_format : format));
          }
          const SliceRange r = expert_slice(inner, pools_, static_cast<int>(p));
          expert.weights->slices[p] = {r.begin,       r.width,       slot[0].get(),
                                       slot[1].get(), slot[2].get(), variant_};
        }
      },
      &splitting);
  experts_sliced_ = true;
  log::info("split {} experts into {} of width {}, each in memory {}", experts.size(),
            pools_phrase(pools_), range.width,
            bound ? "bound to its pool's NUMA nodes" : "of no particular node");
}

// With DenseBackend::Onednn, the dense INT8 matrices are reordered into oneDNN's layout
// beside their packed form: oneDNN takes the prompts, ours decoding's single token.
void LoadedModel::attach_onednn(DenseBackend backend, int threads) {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<PackableMatrix> targets = packable_matrices(weights_);
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const kernels::WeightMatrix& w = *targets[i].matrix;
    if (w.packed != nullptr && onednn_for(backend, w.packed->format, targets[i].role))
      chosen.push_back(i);
  }
  if (!chosen.empty()) {
    if (const std::string refusal = kernels::onednn_refusal(kernels::PackedFormat::Int8);
        !refusal.empty()) {
      throw ModelError("--dense onednn cannot be used on this computer: " + refusal +
                       " Leave --dense out (or give auto or packed): Tandem's own kernels take "
                       "every product exactly.");
    }
  }
  std::vector<std::unique_ptr<kernels::OnednnMatmul>> products(chosen.size());
  for_each_on_threads(threads, chosen.size(), [&](std::size_t c) {
    const kernels::WeightMatrix& w = *targets[chosen[c]].matrix;
    products[c] =
        std::make_unique<kernels::OnednnMatmul>(*w.packed, kernels::onednn_slices_for(w.rows));
  });
  std::string implementation;
  for (std::size_t c = 0; c < chosen.size(); ++c) {
    implementation = products[c]->implementation(1);
    targets[chosen[c]].matrix->onednn = products[c].get();
    targets[chosen[c]].matrix->onednn_min_tokens = kOnednnMinTokens;
    onednn_.push_back(std::move(products[c]));
  }
  if (!onednn_.empty()) {
    log::info(
        "oneDNN ({}, {}) multiplies {} dense INT8 matrices from {} tokens on; reordered "
        "in {:.1f} s ({:.2f} GiB more)",
        kernels::onednn_description(), implementation, onednn_.size(), kOnednnMinTokens,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
        static_cast<double>(onednn_bytes()) / (1u << 30));
  }
}

std::uint64_t LoadedModel::onednn_bytes() const {
  std::uint64_t total = 0;
  for (const auto& p : onednn_) total += p->weight_bytes();
  return total;
}

std::uint64_t LoadedModel::packed_bytes() const {
  std::uint64_t total = 0;
  for (const auto& p : packed_) total += kernels::packed_matrix_bytes(*p);
  return total;
}

std::uint64_t LoadedModel::active_weight_bytes_per_token() const {
  std::uint64_t total = matrix_bytes(weights_.output);
  for (const model::LayerWeights& l : weights_.layers) {
    const model::AttentionWeights& a = l.attention;
    for (const kernels::WeightMatrix* m :
         {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.k_b, &a.v_b})
      total += matrix_bytes(*m);
    auto ffn = [&](const model::FeedForwardWeights& f) {
      if (!f.slices.empty()) {
        std::uint64_t sliced = 0;
        for (const model::ExpertSlice& s : f.slices) {
          sliced += kernels::packed_matrix_bytes(*s.gate) + kernels::packed_matrix_bytes(*s.up) +
                    kernels::packed_matrix_bytes(*s.down);
        }
        return sliced;
      }
      return matrix_bytes(f.gate) + matrix_bytes(f.up) + matrix_bytes(f.down);
    };
    if (l.moe) {
      total += matrix_bytes(l.experts.router);
      if (!l.experts.experts.empty())
        total += static_cast<std::uint64_t>(spec_.experts_per_token) * ffn(l.experts.experts[0]);
      if (l.experts.shared) total += ffn(*l.experts.shared);
    } else {
      total += ffn(l.dense);
    }
  }
  return total;
}

}  // namespace tandem::model
