#include "app/convert_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>

#include "engine/convert/converter.h"
#include "engine/model/loaded_model.h"
#include "engine/model/model_error.h"

namespace tandem::app {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_convert_interrupt(int) {
  g_interrupted = 1;
}

struct InterruptGuard {
  InterruptGuard() {
    g_interrupted = 0;
    std::signal(SIGINT, on_convert_interrupt);
    std::signal(SIGTERM, on_convert_interrupt);
  }
  ~InterruptGuard() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
};

std::string duration(double s) {
  const auto total = static_cast<long>(s + 0.5);
  return total >= 3600 ? fmt::format("{}h{:02d}m", total / 3600, total / 60 % 60)
                       : fmt::format("{}m{:02d}s", total / 60, total % 60);
}

}  // namespace

int run_convert(const ConvertCommandOptions& o) {
  convert::ConvertOptions options;
  options.input = o.input;
  options.output = o.output;
  if (!model::parse_method(o.method, options.method)) {
    std::fprintf(stderr, "tandem: --method must be %s.\n", model::method_names_in_words().c_str());
    return 2;
  }
  if (o.group != 0 && !model::has_int4(model::cpu_format_of(options.method))) {
    std::fprintf(stderr,
                 "tandem: --int4-group sets the INT4 group; leave it out for --method %s.\n",
                 o.method.c_str());
    return 2;
  }
  options.group = o.group;
  options.pools = o.pools;
  options.dense_bf16 = o.dense_bf16;
  options.threads = o.threads;
  options.verify = o.verify;
  InterruptGuard guard;
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  try {
    const convert::ConvertEstimate estimate = convert::estimate_conversion(options);
    if (!estimate.advice.empty()) std::fprintf(stderr, "%s\n", estimate.advice.c_str());
    std::fprintf(stderr, "converting %s to %s (%s): about %.1f GB to write, about %s\n",
                 o.input.c_str(), o.output.c_str(), o.method.c_str(),
                 static_cast<double>(estimate.output_bytes) / 1e9,
                 duration(estimate.seconds).c_str());
    convert::Converter converter(options);
    auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    const convert::ConvertResult r = converter.run([&](const convert::ConvertProgress& p) {
      // The signal handler only sets a flag; the converter is told here, off the handler.
      if (g_interrupted) converter.cancel();
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(terminal ? 200 : 5000) &&
          p.bytes_done < p.bytes_total)
        return;
      last = now;
      const std::string line = fmt::format(
          "layer {}/{}  {:5.1f}%  {:.2f}/{:.2f} GB  {:.0f} MB/s  ETA {}", p.layer + 1, p.layers,
          p.bytes_total > 0
              ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
              : 100.0,
          static_cast<double>(p.bytes_done) / 1e9, static_cast<double>(p.bytes_total) / 1e9,
          p.bytes_per_s / 1e6, duration(p.eta_s));
      std::fprintf(stderr, terminal ? "\r%-78.78s" : "%s\n", line.c_str());
    });
    if (terminal) std::fprintf(stderr, "\n");
    for (const convert::TensorCheck& c : r.verification)
      std::printf("%-70s %.5f\n", c.name.c_str(), c.relative_error);
    if (!r.verification.empty()) {
      double worst = 0, sum = 0;
      for (const auto& c : r.verification) {
        worst = std::max(worst, c.relative_error);
        sum += c.relative_error;
      }
      std::printf("verified %zu tensors: mean relative error %.5f, worst %.5f\n",
                  r.verification.size(), sum / static_cast<double>(r.verification.size()), worst);
    }
    std::fprintf(stderr, "%s %s: wrote %.2f GB in %.1f s, peak memory %.2f GB\n",
                 r.resumed ? "resumed and finished" : "converted", o.output.c_str(),
                 static_cast<double>(r.bytes_written) / 1e9, r.seconds,
                 static_cast<double>(r.peak_memory_bytes) / 1e9);
    return 0;
  } catch (const convert::ConvertCancelled& e) {
    std::fprintf(stderr, "\ntandem: %s.\n", e.what());
    return 130;
  } catch (const convert::ConvertError& e) {
    std::fprintf(stderr, "\ntandem: %s\n", e.what());
    return 2;
  } catch (const model::ModelError& e) {
    std::fprintf(stderr, "\ntandem: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "\ntandem: the conversion failed: %s. Run the same command again to resume.\n",
                 e.what());
    return 1;
  }
}

}  // namespace tandem::app
