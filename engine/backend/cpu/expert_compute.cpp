#include "engine/backend/cpu/expert_compute.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "engine/measure/trace.h"
#include "kernels/cpu/gguf/matmul.h"

namespace tandem::backend {
namespace {

bool is_packed(const model::FeedForwardWeights& f) {
  return f.gate.packed != nullptr || !f.slices.empty();
}

// rows x width values `stride` apart += bias[0..width) (gpt-oss's biased experts).
void add_bias_rows(float* y, std::int64_t rows, std::int64_t stride, const float* bias,
                   std::int64_t width) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < width; ++c) y[r * stride + c] += bias[c];
}

}  // namespace

void ExpertCompute::run(const CpuThreads& threads,
                        const std::vector<const model::FeedForwardWeights*>& experts,
                        const float* x, std::span<const ExpertPair> pairs, float* out) {
  if (pairs.empty()) return;
  // Bucket the (token, weight) pairs per expert: O(pairs + experts).
  const auto n_experts = static_cast<std::int64_t>(experts.size());
  count_.assign(static_cast<std::size_t>(n_experts + 1), 0);
  for (const ExpertPair& p : pairs) ++count_[static_cast<std::size_t>(p.expert) + 1];
  for (std::int64_t e = 0; e < n_experts; ++e)
    count_[static_cast<std::size_t>(e + 1)] += count_[static_cast<std::size_t>(e)];
  slot_token_.resize(pairs.size());
  slot_weight_.resize(pairs.size());
  std::vector<std::int64_t> fill(count_.begin(), count_.end() - 1);
  for (const ExpertPair& p : pairs) {
    const std::int64_t s = fill[static_cast<std::size_t>(p.expert)]++;
    slot_token_[static_cast<std::size_t>(s)] = p.token;
    slot_weight_[static_cast<std::size_t>(s)] = p.weight;
  }
  active_.clear();
  const model::FeedForwardWeights* shape = nullptr;
  for (std::int64_t e = 0; e < n_experts; ++e) {
    const std::int64_t rows =
        count_[static_cast<std::size_t>(e + 1)] - count_[static_cast<std::size_t>(e)];
    if (rows == 0) continue;
    active_.push_back({e, count_[static_cast<std::size_t>(e)], rows});
    shape = experts[static_cast<std::size_t>(e)];
  }
  if (is_packed(*shape))
    packed(threads, experts, *shape, x, out);
  else if (kernels::gguf_matmul_supports(shape->gate.dtype) &&
           kernels::gguf_matmul_supports(shape->up.dtype) &&
           kernels::gguf_matmul_supports(shape->down.dtype))
    gguf(threads, experts, x, out);
  else
    unpacked(threads, experts, x, out);
}

// Experts in GGUF block formats: each expert's tokens gathered and quantised once (a decode
// step's one token once for all experts), then two parallel jobs over (expert x row block)
// tasks, gate and up, then down, as the packed path runs (one hand-off to the threads per
// job, not per product). The thread that finishes an expert's last gate/up task applies its
// GLU and quantises the result for down, so no thread waits between the jobs while one does
// every expert's.
void ExpertCompute::gguf(const CpuThreads& threads,
                         const std::vector<const model::FeedForwardWeights*>& experts,
                         const float* x, float* out) {
  const std::int64_t h = spec_.hidden_size;
  const kernels::CpuVariant variant = kernels::active_variant();
  const std::size_t n = active_.size();
  if (gguf_.size() < n) gguf_.resize(n);
  struct Task {
    std::size_t job;
    std::int64_t begin, end;
  };
  std::vector<Task> tasks;
  auto add_tasks = [&](std::size_t j, std::int64_t rows) {
    const std::int64_t per = kernels::gguf_rows_per_task(variant, active_[j].rows);
    for (std::int64_t b = 0; b < rows; b += 4 * per)
      tasks.push_back({j, b, std::min(rows, b + 4 * per)});
  };
  if (tasks_left_size_ < n) {
    tasks_left_ = std::make_unique<std::atomic<std::int64_t>[]>(n);
    tasks_left_size_ = n;
  }
  for (std::size_t j = 0; j < n; ++j) {
    const Active& a = active_[j];
    const model::FeedForwardWeights& w = *experts[static_cast<std::size_t>(a.expert)];
    GgufScratch& g = gguf_[j];
    g.gate.resize(static_cast<std::size_t>(a.rows * w.gate.rows));
    g.up.resize(g.gate.size());
    g.result.resize(static_cast<std::size_t>(a.rows * h));
    const std::size_t before = tasks.size();
    add_tasks(j, w.gate.rows);
    tasks_left_[j].store(static_cast<std::int64_t>(tasks.size() - before));
  }
  // Every expert has the first's formats, so one token's codes serve them all.
  const model::FeedForwardWeights& first = *experts[static_cast<std::size_t>(active_[0].expert)];
  const int gate_bias = kernels::gguf_code_bias(first.gate.dtype);
  const int up_bias = kernels::gguf_code_bias(first.up.dtype);
  const bool one_token = std::all_of(slot_token_.begin(), slot_token_.end(),
                                     [&](std::int64_t t) { return t == slot_token_.front(); });
  const auto quantise = [&](const float* rows, std::int64_t count, GgufScratch& g) {
    kernels::gguf_quantize_activations(rows, count, h, gate_bias, g.in, kernels::serial_for);
    if (up_bias != gate_bias)
      kernels::gguf_quantize_activations(rows, count, h, up_bias, g.in_up, kernels::serial_for);
  };
  if (one_token) {
    quantise(x + slot_token_.front() * h, 1, gguf_[0]);
  } else {
    // Each expert's tokens gathered (into its result rows, free until down) and quantised,
    // the experts shared among the threads: on one thread this was a prompt's serial part.
    // A few tokens' take less than a hand-off to the threads costs.
    const bool few = static_cast<std::int64_t>(slot_token_.size()) * h <= 32768;
    const kernels::ParallelFor& per_expert =
        few ? kernels::ParallelFor(kernels::serial_for) : threads.kernels_for();
    per_expert(static_cast<std::int64_t>(n), [&](std::int64_t b, std::int64_t e) {
      for (auto j = static_cast<std::size_t>(b); j < static_cast<std::size_t>(e); ++j) {
        const Active& a = active_[j];
        GgufScratch& g = gguf_[j];
        float* gathered = g.result.data();
        for (std::int64_t r = 0; r < a.rows; ++r) {
          std::copy_n(x + slot_token_[static_cast<std::size_t>(a.begin + r)] * h, h,
                      gathered + r * h);
        }
        quantise(gathered, a.rows, g);
      }
    });
  }
  const auto inputs_of = [&](std::size_t j) -> const GgufScratch& {
    return gguf_[one_token ? 0 : j];
  };
  threads.kernels_for()(static_cast<std::int64_t>(tasks.size()), [&](std::int64_t b,
                                                                     std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      const Task& task = tasks[static_cast<std::size_t>(t)];
      const Active& a = active_[task.job];
      const model::FeedForwardWeights& w = *experts[static_cast<std::size_t>(a.expert)];
      GgufScratch& g = gguf_[task.job];
      const GgufScratch& in = inputs_of(task.job);
      const kernels::GgufQuantizedActivations& up_in = up_bias == gate_bias ? in.in : in.in_up;
      // Each product fetches the first blocks of the one after it: up's, then the next
      // task's gate.
      kernels::GgufRowsAhead after_up;
      if (t + 1 < e) {
        const Task& next = tasks[static_cast<std::size_t>(t + 1)];
        after_up = {&experts[static_cast<std::size_t>(active_[next.job].expert)]->gate, next.begin};
      }
      kernels::gguf_matmul_rows(in.in, a.rows, w.gate, task.begin, task.end, g.gate.data(),
                                w.gate.rows, variant, {&w.up, task.begin});
      kernels::gguf_matmul_rows(up_in, a.rows, w.up, task.begin, task.end, g.up.data(), w.up.rows,
                                variant, after_up);
      // Acquire and release: the last task sees every other task's rows of gate and up.
      if (tasks_left_[task.job].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
      const std::int64_t inner = w.gate.rows;
      if (!w.gate_bias.empty()) {
        add_bias_rows(g.gate.data(), a.rows, inner, w.gate_bias.data(), inner);
        add_bias_rows(g.up.data(), a.rows, inner, w.up_bias.data(), inner);
      }
      kernels::glu(w.glu, g.gate.data(), g.up.data(), static_cast<std::int64_t>(g.gate.size()));
      kernels::gguf_quantize_activations(g.gate.data(), a.rows, inner,
                                         kernels::gguf_code_bias(w.down.dtype), g.hidden,
                                         kernels::serial_for);
    }
  });
  tasks.clear();
  for (std::size_t j = 0; j < n; ++j) add_tasks(j, h);
  threads.kernels_for()(static_cast<std::int64_t>(tasks.size()), [&](std::int64_t b,
                                                                     std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      const Task& task = tasks[static_cast<std::size_t>(t)];
      const Active& a = active_[task.job];
      const model::FeedForwardWeights& w = *experts[static_cast<std::size_t>(a.expert)];
      GgufScratch& g = gguf_[task.job];
      kernels::GgufRowsAhead after;
      if (t + 1 < e) {
        const Task& next = tasks[static_cast<std::size_t>(t + 1)];
        after = {&experts[static_cast<std::size_t>(active_[next.job].expert)]->down, next.begin};
      }
      kernels::gguf_matmul_rows(g.hidden, a.rows, w.down, task.begin, task.end, g.result.data(), h,
                                variant, after);
    }
  });
  for (std::size_t j = 0; j < n; ++j) {
    const Active& a = active_[j];
    const model::FeedForwardWeights& w = *experts[static_cast<std::size_t>(a.expert)];
    GgufScratch& g = gguf_[j];
    if (!w.down_bias.empty()) add_bias_rows(g.result.data(), a.rows, h, w.down_bias.data(), h);
    for (std::int64_t r = 0; r < a.rows; ++r) {
      kernels::axpy_f32(slot_weight_[static_cast<std::size_t>(a.begin + r)],
                        g.result.data() + r * h,
                        out + slot_token_[static_cast<std::size_t>(a.begin + r)] * h, h);
    }
  }
}

// The weights as stored (the fp32 reference path): one expert after another, each product
// on all threads.
void ExpertCompute::unpacked(const CpuThreads& threads,
                             const std::vector<const model::FeedForwardWeights*>& experts,
                             const float* x, float* out) {
  const std::int64_t h = spec_.hidden_size;
  std::vector<float> gathered, gate, up, result;
  for (const Active& a : active_) {
    const model::FeedForwardWeights& w = *experts[static_cast<std::size_t>(a.expert)];
    const std::int64_t inner = w.gate.rows;
    gathered.resize(static_cast<std::size_t>(a.rows * h));
    gate.resize(static_cast<std::size_t>(a.rows * inner));
    up.resize(gate.size());
    result.resize(static_cast<std::size_t>(a.rows * h));
    for (std::int64_t r = 0; r < a.rows; ++r) {
      std::copy_n(x + slot_token_[static_cast<std::size_t>(a.begin + r)] * h, h,
                  gathered.data() + r * h);
    }
    kernels::matmul_xwt(gathered.data(), a.rows, w.gate, gate.data(), inner, threads.kernels_for());
    kernels::matmul_xwt(gathered.data(), a.rows, w.up, up.data(), inner, threads.kernels_for());
    if (!w.gate_bias.empty()) {
      add_bias_rows(gate.data(), a.rows, inner, w.gate_bias.data(), inner);
      add_bias_rows(up.data(), a.rows, inner, w.up_bias.data(), inner);
    }
    kernels::glu(w.glu, gate.data(), up.data(), static_cast<std::int64_t>(gate.size()));
    kernels::matmul_xwt(gate.data(), a.rows, w.down, result.data(), h, threads.kernels_for());
    if (!w.down_bias.empty()) add_bias_rows(result.data(), a.rows, h, w.down_bias.data(), h);
    for (std::int64_t r = 0; r < a.rows; ++r) {
      kernels::axpy_f32(slot_weight_[static_cast<std::size_t>(a.begin + r)], result.data() + r * h,
                        out + slot_token_[static_cast<std::size_t>(a.begin + r)] * h, h);
    }
  }
}

// The experts with packed weights, as two parallel jobs over (expert x row block) tasks:
// gate and up with SiLU(gate)*up fused, then down; the weighted sum is added per token.
// Two jobs instead of three per active expert keep a decode step's synchronisation low.
// Experts split into slices (one per pool) run both jobs on every pool at once, each pool
// on its own slice; the pools' partial down outputs are summed in pool order, so the result
// does not depend on timing. Unsplit experts are one slice run on all threads.
void ExpertCompute::packed(const CpuThreads& threads,
                           const std::vector<const model::FeedForwardWeights*>& experts,
                           const model::FeedForwardWeights& shape_of, const float* x, float* out) {
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t inner = spec_.moe_intermediate_size;
  const auto slices = static_cast<std::int64_t>(std::max<std::size_t>(1, shape_of.slices.size()));
  const auto slice_of = [inner](const model::FeedForwardWeights& f, std::int64_t s) {
    return f.slices.empty() ? model::ExpertSlice{0,           inner,         f.gate.packed,
                                                 f.up.packed, f.down.packed, f.gate.packed_variant}
                            : f.slices[static_cast<std::size_t>(s)];
  };
  const auto expert = [&](std::int64_t e) -> const model::FeedForwardWeights& {
    return *experts[static_cast<std::size_t>(e)];
  };
  const auto actives = static_cast<std::int64_t>(active_.size());
  const auto slots = static_cast<std::int64_t>(slot_token_.size());
  // All slices of all experts have the shapes of the first.
  const model::ExpertSlice shape = slice_of(shape_of, 0);
  const std::int64_t width = shape.width;
  inputs_.resize(active_.size());
  hidden_.resize(static_cast<std::size_t>(slices * actives));
  // Gathering the experts' packed rows is spread over the threads when there are enough of
  // them (a decode step's few rows are quicker alone).
  const auto each_active = [&](std::int64_t n, const std::function<void(std::int64_t)>& body) {
    if (slots < 32) {
      for (std::int64_t i = 0; i < n; ++i) body(i);
    } else {
      threads.parallel_for(n, 1, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) body(i);
      });
    }
  };
  // A decode step's slots all hold its one token: it is quantised once, for every expert.
  const bool one_token =
      actives > 0 && std::all_of(slot_token_.begin(), slot_token_.end(),
                                 [&](std::int64_t t) { return t == slot_token_.front(); });
  const auto input_of = [&](std::int64_t a) -> const kernels::PackedActivations& {
    return inputs_[static_cast<std::size_t>(one_token ? 0 : a)];
  };
  // The timeline (`tandem bench --trace`) names each step of the experts apart (emplacing
  // the next ends the one before).
  std::optional<trace::Operation> step(std::in_place, "experts: pack");
  const kernels::CpuVariant variant = shape.variant;
  if (one_token) {
    kernels::pack_activations_for(*shape.gate, x + slot_token_.front() * h, 1, inputs_[0]);
  } else {
    // Each token packed once (it goes to several experts), then each expert's rows gathered:
    // quantised for the experts with few tokens, in BF16 for those whose products are
    // widened (AMX), each form only where an expert takes it.
    const std::int64_t tokens = *std::max_element(slot_token_.begin(), slot_token_.end()) + 1;
    bool narrow = false, wide = false;
    for (const Active& act : active_)
      (kernels::widened_product(*shape.gate, act.rows, variant) ? wide : narrow) = true;
    const kernels::ParallelFor& parallel = threads.kernels_for();
    if (narrow) kernels::pack_activations_for(*shape.gate, x, tokens, all_tokens_, parallel);
    if (wide)
      kernels::pack_widened_activations(*shape.gate, x, tokens, all_tokens_wide_, &parallel);
    each_active(actives, [&](std::int64_t a) {
      const Active& act = active_[static_cast<std::size_t>(a)];
      const bool widened = kernels::widened_product(*shape.gate, act.rows, variant);
      kernels::gather_activations(widened ? all_tokens_wide_ : all_tokens_,
                                  slot_token_.data() + act.begin, act.rows,
                                  inputs_[static_cast<std::size_t>(a)]);
    });
  }
  // Row blocks per task: long runs of one matrix let the prefetchers stream it (a decode
  // step reads each expert once), yet at least about eight tasks per thread keep the threads
  // evenly loaded. Even, so the kernels' two- and four-block tiles apply. A prompt's experts
  // take unequal numbers of tokens, so its tasks stay at 8 blocks at most; a decode step's
  // are all one row, and take runs of up to 64 (2 threads, Zen 5, the Qwen3-30B-A3B-shaped
  // synthetic in INT4: the experts 3.38-3.44 ms a token with 8 at most, 3.11-3.28 with 64).
  const std::int64_t thread_count = threads.count();
  const std::int64_t most_blocks = one_token ? 64 : 8;
  const auto blocks_per_task = [&](std::int64_t blocks) {
    const std::int64_t fair = actives * blocks / (8 * thread_count);
    return std::clamp<std::int64_t>(fair / 2 * 2, 2, most_blocks);
  };
  const std::int64_t blocks_gate = blocks_per_task(shape.gate->blocks);
  // gate_ and up_: per slice, [slots x width].
  const std::int64_t inner_tasks = (shape.gate->blocks + blocks_gate - 1) / blocks_gate;
  gate_.resize(static_cast<std::size_t>(slices * slots * width));
  up_.resize(static_cast<std::size_t>(slices * slots * width));
  // The thread that finishes an expert's last gate/up task quantises its hidden activations
  // for the down products, so no thread waits between the two jobs while one does it all.
  const auto pairs = static_cast<std::size_t>(slices * actives);
  if (tasks_left_size_ < pairs) {
    tasks_left_ = std::make_unique<std::atomic<std::int64_t>[]>(pairs);
    tasks_left_size_ = pairs;
  }
  for (std::size_t i = 0; i < pairs; ++i) tasks_left_[i].store(inner_tasks);
  step.emplace("experts: gate and up");
  threads.for_each_slice(
      static_cast<int>(slices), actives * inner_tasks,
      [&](int s, std::int64_t t0, std::int64_t t1) {
        for (std::int64_t t = t0; t < t1; ++t) {
          const Active& a = active_[static_cast<std::size_t>(t / inner_tasks)];
          const model::ExpertSlice f = slice_of(expert(a.expert), s);
          const std::int64_t b0 = (t % inner_tasks) * blocks_gate;
          const std::int64_t b1 = std::min(f.gate->blocks, b0 + blocks_gate);
          float* g = gate_.data() + (s * slots + a.begin) * width;
          float* u = up_.data() + (s * slots + a.begin) * width;
          const kernels::PackedActivations& in = input_of(t / inner_tasks);
          kernels::packed_matmul(*f.gate, in, g, width, b0, b1, variant);
          kernels::packed_matmul(*f.up, in, u, width, b0, b1, variant);
          const std::int64_t c0 = b0 * kernels::kPackRows;
          const std::int64_t c1 = std::min(width, b1 * kernels::kPackRows);
          const model::FeedForwardWeights& e = expert(a.expert);
          if (!e.gate_bias.empty()) {
            add_bias_rows(g + c0, a.rows, width, e.gate_bias.data() + f.begin + c0, c1 - c0);
            add_bias_rows(u + c0, a.rows, width, e.up_bias.data() + f.begin + c0, c1 - c0);
          }
          for (std::int64_t r = 0; r < a.rows; ++r)
            kernels::glu(e.glu, g + r * width + c0, u + r * width + c0, c1 - c0);
          // Acquire and release: the last task sees every other task's rows of g.
          const std::size_t pair = static_cast<std::size_t>(s * actives + t / inner_tasks);
          if (tasks_left_[pair].fetch_sub(1, std::memory_order_acq_rel) == 1)
            kernels::pack_activations_for(*f.down, g, a.rows, hidden_[pair], variant);
        }
      });
  // out_: per slice, the partial down outputs [slots x h].
  const std::int64_t blocks_down = blocks_per_task(shape.down->blocks);
  const std::int64_t hidden_tasks = (shape.down->blocks + blocks_down - 1) / blocks_down;
  out_.resize(static_cast<std::size_t>(slices * slots * h));
  step.emplace("experts: down");
  threads.for_each_slice(static_cast<int>(slices), actives * hidden_tasks,
                         [&](int s, std::int64_t t0, std::int64_t t1) {
                           for (std::int64_t t = t0; t < t1; ++t) {
                             const std::int64_t a = t / hidden_tasks;
                             const Active& act = active_[static_cast<std::size_t>(a)];
                             const model::ExpertSlice f = slice_of(expert(act.expert), s);
                             const std::int64_t b0 = (t % hidden_tasks) * blocks_down;
                             const std::int64_t b1 = std::min(f.down->blocks, b0 + blocks_down);
                             kernels::packed_matmul(
                                 *f.down, hidden_[static_cast<std::size_t>(s * actives + a)],
                                 out_.data() + (s * slots + act.begin) * h, h, b0, b1, variant);
                           }
                         });
  step.emplace("experts: weighted sums");
  if (slices > 1) {
    const auto sum_partials = [&](std::int64_t s0, std::int64_t s1) {
      for (std::int64_t s = s0; s < s1; ++s) {
        float* sum = out_.data() + s * h;
        for (std::int64_t p = 1; p < slices; ++p) {
          const float* part = out_.data() + (p * slots + s) * h;
          for (std::int64_t d = 0; d < h; ++d) sum[d] += part[d];
        }
      }
    };
    // A decode step's few slots add up faster here than the pools wake up for them.
    constexpr std::int64_t kParallelSumSlots = 64;
    if (slots < kParallelSumSlots)
      sum_partials(0, slots);
    else
      threads.parallel_for(slots, 0, sum_partials);
  }
  // The down products' biases, once per slot after the pools' partials are summed.
  for (const Active& a : active_) {
    const model::FeedForwardWeights& e = expert(a.expert);
    if (!e.down_bias.empty())
      add_bias_rows(out_.data() + a.begin * h, a.rows, h, e.down_bias.data(), h);
  }
  // Each token's weighted sum, slot by slot in slot order. A prompt's tokens are shared among
  // the threads, each token's slots listed in slot order first, so that every value adds its
  // slots in the same order whatever the timing and each slot's row is read whole. (Split by
  // 256 columns instead, every task read 1 KiB of each of the prompt's slots 8 KiB apart:
  // 9.6-10.3 ms a layer at 2048 tokens of the Qwen3-30B-A3B-shaped synthetic on two threads of
  // a Xeon, by token 5.6-6.6; docs/benchmarks.md, "The router's product and the experts' sums
  // split by token".)
  constexpr std::int64_t kParallelAddSlots = 64;
  if (slots < kParallelAddSlots) {
    for (std::int64_t s = 0; s < slots; ++s) {
      kernels::axpy_f32(slot_weight_[static_cast<std::size_t>(s)], out_.data() + s * h,
                        out + slot_token_[static_cast<std::size_t>(s)] * h, h);
    }
    return;
  }
  const std::int64_t tokens = *std::max_element(slot_token_.begin(), slot_token_.end()) + 1;
  token_slot_begin_.assign(static_cast<std::size_t>(tokens + 1), 0);
  for (const std::int64_t t : slot_token_) ++token_slot_begin_[static_cast<std::size_t>(t) + 1];
  for (std::int64_t t = 0; t < tokens; ++t)
    token_slot_begin_[static_cast<std::size_t>(t + 1)] +=
        token_slot_begin_[static_cast<std::size_t>(t)];
  token_slots_.resize(static_cast<std::size_t>(slots));
  std::vector<std::int64_t> fill(token_slot_begin_.begin(), token_slot_begin_.end() - 1);
  for (std::int64_t s = 0; s < slots; ++s)
    token_slots_[static_cast<std::size_t>(
        fill[static_cast<std::size_t>(slot_token_[static_cast<std::size_t>(s)])]++)] = s;
  threads.parallel_for(tokens, 0, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t i = token_slot_begin_[static_cast<std::size_t>(t)];
           i < token_slot_begin_[static_cast<std::size_t>(t + 1)]; ++i) {
        const std::int64_t s = token_slots_[static_cast<std::size_t>(i)];
        kernels::axpy_f32(slot_weight_[static_cast<std::size_t>(s)], out_.data() + s * h,
                          out + t * h, h);
      }
    }
  });
}

}  // namespace tandem::backend
