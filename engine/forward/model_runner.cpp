#include "engine/forward/model_runner.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/forward/runner_workspace.h"
#include "engine/hw/hardware_report.h"
#include "engine/log/log.h"

namespace tandem::forward {
namespace {

using backend::DevicePtr;
using backend::Part;
using backend::Queue;

// DeepSeek-V3's low-rank norms use the library default, not config.rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

}  // namespace

std::uint64_t ModelRunner::now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

ModelRunner::ModelRunner(const model::LoadedModel& model, backend::NumaPools& cpu)
    : ModelRunner(model, cpu, nullptr, schedule::HybridOptions{}) {}

ModelRunner::ModelRunner(const model::LoadedModel& model, backend::NumaPools& cpu,
                         std::unique_ptr<backend::Backend> accelerator,
                         const schedule::HybridOptions& hybrid)
    : model_(model),
      spec_(model.spec()),
      cpu_pools_(cpu),
      cpu_backend_(std::make_unique<backend::CpuBackend>(cpu, model.spec())),
      accelerator_(std::move(accelerator)),
      hybrid_(hybrid),
      cpu_expert_compute_(model.spec()),
      cpu_threads_(cpu),
      work_(std::make_unique<Workspace>()),
      deferred_(std::make_unique<PendingDeferral>()),
      metrics_(std::make_shared<measure::Metrics>(spec_.num_layers,
                                                  std::max<std::int64_t>(1, spec_.num_experts))) {
  const model::ModelWeights& w = model.weights();
  for (const model::LayerWeights& l : w.layers) {
    if (l.moe && l.experts.experts.empty())
      throw std::invalid_argument("a mixture-of-experts layer has no experts");
    // Each slice lies in the memory of its pool's NUMA nodes: the pools must be those.
    const auto slices = l.moe ? static_cast<int>(l.experts.experts[0].slices.size()) : 0;
    if (slices > 1 && slices != cpu.pools()) {
      throw std::invalid_argument("the experts are split for " + std::to_string(slices) +
                                  " pools but the threads are in " + std::to_string(cpu.pools()) +
                                  "; make the NumaPools with the model's pool count");
    }
  }
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    if (w.layers[l].moe) moe_layers_.push_back(static_cast<std::int64_t>(l));
  }
  if (!accelerator_) {
    // The CPU alone: nothing to place, defer or move.
    const std::int64_t chunk = hybrid_.chunk_tokens;
    hybrid_ = schedule::HybridOptions{};
    hybrid_.gpu_experts_per_layer = 0;
    hybrid_.chunk_tokens = schedule::prefill_chunk_tokens(chunk, false, !moe_layers_.empty());
    device_ = cpu_backend_.get();
    weights_ = place_weights(*device_, spec_, w);
    // Grown when a longer pass comes (a prompt is never longer than its context, whatever
    // --prefill-chunk asks), so short conversations keep the scratch small.
    ensure_workspace(std::min(hybrid_.chunk_tokens, schedule::kPrefillChunkTokens), 1);
    return;
  }
  const std::string why = schedule::check_hybrid_options(hybrid_, spec_);
  if (!why.empty()) throw std::invalid_argument(why);
  device_ = accelerator_.get();
  metrics_->set_accelerator(true);
  hybrid_.chunk_tokens = schedule::prefill_chunk_tokens(hybrid_.chunk_tokens, true, true);

  // What must be on the accelerator whatever the experts: the dense weights, the scratch of
  // a prompt chunk and the KV cache of the context asked for.
  const std::uint64_t budget = device_->memory_budget();
  const std::uint64_t dense_bytes = device_weight_bytes(*device_, w);
  const std::uint64_t kv_bytes = device_->kv_cache_bytes(spec_, hybrid_.context_tokens);
  const std::uint64_t scratch_bytes =
      Workspace::device_bytes(spec_, w, std::max<std::int64_t>(1, hybrid_.chunk_tokens), 1);
  if (budget > 0 && dense_bytes + kv_bytes + scratch_bytes > budget) {
    throw backend::DeviceOutOfMemory(
        "the accelerator (" + device_->description() +
            ") cannot hold this model's attention, dense weights, embeddings and output head (" +
            hw::format_bytes(dense_bytes) + "), a KV cache of " +
            std::to_string(hybrid_.context_tokens) + " tokens (" + hw::format_bytes(kv_bytes) +
            ") and the scratch of a prompt chunk (" + hw::format_bytes(scratch_bytes) +
            "): that is " + hw::format_bytes(dense_bytes + kv_bytes + scratch_bytes) + " of its " +
            hw::format_bytes(budget) +
            ". Give it more memory, use a shorter context, or run with --accelerator none.",
        dense_bytes + kv_bytes + scratch_bytes, budget);
  }
  weights_ = place_weights(*device_, spec_, w);
  ensure_workspace(hybrid_.chunk_tokens, 1);

  if (moe_layers_.empty()) return;
  // The largest layer's expert: a GGUF file may store each layer's experts in another
  // format (unsloth's dynamic files do), and every staging slot must hold any of them.
  const model::FeedForwardWeights* largest =
      &w.layers[static_cast<std::size_t>(moe_layers_[0])].experts.experts[0];
  for (std::int64_t l : moe_layers_) {
    const model::FeedForwardWeights& e = w.layers[static_cast<std::size_t>(l)].experts.experts[0];
    if (device_->expert_bytes(e) > device_->expert_bytes(*largest)) largest = &e;
  }
  const model::FeedForwardWeights& any_expert = *largest;
  const std::uint64_t expert_bytes = device_->expert_bytes(any_expert);
  const std::uint64_t used = device_->memory_used();
  const std::uint64_t free =
      budget == 0 ? ~std::uint64_t{0} : budget - std::min(budget, used + kv_bytes);
  const auto layers = static_cast<std::int64_t>(moe_layers_.size());
  const bool layerwise = hybrid_.prefill_token_threshold > 0;
  const std::int64_t fit = schedule::experts_that_fit(free, expert_bytes, spec_.num_experts, layers,
                                                      layerwise, hybrid_.strategy);
  gpu_experts_per_layer_ = hybrid_.gpu_experts_per_layer >= 0 ? hybrid_.gpu_experts_per_layer : fit;
  const std::uint64_t wanted =
      static_cast<std::uint64_t>(gpu_experts_per_layer_ * layers) * expert_bytes;
  if (wanted > free) {
    const std::int64_t fit_alone = schedule::experts_that_fit(free, expert_bytes, spec_.num_experts,
                                                              layers, false, hybrid_.strategy);
    throw backend::DeviceOutOfMemory(
        "--num-gpu-experts " + std::to_string(gpu_experts_per_layer_) + " needs " +
            hw::format_bytes(wanted) + " on the accelerator (" + device_->description() +
            ") for the experts, but " + hw::format_bytes(free) +
            " are free beside the dense weights and the KV cache: give at most " +
            std::to_string(fit_alone) + ", or leave it out to place as many as fit.",
        wanted, free);
  }
  const schedule::ExpertPlacement placement = schedule::place_experts(
      hybrid_.strategy, spec_.layer_is_moe, spec_.num_experts, gpu_experts_per_layer_,
      hybrid_.stats ? &*hybrid_.stats : nullptr, hybrid_.random_seed);
  residency_ = std::make_unique<schedule::ExpertResidency>(*device_, w, placement);

  if (layerwise) {
    std::int64_t off_device = 0;
    for (std::int64_t l : moe_layers_)
      off_device = std::max(off_device, spec_.num_experts - residency_->resident(l));
    try {
      for (auto& set : staging_) {
        for (std::int64_t i = 0; i < off_device; ++i)
          set.push_back(device_->allocate_expert(any_expert));
      }
      for (auto& t : staged_table_) t.assign(static_cast<std::size_t>(spec_.num_experts), nullptr);
    } catch (const backend::DeviceOutOfMemory& e) {
      for (auto& set : staging_) set.clear();
      log::warn(
          "layerwise prefill is off: staging two layers of {} experts ({}) does not fit beside "
          "the {} resident experts per layer ({}); use fewer --num-gpu-experts to make room",
          off_device, hw::format_bytes(2 * static_cast<std::uint64_t>(off_device) * expert_bytes),
          gpu_experts_per_layer_, e.what());
    }
  }
  if (hybrid_.dynamic_update) {
    if (residency_->slot_count() == 0) {
      log::info("the dynamic expert update has nothing to move: no expert is on the accelerator");
    } else {
      dynamic_ = std::make_unique<schedule::DynamicPlacement>(
          *residency_, spec_.num_layers, spec_.num_experts, hybrid_.histogram_half_life_tokens,
          hybrid_.move_bytes_per_step);
    }
  }
  for (std::int64_t l : moe_layers_)
    for (std::int64_t e = 0; e < spec_.num_experts; ++e)
      metrics_->set_resident(l, e, residency_->on_device(l, e));
  log::info(
      "{}: {} experts per MoE layer of {} on it ({} in all, {}), placed {}; layerwise "
      "prefill {}; deferral {}; dynamic update {}",
      device_->description(), gpu_experts_per_layer_, spec_.num_experts, residency_->slot_count(),
      hw::format_bytes(residency_->bytes()), schedule::strategy_name(hybrid_.strategy),
      layerwise_prefill() ? "from " + std::to_string(hybrid_.prefill_token_threshold) + " tokens"
                          : std::string("off"),
      hybrid_.max_deferred_per_token, dynamic_ ? "on" : "off");
  device_->synchronize();
}

ModelRunner::~ModelRunner() {
  try {
    device_->synchronize();
  } catch (const std::exception&) {
    // Reported when it happened; only the results are lost.
  }
}

schedule::ExpertPlacement ModelRunner::placement() const {
  if (residency_) return residency_->placement();
  schedule::ExpertPlacement p;
  p.resident.resize(static_cast<std::size_t>(spec_.num_layers));
  return p;
}

std::unique_ptr<ContextCache> ModelRunner::make_cache(std::int64_t capacity) {
  return std::unique_ptr<ContextCache>(
      new ContextCache(device_->allocate_kv_cache(spec_, capacity)));
}

void ModelRunner::set_cpu_kv_cache_format(backend::KvCacheFormat format) {
  // Refused before any cache is made, where the CPU runs attention (an accelerator keeps its
  // own cache).
  if (!has_accelerator()) {
    if (const std::string why = backend::KvCache::refusal(spec_, format); !why.empty())
      throw std::invalid_argument(why);
  }
  cpu_backend_->set_kv_cache_format(format);
}

void ModelRunner::check_tokens(std::span<const std::int32_t> tokens,
                               const ContextCache& cache) const {
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (cache.size() + n > cache.capacity()) {
    throw std::length_error("the context is full: " + std::to_string(cache.size() + n) +
                            " tokens do not fit in " + std::to_string(cache.capacity()));
  }
  for (std::int32_t id : tokens) {
    if (id < 0 || id >= spec_.vocab_size) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(spec_.vocab_size));
    }
  }
}

void ModelRunner::ensure_workspace(std::int64_t n, std::int64_t logit_rows) {
  Workspace& w = *work_;
  if (n <= w.tokens && logit_rows <= w.logit_rows) return;
  device_->synchronize();
  w.allocate(*device_, spec_, model_.weights(), std::max(n, w.tokens),
             std::max(logit_rows, w.logit_rows));
}

bool ModelRunner::forward(std::span<const std::int32_t> tokens, ContextCache& cache,
                          std::vector<float>& logits, const ForwardOptions& options) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n == 0) return true;
  check_tokens(tokens, cache);
  const std::uint64_t start = now_ns();
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t pos0 = cache.size();
  const std::int64_t rows = options.all_logits ? n : 1;
  ensure_workspace(n, rows);
  Workspace& w = *work_;
  w.tokens_now = n;
  const bool layerwise =
      layerwise_prefill() && std::max(options.prompt_tokens, n) >= hybrid_.prefill_token_threshold;
  cpu_expert_ns_ = waiting_ns_ = 0;

  device_->upload(Queue::Compute, w.ids->as<void>(), tokens.data(), tokens.size_bytes());
  device_->set_part(Part::Dense);
  device_->embed(*weights_.embedding, w.ids->as<const std::int32_t>(), n, f(w.x));
  if (layerwise) {
    start_staging(0);
    start_staging(1);
  }
  // Where the CPU runs the pass alone its operations are done when they return, and what a
  // stopped pass wrote past the cache's size is written over by the next. Recurrent layers
  // change their state in place: it is saved at the pass's start (the checkpoint that
  // rewind returns to, which the generator moves on to its prompt's last token anyway) and
  // put back when the pass stops.
  const bool stoppable = options.cancel != nullptr && !accelerator_;
  const bool recurrent = spec_.has_linear_layers();
  if (stoppable && recurrent && cache.checkpoint_ != pos0) checkpoint(cache);
  std::int64_t moe_index = 0;
  for (std::int64_t l = 0; l < spec_.num_layers; ++l) {
    if (stoppable && options.cancel->load()) {
      if (recurrent) device_->restore_recurrent_state(*cache.device_);
      return false;
    }
    const DeviceLayer& dl = weights_.layers[static_cast<std::size_t>(l)];
    device_->set_part(Part::Dense);
    device_->rms_norm(cf(w.x), h, cf(dl.attention_norm), n, h, spec_.rms_norm_eps, f(w.xn), h);
    device_->set_part(Part::Attention);
    if (dl.linear)
      linear_attention_block(l, n, pos0, cache);
    else
      attention_block(l, n, pos0, cache);
    device_->add_scaled(f(w.x), cf(w.branch), 1.0f, n * h);
    device_->set_part(Part::Dense);
    device_->rms_norm(cf(w.x), h, cf(dl.ffn_norm), n, h, spec_.rms_norm_eps, f(w.xn), h);
    if (dl.moe) {
      moe_layer(l, moe_index++, n, layerwise, l + 1 == spec_.num_layers);
    } else {
      feed_forward(dl.dense, cf(w.xn), n, f(w.branch));
      device_->add_scaled(f(w.x), cf(w.branch), 1.0f, n * h);
      finish_deferred(n);
    }
  }
  finish_deferred(n);
  cache.size_ = pos0 + n;

  device_->set_part(Part::Dense);
  device_->rms_norm(cf(w.x) + (n - rows) * h, h, cf(weights_.final_norm), rows, h,
                    spec_.rms_norm_eps, f(w.head_in), h);
  device_->matmul(cf(w.head_in), rows, *weights_.output, f(w.head_out), spec_.vocab_size);
  logits.resize(static_cast<std::size_t>(rows * spec_.vocab_size));
  device_->download(Queue::Compute, logits.data(), cf(w.head_out), logits.size() * sizeof(float));
  const std::uint64_t wait_start = now_ns();
  device_->record(Queue::Compute)->wait();
  waiting_ns_ += now_ns() - wait_start;
  record_metrics(n, now_ns() - start);
  return true;
}

void ModelRunner::attention_block(std::int64_t layer, std::int64_t n, std::int64_t pos0,
                                  ContextCache& cache) {
  Workspace& w = *work_;
  const DeviceAttention& a = weights_.layers[static_cast<std::size_t>(layer)].attention;
  backend::DeviceKvCache& kv_cache = *cache.device_;
  const double eps = spec_.rms_norm_eps;
  const std::int64_t nh = spec_.num_heads;
  if (!spec_.mla) {
    const std::int64_t hd = spec_.head_dim;
    const std::int64_t nkv = spec_.num_kv_heads;
    device_->matmul(cf(w.xn), n, *a.q, f(w.q), nh * hd);
    if (a.q_gate) device_->matmul(cf(w.xn), n, *a.q_gate, f(w.q_gate), nh * hd);
    device_->matmul(cf(w.xn), n, *a.k, f(w.k_buf), nkv * hd);
    device_->matmul(cf(w.xn), n, *a.v, f(w.v), nkv * hd);
    if (a.q_bias) {
      device_->add_bias(f(w.q), cf(a.q_bias), n, nh * hd);
      device_->add_bias(f(w.k_buf), cf(a.k_bias), n, nkv * hd);
      device_->add_bias(f(w.v), cf(a.v_bias), n, nkv * hd);
    }
    if (spec_.qk_norm) {
      device_->rms_norm(cf(w.q), hd, cf(a.q_norm), n * nh, hd, eps, f(w.q), hd);
      device_->rms_norm(cf(w.k_buf), hd, cf(a.k_norm), n * nkv, hd, eps, f(w.k_buf), hd);
    }
    device_->rope(*weights_.rope, f(w.q), n, nh * hd, nh, hd, pos0);
    device_->rope(*weights_.rope, f(w.k_buf), n, nkv * hd, nkv, hd, pos0);
    device_->attention(layer, cf(w.q), cf(w.k_buf), cf(w.v), n, pos0, kv_cache, f(w.attended),
                       cf(a.sinks));
    if (a.q_gate) device_->sigmoid_gate(f(w.attended), cf(w.q_gate), n, nh * hd, nh * hd);
  } else {
    const std::int64_t nope = spec_.qk_nope_head_dim;
    const std::int64_t rope = spec_.qk_rope_head_dim;
    const std::int64_t lora = spec_.kv_lora_rank;
    const std::int64_t qk = nope + rope;
    if (spec_.q_lora_rank > 0) {
      const std::int64_t ql = spec_.q_lora_rank;
      device_->matmul(cf(w.xn), n, *a.q_a, f(w.qa), ql);
      device_->rms_norm(cf(w.qa), ql, cf(a.q_a_norm), n, ql, kLatentNormEps, f(w.qa), ql);
      device_->matmul(cf(w.qa), n, *a.q_b, f(w.q), nh * qk);
    } else {
      device_->matmul(cf(w.xn), n, *a.q, f(w.q), nh * qk);
    }
    // Each kv row becomes [normalised latent | rotated key] in place.
    device_->matmul(cf(w.xn), n, *a.kv_a, f(w.kv), lora + rope);
    device_->rms_norm(cf(w.kv), lora + rope, cf(a.kv_a_norm), n, lora, kLatentNormEps, f(w.kv),
                      lora + rope);
    device_->rope(*weights_.rope, f(w.kv) + lora, n, lora + rope, 1, 0, pos0);
    device_->rope(*weights_.rope, f(w.q) + nope, n, nh * qk, nh, qk, pos0);
    device_->latent_attention(layer, cf(w.q), cf(w.kv), a.latent(), n, pos0, kv_cache,
                              f(w.attended));
  }
  device_->matmul(cf(w.attended), n, *a.o, f(w.branch), spec_.hidden_size);
  if (a.o_bias) device_->add_bias(f(w.branch), cf(a.o_bias), n, spec_.hidden_size);
}

void ModelRunner::linear_attention_block(std::int64_t layer, std::int64_t n, std::int64_t pos0,
                                         ContextCache& cache) {
  Workspace& w = *work_;
  const DeviceLinearAttention& a =
      weights_.layers[static_cast<std::size_t>(layer)].linear_attention;
  const std::int64_t value_width = spec_.linear_value_heads * spec_.linear_value_dim;
  device_->matmul(cf(w.xn), n, *a.in_qkvz, f(w.qkvz), spec_.linear_conv_channels() + value_width);
  device_->matmul(cf(w.xn), n, *a.in_ba, f(w.ba), 2 * spec_.linear_value_heads);
  device_->gated_delta_net(layer, cf(w.qkvz), cf(w.ba), n, pos0,
                           {cf(a.conv), cf(a.a_log), cf(a.dt_bias), cf(a.norm)}, *cache.device_,
                           f(w.attended));
  device_->matmul(cf(w.attended), n, *a.out, f(w.branch), spec_.hidden_size);
}

std::int64_t ModelRunner::rewind(ContextCache& cache, std::int64_t tokens) {
  tokens = std::clamp<std::int64_t>(tokens, 0, cache.size_);
  if (!spec_.has_linear_layers() || tokens == cache.size_) {
    cache.size_ = tokens;
    return tokens;
  }
  if (cache.checkpoint_ >= 0 && cache.checkpoint_ <= tokens) {
    device_->restore_recurrent_state(*cache.device_);
    cache.size_ = cache.checkpoint_;
  } else {
    cache.size_ = 0;  // the next pass starts from a fresh state
    cache.checkpoint_ = -1;
  }
  return cache.size_;
}

void ModelRunner::checkpoint(ContextCache& cache) {
  if (!spec_.has_linear_layers()) return;
  device_->save_recurrent_state(*cache.device_);
  cache.checkpoint_ = cache.size_;
}

void ModelRunner::feed_forward(const DeviceFeedForward& ffn, DevicePtr<const float> x,
                               std::int64_t n, DevicePtr<float> out) {
  Workspace& w = *work_;
  const std::int64_t inner = ffn.gate->rows();
  device_->matmul(x, n, *ffn.gate, f(w.gate), inner);
  device_->matmul(x, n, *ffn.up, f(w.up), inner);
  device_->silu_mul(f(w.gate), cf(w.up), n * inner);
  device_->matmul(cf(w.gate), n, *ffn.down, out, spec_.hidden_size);
}

void ModelRunner::record_metrics(std::int64_t n, std::uint64_t wall_ns) {
  Workspace& w = *work_;
  measure::Metrics& m = *metrics_;
  const std::int64_t experts = spec_.num_experts;
  const std::int64_t k = spec_.experts_per_token;
  step_hits_.assign(static_cast<std::size_t>(spec_.num_layers * std::max<std::int64_t>(1, experts)),
                    0);
  for (std::int64_t l : moe_layers_) {
    const std::int32_t* ids = w.layer_ids(l);
    for (std::int64_t i = 0; i < n * k; ++i) {
      m.add_hit(l, ids[i]);
      ++step_hits_[static_cast<std::size_t>(l * experts + ids[i])];
    }
  }
  m.add_tokens(static_cast<std::uint64_t>(n));
  m.add_forward_ns(wall_ns);
  const backend::DeviceTimes now = device_->times();
  const auto delta = [&](Part p) { return now.part_ns(p) - last_times_.part_ns(p); };
  const std::uint64_t attention = delta(Part::Attention), dense = delta(Part::Dense);
  m.add_attention_ns(attention);
  m.add_dense_ns(dense);
  m.add_cpu_expert_ns(cpu_expert_ns_);
  if (accelerator_) {
    m.add_gpu_expert_ns(delta(Part::Experts));
    m.add_bus_ns(delta(Part::Bus));
    m.add_copy_ns(now.copy_ns - last_times_.copy_ns);
    m.add_bus_bytes(now.bus_bytes - last_times_.bus_bytes);
    m.add_waiting_ns(waiting_ns_);
    const std::uint64_t busy = cpu_expert_ns_ + waiting_ns_;
    m.add_other_ns(wall_ns > busy ? wall_ns - busy : 0);
  } else {
    const std::uint64_t busy = attention + dense + cpu_expert_ns_;
    m.add_other_ns(wall_ns > busy ? wall_ns - busy : 0);
  }
  last_times_ = now;
  if (accelerator_) m.set_device_memory(device_->memory_used(), device_->memory_budget());
  if (dynamic_) {
    const schedule::DynamicPlacement::Step step =
        dynamic_->step(step_hits_, static_cast<std::uint64_t>(n));
    if (step.arrived > 0) {
      m.add_moves(static_cast<std::uint64_t>(step.arrived),
                  static_cast<std::uint64_t>(step.arrived) * residency_->expert_bytes());
    }
    if (step.arrived > 0 || step.started > 0) {
      for (std::int64_t l : moe_layers_)
        for (std::int64_t e = 0; e < experts; ++e)
          m.set_resident(l, e, residency_->on_device(l, e));
    }
  }
}

}  // namespace tandem::forward
