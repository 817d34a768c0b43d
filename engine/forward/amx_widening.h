// Where a model's FFN products start to be widened on AMX (kernels/cpu/packed/matmul.h):
// measured on this machine for the model's shapes, or as the user gives it, and set for the
// kernels before the model runs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/loaded_model.h"
#include "kernels/cpu/packed/widen_crossover.h"

namespace tandem::backend {
class NumaPools;
}

namespace tandem::forward {

struct WideningChoice {
  kernels::PackedFormat format = kernels::PackedFormat::Int8;
  std::int64_t from = 0;    // tokens; 0: never
  bool int8_downs = false;  // INT4 with INT8 downs (int4-down8), which take the same count
  bool measured = false;    // false: given (--amx-widen-from)
  bool cached = false;      // measured at an earlier start, and kept in `cache_path`
  std::string cache_path;
  // The measurement (empty when given): at each token count, widened against quantised.
  std::vector<kernels::WidenSample> samples;
};

// $XDG_CACHE_HOME/tandem/amx-widening.json, or under ~/.cache; empty without either.
std::string default_widening_cache();

// The FFNs whose products a model's prompts multiply at the fewest tokens each (a layer's
// routed experts, else its dense FFNs), when they are packed INT8 or INT4 and the model runs
// on AMX: where widening them starts to pay, given (`given`; 0: never) or measured with
// kernels::measure_widening across `pools`' threads, and set with
// kernels::set_amx_widen_tokens for the FFN's formats (a given count for INT8 and INT4 both).
// A measurement is kept in `cache_path` (written whole, then renamed into place) by the CPU,
// the threads, the shapes and formats, and this build, and taken from there at later starts:
// measured again, each start could choose another count where two are close, and a model
// would answer a little differently from one start to the next. A cache that cannot be read
// or written is logged and measured around. nullopt where nothing is widened: no AMX, or no
// such FFN.
std::optional<WideningChoice> choose_widening(
    const model::LoadedModel& model, backend::NumaPools& pools, std::optional<std::int64_t> given,
    const std::string& cache_path = default_widening_cache());

// "auto" (nullopt: measure), "never" (0) or a token count from 1 to 2^20; false for
// anything else.
bool parse_widen_from(const std::string& text, std::optional<std::int64_t>& out);

// The samples as bench's JSON and the cache give them: [{tokens, widened_seconds,
// quantised_seconds}, ...].
nlohmann::json samples_json(const std::vector<kernels::WidenSample>& samples);

// For the user: "AMX takes INT8 products widened to BF16 from 64 tokens (measured on this
// CPU, ...)".
std::string describe(const WideningChoice& choice);
// The same in two parts, for the app: a line, "INT8 products of 64 tokens or more widened to
// BF16 tiles (measured on this CPU)", and the measurement's figures in sentences, "The widened
// time over the AVX-512 time at 8 tokens 2.04, ...", and where it is kept (empty when given).
std::string summary(const WideningChoice& choice);
std::string figures(const WideningChoice& choice);

}  // namespace tandem::forward
