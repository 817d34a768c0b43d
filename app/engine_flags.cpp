#include "app/engine_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/hw/topology.h"
#include "engine/plan/run_profile.h"
#include "engine/schedule/routing_stats.h"

namespace tandem::app {
namespace {

// A validator whose message is a whole sentence.
CLI::Validator sentence(std::function<bool(const std::string&)> ok, std::string message) {
  return CLI::Validator(
      [ok = std::move(ok), message = std::move(message)](std::string& value) {
        return ok(value) ? std::string() : message + " (not \"" + value + "\")";
      },
      "");
}

bool is_count(const std::string& s) {
  if (s.empty() || s.size() > 12) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_positive_number(const std::string& s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    return used == s.size() && v > 0 && std::isfinite(v);
  } catch (const std::exception&) {
    return false;
  }
}

bool is_size(const std::string& s) {
  std::uint64_t bytes = 0;
  return backend::parse_byte_size(s, bytes);
}

}  // namespace

CLI::Option* add_amx_widen_option(CLI::App* command, std::string& value) {
  return command
      ->add_option("--amx-widen-from", value,
                   "On AMX: the tokens from which a product of INT8 or INT4 weights takes its "
                   "activations in BF16 and its weights widened to BF16 tiles (more exact, and "
                   "faster for enough tokens), or never; auto measures where that starts to pay "
                   "on this CPU for the model's shapes the first time they load, and keeps it in "
                   "~/.cache/tandem/amx-widening.json")
      ->capture_default_str()
      ->check(sentence(
          [](const std::string& v) {
            std::optional<std::int64_t> n;
            return forward::parse_widen_from(v, n);
          },
          "give auto, never or a number of tokens from 1 to 1048576"));
}

void add_engine_flags(CLI::App* c, EngineFlags& f) {
  f.accelerator_option =
      c->add_option("--accelerator", f.accelerator,
                    "Where attention, dense layers and the hot experts run: auto (a GPU Tandem "
                    "can use, else the CPU alone), cuda, emulated (a GPU emulated on the CPU, to "
                    "try and measure the hybrid engine) or none")
          ->capture_default_str()
          ->check(sentence(
              [](const std::string& v) {
                backend::AcceleratorChoice c;
                return backend::parse_accelerator_choice(v, c);
              },
              "give auto, cuda, emulated or none"));
  f.num_gpu_experts_option =
      c->add_option("--num-gpu-experts", f.num_gpu_experts,
                    "Routed experts per MoE layer on the accelerator (default: as many as fit)")
          ->check(sentence(is_count, "give a count of experts per layer, 0 or more"));
  f.max_deferred_option =
      c->add_option("--max-deferred-experts-per-token", f.max_deferred,
                    "Each token's lowest-weighted CPU experts, up to this many, are added one "
                    "layer later, so the CPU works while the accelerator runs the next attention")
          ->capture_default_str()
          ->check(sentence(is_count, "give a count of experts per token, 0 or more"));
  f.threshold_option =
      c->add_option("--gpu-prefill-token-threshold", f.prefill_threshold,
                    "Prompts of at least this many tokens run each MoE layer wholly on the "
                    "accelerator, uploading its other experts while the layer before computes "
                    "(0: never)")
          ->capture_default_str()
          ->check(sentence(is_count, "give a number of prompt tokens, or 0 to turn it off"));
  f.strategy_option =
      c->add_option("--expert-placement-strategy", f.strategy,
                    "Which experts go to the accelerator: uniform, frequency (needs "
                    "--expert-stats), front-loading or random")
          ->capture_default_str()
          ->check(sentence(
              [](const std::string& v) {
                schedule::PlacementStrategy s;
                return schedule::parse_strategy(v, s);
              },
              "give " + schedule::strategy_names()));
  f.dynamic_option =
      c->add_flag("--enable-dynamic-expert-update", f.dynamic_update,
                  "Move experts that turn hot onto the accelerator as the model runs");
  f.budget_option =
      c->add_option("--dynamic-update-budget", f.dynamic_budget,
                    "Bytes the dynamic update may move per step, e.g. 64M")
          ->capture_default_str()
          ->check(sentence(is_size, "give a size in bytes per step, such as 64M or 1G"));
  f.stats_option = c->add_option("--expert-stats", f.expert_stats,
                                 "Routing statistics (from --record-expert-stats) that the "
                                 "frequency placement places by")
                       ->check(CLI::ExistingFile);
  c->add_option("--record-expert-stats", f.record_expert_stats,
                "Add the routing of this run to FILE (created when missing), for the frequency "
                "placement");
  f.kt_method_option =
      c->add_option("--kt-method", f.kt_method,
                    "The experts' CPU format as the seeds name it (AMXINT8, AVX512INT4, ...; "
                    "INT4DOWN8 is Tandem's INT4 with INT8 downs, INT8ROTATED its rotated INT8)")
          ->check(sentence(
              [](const std::string& v) { return !plan::cpu_format_of_method(v).empty(); },
              "give AMX, AVX512 or AVX2 followed by INT8, INT8ROTATED, INT4, INT4DOWN8, BF16 or "
              "MXFP4, such as AMXINT8"));
  f.kv_cache_option =
      c->add_option("--kv-cache", f.kv_cache,
                    "How the CPU keeps keys and values where it runs attention: bf16 (half the "
                    "memory, faster at long contexts), int8 (8 bits, a scale per 32 of a key and "
                    "per row of a value: 0.54 of "
                    "bf16's memory, a little less exact; with AVX-512 VNNI or AVX2, faster again "
                    "at long contexts) or f32 (closest to an fp32 reference)")
          ->capture_default_str()
          ->check(sentence(
              [](const std::string& v) {
                backend::KvCacheFormat f;
                return backend::parse_kv_cache_format(v, f);
              },
              "give bf16, int8 or f32"));
  f.prefill_chunk_option =
      c->add_option("--prefill-chunk,--ubatch-size", f.prefill_chunk,
                    "Prompt tokens per forward pass (as llama.cpp's --ubatch-size; default: 2048 "
                    "where the CPU runs a model with routed experts alone, each expert then "
                    "computing more tokens at once, else 512)")
          ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  f.amx_widen_option = add_amx_widen_option(c, f.amx_widen_from);
  c->add_option("--profile", f.profile,
                "Run with a profile saved by tandem recommend --save (flags given here win)")
      ->check(CLI::ExistingFile);
  f.gpu_options[0] = c->add_option("--gpu", f.gpu,
                                   "Which NVIDIA GPU to compute on, numbered from 0 as `tandem "
                                   "detect` lists them (default: the first usable one)")
                         ->check(sentence([](const std::string& v) { return is_count(v); },
                                          "give a GPU's number, 0 or more"));
  f.gpu_options[1] =
      c->add_option("--gpu-memory", f.gpu_memory,
                    "GPU memory Tandem may use, e.g. 20G (default: what is free at start, less "
                    "1 GiB for the desktop and the kernels' scratch)")
          ->check(sentence(is_size, "give a size such as 512M or 20G"));
  f.emulated_options[0] = c->add_option("--emulated-memory", f.emulated_memory,
                                        "The emulated accelerator's memory, e.g. 512M or 8G")
                              ->capture_default_str()
                              ->check(sentence(is_size, "give a size such as 512M or 8G"));
  f.emulated_options[1] =
      c->add_option("--emulated-bus-gbps", f.emulated_bus_gbps,
                    "The emulated accelerator's bus speed in GB/s (PCIe 4.0 x16: about 25)")
          ->capture_default_str()
          ->check(sentence([](const std::string& v) { return is_positive_number(v); },
                           "give a speed in GB/s above 0"));
  f.emulated_options[2] =
      c->add_option("--emulated-bus-latency-us", f.emulated_latency_us,
                    "The emulated bus's latency per transfer in microseconds")
          ->capture_default_str()
          ->check(sentence([](const std::string& v) { return v == "0" || is_positive_number(v); },
                           "give microseconds, 0 or more"));
  f.emulated_options[3] =
      c->add_option("--emulated-threads", f.emulated_threads,
                    "Threads the emulated accelerator computes on")
          ->capture_default_str()
          ->check(sentence([](const std::string& v) { return is_count(v) && v != "0"; },
                           "give a count of threads, 1 or more"));
}

bool apply_int4_group(int group, model::LoadOptions& load, std::string& error) {
  if (group <= 0) return true;
  if (!model::has_int4(load.cpu_format)) {
    error =
        "--int4-group sets the group of INT4 weights packed at load; use it with --cpu-format "
        "int4 or int4-down8 (a converted folder keeps the group it was converted with).";
    return false;
  }
  load.int4_group = group;
  return true;
}

bool resolve_engine_flags(const EngineFlags& f, bool threads_given, bool pools_given,
                          forward::RunSettings& s, std::string& error) {
  try {
    if (!f.profile.empty()) {
      forward::RunSettings from_profile = s;
      forward::apply_profile(plan::read_run_profile(f.profile), from_profile);
      // The command's own flags win over the profile's threads, pools, CPU format and
      // context (the format and the context were taken from the profile without a word).
      if (threads_given) from_profile.threads = s.threads;
      if (pools_given) from_profile.load.pools = s.load.pools;
      if (s.load.cpu_format_asked) {
        from_profile.load.cpu_format = s.load.cpu_format;
        from_profile.load.cpu_format_asked = true;
      }
      if (s.context > 0) from_profile.context = s.context;
      s = from_profile;
    }
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
  return apply_engine_flags(f, /*given_only=*/!f.profile.empty(), s, error);
}

bool apply_engine_flags(const EngineFlags& f, bool given_only, forward::RunSettings& s,
                        std::string& error) {
  const auto given = [](const CLI::Option* o) { return o != nullptr && o->count() > 0; };
  if (given(f.accelerator_option) || !given_only)
    backend::parse_accelerator_choice(f.accelerator, s.accelerator.choice);
  if (given(f.kt_method_option)) {
    model::CpuFormat format = model::CpuFormat::Native;
    model::parse_cpu_format(plan::cpu_format_of_method(f.kt_method), format);
    if (s.load.cpu_format_asked && s.load.cpu_format != format) {
      error = "--kt-method " + f.kt_method + " names the " +
              std::string(model::cpu_format_name(format)) + " format and --cpu-format the " +
              std::string(model::cpu_format_name(s.load.cpu_format)) + " one; give one of them.";
      return false;
    }
    s.load.cpu_format = format;
    s.load.cpu_format_asked = true;
  }
  if (given(f.kv_cache_option) || !given_only)
    backend::parse_kv_cache_format(f.kv_cache, s.kv_cache);
  if (given(f.kv_cache_option)) s.kv_cache_asked = true;
  schedule::HybridOptions& h = s.hybrid;
  if (given(f.num_gpu_experts_option)) h.gpu_experts_per_layer = f.num_gpu_experts;
  if (given(f.max_deferred_option)) h.max_deferred_per_token = f.max_deferred;
  if (given(f.threshold_option)) h.prefill_token_threshold = f.prefill_threshold;
  if (given(f.strategy_option)) schedule::parse_strategy(f.strategy, h.strategy);
  if (given(f.dynamic_option)) h.dynamic_update = f.dynamic_update;
  if (given(f.budget_option) || !given_only)
    backend::parse_byte_size(f.dynamic_budget, h.move_bytes_per_step);
  if (given(f.stats_option)) s.expert_stats = f.expert_stats;
  if (given(f.prefill_chunk_option)) h.chunk_tokens = f.prefill_chunk;
  if (given(f.amx_widen_option) || !given_only)
    forward::parse_widen_from(f.amx_widen_from, s.amx_widen_from);
  if (!f.record_expert_stats.empty()) s.record_expert_stats = f.record_expert_stats;

  const bool emulated = s.accelerator.choice == backend::AcceleratorChoice::Emulated;
  for (const CLI::Option* o : f.emulated_options) {
    if (given(o) && !emulated) {
      error = o->get_name() +
              " sets up the emulated accelerator; add --accelerator emulated to use it.";
      return false;
    }
  }
  backend::EmulatedOptions& e = s.accelerator.emulated;
  if (given(f.emulated_options[0]) || !given_only)
    backend::parse_byte_size(f.emulated_memory, e.memory_bytes);
  if (given(f.emulated_options[1]) || !given_only) e.bus_bytes_per_s = f.emulated_bus_gbps * 1e9;
  if (given(f.emulated_options[2]) || !given_only) e.bus_latency_s = f.emulated_latency_us * 1e-6;
  if (given(f.emulated_options[3]) || !given_only) e.threads = f.emulated_threads;

  const bool gpu_possible = s.accelerator.choice == backend::AcceleratorChoice::Auto ||
                            s.accelerator.choice == backend::AcceleratorChoice::Cuda;
  for (const CLI::Option* o : f.gpu_options) {
    if (given(o) && !gpu_possible) {
      error = o->get_name() + " chooses how an NVIDIA GPU is used, but --accelerator " +
              std::string(backend::accelerator_choice_name(s.accelerator.choice)) +
              " uses none; leave one of them out.";
      return false;
    }
  }
  if (given(f.gpu_options[0])) s.accelerator.gpu.gpu = f.gpu;
  if (given(f.gpu_options[1]))
    backend::parse_byte_size(f.gpu_memory, s.accelerator.gpu.memory_bytes);

  if (s.accelerator.choice == backend::AcceleratorChoice::None) {
    for (const CLI::Option* o : {f.num_gpu_experts_option, f.max_deferred_option,
                                 f.threshold_option, f.strategy_option, f.dynamic_option}) {
      if (given(o)) {
        error = o->get_name() +
                " places work on an accelerator, but --accelerator none runs everything on the "
                "CPU; leave one of them out.";
        return false;
      }
    }
  }
  if (h.strategy == schedule::PlacementStrategy::Frequency && s.expert_stats.empty()) {
    error =
        "--expert-placement-strategy frequency places the experts by recorded routing: give "
        "the statistics with --expert-stats FILE (record them with --record-expert-stats "
        "FILE), or choose another strategy.";
    return false;
  }
  return true;
}

int command_threads(int asked) {
  const hw::Topology& topology = hw::probe_topology();
  const int cores = std::max(1, topology.physical_cores);
  if (asked <= 0) return cores;
  if (topology.hardware_threads > 0 && asked > topology.hardware_threads) {
    std::fprintf(stderr,
                 "tandem: %d threads on a CPU with %d hardware threads take turns, which runs "
                 "slower; -t %d (one per physical core) is what Tandem recommends.\n",
                 asked, topology.hardware_threads, cores);
  }
  return asked;
}

std::optional<forward::BuiltRunner> build_runner(const model::LoadedModel& model,
                                                 backend::NumaPools& pool,
                                                 const forward::RunSettings& settings,
                                                 std::int64_t context_tokens, int& status) {
  try {
    return forward::make_runner(model, pool, settings, context_tokens);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    status = 2;
  } catch (const backend::DeviceOutOfMemory& e) {
    // What was asked of the accelerator does not fit in it: the settings must change.
    std::fprintf(stderr, "tandem: %s\n", e.what());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    status = 1;
  }
  return std::nullopt;
}

bool check_expert_stats_target(const EngineFlags& f, const model::ModelSpec& spec,
                               std::string& error) {
  namespace fs = std::filesystem;
  if (f.record_expert_stats.empty()) return true;
  if (spec.num_experts == 0) {
    error = "--record-expert-stats: this model has no experts to record.";
    return false;
  }
  const fs::path path(f.record_expert_stats);
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(folder)) {
    error = "--record-expert-stats: the folder " + folder.string() +
            " does not exist; create it first.";
    return false;
  }
  if (!fs::exists(path)) return true;
  try {
    const std::string why = schedule::read_routing_statistics(path.string()).mismatch(spec);
    if (!why.empty()) {
      error = "--record-expert-stats: " + path.string() + " holds another model's statistics (" +
              why + "); record into another file.";
      return false;
    }
  } catch (const std::exception& e) {
    error = std::string("--record-expert-stats: ") + e.what();
    return false;
  }
  return true;
}

bool record_expert_stats(const EngineFlags& f, const forward::ModelRunner& runner,
                         std::string& error) {
  if (f.record_expert_stats.empty()) return true;
  const measure::MetricsSnapshot snap = runner.metrics()->snapshot();
  try {
    schedule::record_routing_statistics(f.record_expert_stats, runner.spec(), snap.hits,
                                        snap.tokens);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
  return true;
}

}  // namespace tandem::app
