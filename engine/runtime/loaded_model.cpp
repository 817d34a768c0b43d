#include "engine/runtime/loaded_model.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/log/log.h"

namespace tandem::runtime {
namespace {

// Every matrix the fast kernels take: all but the embedding (looked up by row) and MLA's
// kv_b, whose per-head slices feed the absorbed attention.
std::vector<kernels::WeightMatrix*> packable(model::ModelWeights& w) {
  std::vector<kernels::WeightMatrix*> out;
  auto add = [&](kernels::WeightMatrix& m) {
    if (m.data != nullptr) out.push_back(&m);
  };
  auto add_ffn = [&](model::FeedForwardWeights& f) {
    add(f.gate);
    add(f.up);
    add(f.down);
  };
  for (model::LayerWeights& l : w.layers) {
    model::AttentionWeights& a = l.attention;
    for (kernels::WeightMatrix* m : {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a}) add(*m);
    if (l.moe) {
      for (model::FeedForwardWeights& e : l.experts.experts) add_ffn(e);
      if (l.experts.shared) add_ffn(*l.experts.shared);
    } else {
      add_ffn(l.dense);
    }
  }
  add(w.output);
  return out;
}

std::uint64_t matrix_bytes(const kernels::WeightMatrix& m) {
  if (m.data == nullptr) return 0;
  if (m.packed != nullptr) {
    return static_cast<std::uint64_t>(m.packed->blocks) * m.packed->block_bytes() + m.packed->row_scale.size() * sizeof(float);
  }
  return static_cast<std::uint64_t>(m.rows * m.cols) * kernels::dtype_size(m.dtype);
}

}  // namespace

std::string_view cpu_format_name(CpuFormat f) {
  switch (f) {
    case CpuFormat::Native: return "native";
    case CpuFormat::Int8: return "int8";
    case CpuFormat::Bf16: return "bf16";
  }
  return "native";
}

bool parse_cpu_format(std::string_view name, CpuFormat& out) {
  for (CpuFormat f : {CpuFormat::Native, CpuFormat::Int8, CpuFormat::Bf16}) {
    if (name == cpu_format_name(f)) {
      out = f;
      return true;
    }
  }
  return false;
}

std::unique_ptr<LoadedModel> LoadedModel::load(const std::string& folder, const LoadOptions& options) {
  auto m = std::unique_ptr<LoadedModel>(new LoadedModel);
  m->folder_ = folder;
  m->spec_ = model::load_model_spec(folder);
  m->checkpoint_ = std::make_unique<model::Checkpoint>(folder);
  m->checkpoint_->set_fp8_block(m->spec_.fp8_block_rows, m->spec_.fp8_block_cols);
  m->weights_ = model::bind_weights(m->spec_, *m->checkpoint_);
  m->cpu_format_ = options.cpu_format;
  m->variant_ = kernels::active_variant();
  if (options.cpu_format != CpuFormat::Native) {
    const auto started = std::chrono::steady_clock::now();
    const bool int8 = options.cpu_format == CpuFormat::Int8;
    if (!int8 && m->variant_ == kernels::CpuVariant::Avx512 && !kernels::detect_isa().usable.avx512_bf16) {
      // The AVX-512 BF16 kernel needs AVX512_BF16; AVX2 code reads the same layout.
      m->variant_ = kernels::CpuVariant::Avx2;
    }
    std::vector<kernels::WeightMatrix*> targets = packable(m->weights_);
    m->packed_.resize(targets.size());
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t i = next.fetch_add(1); i < targets.size(); i = next.fetch_add(1)) {
        m->packed_[i] = std::make_unique<kernels::PackedMatrix>(int8 ? kernels::pack_int8(*targets[i])
                                                                      : kernels::pack_bf16(*targets[i]));
      }
    };
    const unsigned n = options.threads > 0 ? static_cast<unsigned>(options.threads)
                                           : std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> workers;
    for (unsigned i = 1; i < n; ++i) workers.emplace_back(work);
    work();
    for (std::thread& t : workers) t.join();
    for (std::size_t i = 0; i < targets.size(); ++i) {
      targets[i]->packed = m->packed_[i].get();
      targets[i]->packed_variant = m->variant_;
    }
    log::info("packed {} matrices as {} in {:.1f} s ({:.2f} GiB)", targets.size(), cpu_format_name(options.cpu_format),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              static_cast<double>(m->packed_bytes()) / (1u << 30));
  }
  log::info("loaded {} ({}, {} layers, hidden {}, {} experts) from {}", m->spec_.architecture,
            model::family_name(m->spec_.family), m->spec_.num_layers, m->spec_.hidden_size, m->spec_.num_experts,
            folder);
  return m;
}

std::uint64_t LoadedModel::packed_bytes() const {
  std::uint64_t total = 0;
  for (const auto& p : packed_) total += static_cast<std::uint64_t>(p->blocks) * p->block_bytes() + p->row_scale.size() * sizeof(float);
  return total;
}

std::uint64_t LoadedModel::active_weight_bytes_per_token() const {
  std::uint64_t total = matrix_bytes(weights_.output);
  for (const model::LayerWeights& l : weights_.layers) {
    const model::AttentionWeights& a = l.attention;
    for (const kernels::WeightMatrix* m : {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a, &a.kv_b}) total += matrix_bytes(*m);
    auto ffn = [&](const model::FeedForwardWeights& f) { return matrix_bytes(f.gate) + matrix_bytes(f.up) + matrix_bytes(f.down); };
    if (l.moe) {
      total += matrix_bytes(l.experts.router);
      if (!l.experts.experts.empty()) total += static_cast<std::uint64_t>(spec_.experts_per_token) * ffn(l.experts.experts[0]);
      if (l.experts.shared) total += ffn(*l.experts.shared);
    } else {
      total += ffn(l.dense);
    }
  }
  return total;
}

}  // namespace tandem::runtime
