// The tandem executable: the desktop app by default, sub-commands for headless use.
// It parses arguments and wires the libraries together; all logic lives in them.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <QCoreApplication>
#include <QStandardPaths>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "app/bench_command.h"
#include "app/chat_command.h"
#include "app/convert_command.h"
#include "app/desktop_launch.h"
#include "app/detect_command.h"
#include "app/download_command.h"
#include "app/engine_flags.h"
#include "app/export_command.h"
#include "app/perplexity_command.h"
#include "app/recommend_command.h"
#include "app/run_command.h"
#include "app/serve_command.h"
#include "app/tokenize_command.h"
#include "engine/files/whole_file.h"
#include "engine/generate/sampler.h"
#include "engine/log/log.h"
#include "engine/model/demo_model.h"
#include "engine/model/loaded_model.h"
#include "engine/plan/run_profile.h"
#include "engine/version.h"
#include "kernels/cpu/isa.h"
#include "ui/main_window.h"

namespace {

void setup_logging(bool verbose, bool console) {
  tandem::log::Options options;
  options.verbose = verbose;
  options.console = console;
  if (qEnvironmentVariable("TANDEM_LOG_TO_FILE") != QLatin1String("0")) {
    options.file_path = (QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                         QStringLiteral("/logs/tandem.log"))
                            .toStdString();
  }
  tandem::log::init(options);
}

constexpr const char* kHeadlessHelp =
    "Tandem found no display, so the desktop window cannot open.\n"
    "Everything is also available from the command line:\n"
    "  tandem detect           what this machine has and what Tandem recommends\n"
    "  tandem detect --json    the same as JSON (schema: docs/detect.schema.json)\n"
    "  tandem run -p TEXT              generate text with the built-in demo model\n"
    "  tandem run -m DIR -p TEXT       ... or with a model folder\n"
    "  tandem tokenize -m DIR --text T the token ids of a text\n"
    "  tandem download ORG/MODEL       download a model from Hugging Face\n"
    "  tandem recommend -m ORG/MODEL   whether a model fits here, before downloading it\n"
    "  tandem chat [-m DIR]            chat in the terminal (default: the demo model)\n"
    "  tandem perplexity -m DIR --file TEXT   how well a model predicts a text\n"
    "  tandem --screenshot out.png   render the window offscreen to a PNG\n"
    "  tandem --help           every command and option\n"
    "To open the window, run Tandem in a desktop session (or set DISPLAY).\n";

// `run` and `chat` without --model use the built-in demo model.
bool use_demo_model_if_none(std::string& model) {
  if (!model.empty()) return true;
  model = tandem::model::demo_model_folder();
  if (!model.empty()) return true;
  std::fputs(
      "tandem: this Tandem has no built-in demo model; give a model folder with --model DIR.\n",
      stderr);
  return false;
}

// The values --cpu-format takes, as model::parse_cpu_format reads them.
CLI::IsMember cpu_format_names() {
  std::vector<std::string> names;
  for (tandem::model::CpuFormat f : tandem::model::kCpuFormats)
    names.emplace_back(tandem::model::cpu_format_name(f));
  return CLI::IsMember(names);
}

// --dense-bf16 on the commands that pack or convert weights.
void add_dense_format_option(CLI::App* command, bool& dense_bf16) {
  command
      ->add_flag(
          "--dense-bf16", dense_bf16,
          "Keep attention, shared experts, dense layers and the output head in BF16 while the "
          "routed experts take the chosen format (for attention that INT8 disturbs, as "
          "DeepSeek-V3's)")
      ->capture_default_str();
}

// --int4-group's check, on the commands that pack weights at load and on convert.
CLI::Validator int4_group_check() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        int g = 0;
        try {
          g = std::stoi(text);
        } catch (const std::exception&) {
          return "give a whole number (not \"" + text + "\")";
        }
        if (g < 8 || g > 4096 || g % 8 != 0)
          return "give a multiple of 8 between 8 and 4096 (32, 64 or 128 are usual; not " + text +
                 ")";
        return {};
      },
      "8..4096, a multiple of 8");
}

// --int4-group on the commands that pack weights at load.
void add_int4_group_option(CLI::App* command, int& group) {
  command
      ->add_option("--int4-group", group,
                   "With --cpu-format int4 or int4-down8: columns per scale and offset, a "
                   "multiple of 8 (default 32; 64 takes half a bit less per weight and is less "
                   "accurate)")
      ->check(int4_group_check());
}

// A sampling flag's check: its value set alone on the defaults and judged by the sampler's own
// ranges, so the command line refuses what the server and the window refuse, with the same
// sentence (NaN included, which CLI::Range lets through).
CLI::Validator sampling_check(void (*set)(tandem::generate::SamplingParams&, double)) {
  return CLI::Validator(
      [set](std::string& text) -> std::string {
        double value = 0;
        try {
          std::size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) return "give a number (not \"" + text + "\")";
        } catch (const std::exception&) {
          return "give a number (not \"" + text + "\")";
        }
        tandem::generate::SamplingParams p;
        set(p, value);
        return tandem::generate::sampling_problem(p);
      },
      "");
}

// -c on the commands that run a model: left out, the model's own (at most 4096).
void add_context_option(CLI::App* command, std::int64_t& context) {
  command
      ->add_option("-c,--context", context,
                   "Context length in tokens (default: the model's, at most 4096)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
}

// A seed's check: a whole number from 0 to 2^64-1 (CLI11 wraps "-1" into an unsigned option
// without a word), or -1 where `minus_one_draws` (a new seed each run, as llama.cpp takes it).
CLI::Validator seed_check(bool minus_one_draws) {
  return CLI::Validator(
      [minus_one_draws](std::string& text) -> std::string {
        if (minus_one_draws && text == "-1") return {};
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) {
          return std::string("give a whole number from 0 to 18446744073709551615") +
                 (minus_one_draws ? ", or -1 for a new seed each run" : "") + " (not \"" + text +
                 "\")";
        }
        try {
          (void)std::stoull(text);
        } catch (const std::exception&) {
          return "give at most 18446744073709551615 (not " + text + ")";
        }
        return {};
      },
      "");
}

// --seed on run and chat: a seed makes sampling repeat, run after run; -1 or leaving it out
// draws a new one each run.
void add_seed_option(CLI::App* command, std::uint64_t& seed, bool& seed_given) {
  command
      ->add_option_function<std::string>(
          "--seed",
          [&seed, &seed_given](const std::string& text) {
            seed_given = text != "-1";
            if (seed_given) seed = std::stoull(text);
          },
          "Random seed, for sampling that repeats run after run (-1 or left out: a new one "
          "each run)")
      ->check(seed_check(/*minus_one_draws=*/true))
      ->type_name("UINT|-1");
}

// --pools on the commands that run a model.
void add_pools_option(CLI::App* command, int& pools) {
  command
      ->add_option("--pools,--threadpool-count", pools,
                   "Thread pools, each with its slice of every expert (default: a converted "
                   "folder's own count, otherwise one per NUMA node)")
      ->check(CLI::Range(1, 256));
}

// -m's check: a model folder or a .gguf file (one file, or any part of a split set).
// Another file gets a sentence that says what to give instead (CLI11's own says only
// "Directory is actually a file").
CLI::Validator model_folder() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec)) return {};
        if (!std::filesystem::exists(path, ec)) return path + " does not exist";
        if (std::filesystem::path(path).extension() == ".gguf") return {};
        return path +
               " is a file; give the model's folder (with config.json and .safetensors) or its "
               ".gguf file";
      },
      "MODEL");
}

}  // namespace

int main(int argc, char** argv) {
  // Inference allocates the same multi-megabyte buffers every step; serving them from the
  // heap instead of fresh zeroed pages each time saves much of a prompt's time.
  mallopt(M_MMAP_THRESHOLD, 512 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
  // Under a file-size limit (ulimit -f) a write past it fails with EFBIG, which conversion
  // and downloads report in a sentence, instead of the signal ending Tandem unexplained.
  std::signal(SIGXFSZ, SIG_IGN);
  QCoreApplication::setOrganizationName(QStringLiteral("Tandem"));
  QCoreApplication::setApplicationName(QStringLiteral("Tandem"));
  QCoreApplication::setApplicationVersion(QString::fromUtf8(tandem::kTandemVersion));

  CLI::App cli{
      "Tandem runs large mixture-of-experts language models on one workstation, with the GPU "
      "and the CPU working in tandem. Without a command it opens the desktop app.",
      "tandem"};
  cli.set_version_flag("--version", std::string(tandem::kTandemVersion));
  // The options of tandem itself (--verbose, --cpu-variant) are taken after a command too:
  // `tandem bench ... --cpu-variant avx512` as `tandem --cpu-variant avx512 bench ...`.
  cli.fallthrough();
  bool verbose = false;
  cli.add_flag("-v,--verbose", verbose, "Log debug detail to the console as well as the log file");
  std::string cpu_variant;
  cli.add_option("--cpu-variant", cpu_variant,
                 "Force the CPU kernels: scalar, avx2, avx512 or amx (as TANDEM_CPU_VARIANT)")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512", "amx"}));

  tandem::app::DesktopOptions desktop;
  // The desktop app takes the same engine flags as run and chat, for every model it loads.
  tandem::app::EngineFlags desktop_engine;
  tandem::app::add_engine_flags(&cli, desktop_engine);
  std::string screenshot, page = "chat", size = "1280x800";
  cli.add_option("--screenshot", screenshot,
                 "Render the main window offscreen to this PNG file and exit");
  cli.add_option("--page", page, "The page to show first")
      ->check(CLI::IsMember({"chat", "system", "downloads", "models"}));
  std::string screenshot_prompt;
  cli.add_option("--screenshot-prompt", screenshot_prompt,
                 "With --screenshot: send this in a new chat and capture the reply as it streams");
  cli.add_option("--size", size, "Window size for --screenshot, WIDTHxHEIGHT")
      ->check(CLI::Validator(
          [](std::string& s) {
            return std::regex_match(s, std::regex("[1-9][0-9]{2,4}x[1-9][0-9]{2,4}"))
                       ? std::string()
                       : std::string("use WIDTHxHEIGHT, for example 1280x800");
          },
          "WIDTHxHEIGHT"));

  tandem::app::DetectOptions detect;
  CLI::App* detect_cmd =
      cli.add_subcommand("detect", "Show what this machine has and what Tandem recommends");
  detect_cmd->add_flag("--json", detect.json, "Print JSON (schema: docs/detect.schema.json)");
  detect_cmd->add_option("--path", detect.disk_path,
                         "Folder whose free disk space to measure (default: the models folder)");

  tandem::app::RunOptions run;
  CLI::App* run_cmd =
      cli.add_subcommand("run", "Generate text from a prompt and stream it to stdout");
  run_cmd
      ->add_option("-m,--model", run.model,
                   "Model folder (config.json, tokenizer and .safetensors) or .gguf file; default: "
                   "the built-in demo model")
      ->check(model_folder());
  auto* prompt_opt = run_cmd->add_option("-p,--prompt", run.prompt, "The prompt text");
  auto* prompt_file_opt =
      run_cmd->add_option("-f,--prompt-file", run.prompt_file, "Read the prompt from this file");
  prompt_opt->excludes(prompt_file_opt);
  run_cmd
      ->add_option("-n,--max-tokens", run.max_tokens,
                   "Tokens to generate at most (0: only read the prompt, as for --dump-logits)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  run_cmd->add_flag("--greedy", run.greedy, "Always take the most likely token");
  add_seed_option(run_cmd, run.seed, run.seed_given);
  run_cmd
      ->add_option("-t,--threads,--cpuinfer", run.threads, "CPU threads (default: physical cores)")
      ->check(CLI::Range(1, 4096));
  add_pools_option(run_cmd, run.pools);
  tandem::app::add_engine_flags(run_cmd, run.engine);
  add_dense_format_option(run_cmd, run.dense_bf16);
  using tandem::generate::SamplingParams;
  run_cmd->add_option("--temperature", run.temperature, "Sampling temperature (0 to 2)")
      ->capture_default_str()
      ->check(sampling_check(
          [](SamplingParams& p, double v) { p.temperature = static_cast<float>(v); }));
  run_cmd->add_option("--top-k", run.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(sampling_check([](SamplingParams& p, double v) {
        p.top_k = static_cast<std::int32_t>(std::clamp(v, -1e9, 1e9));
      }));
  run_cmd
      ->add_option("--top-p", run.top_p,
                   "Keep the most likely tokens up to this probability mass (0 to 1)")
      ->capture_default_str()
      ->check(sampling_check([](SamplingParams& p, double v) { p.top_p = static_cast<float>(v); }));
  run_cmd
      ->add_option("--min-p", run.min_p,
                   "Drop tokens below this fraction of the best one's probability (0 to 1)")
      ->capture_default_str()
      ->check(sampling_check([](SamplingParams& p, double v) { p.min_p = static_cast<float>(v); }));
  run_cmd
      ->add_option("--repeat-penalty", run.repeat_penalty,
                   "Penalty for tokens already in the context (above 0, at most 10; 1: off)")
      ->capture_default_str()
      ->check(sampling_check(
          [](SamplingParams& p, double v) { p.repetition_penalty = static_cast<float>(v); }));
  run_cmd->add_option("--stop", run.stop, "Stop when this text appears (repeatable)")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            return text.empty() ? "give the text to stop at (it is empty)" : std::string();
          },
          ""));
  add_context_option(run_cmd, run.context);
  run_cmd
      ->add_option("--cpu-format", run.cpu_format,
                   "Weights on the CPU: native (as stored, the default), int8, int8-rotated "
                   "(int8 rotated, a scale per row and block: faster prompts), int4, int4-down8 "
                   "(int4 with the experts' down projections in INT8), bf16, or mxfp4 (experts "
                   "stored as MXFP4 kept so: gpt-oss); a converted folder runs in its own "
                   "(another named here is refused)")
      ->check(cpu_format_names());
  add_int4_group_option(run_cmd, run.int4_group);
  run_cmd->add_option("--dump-logits", run.dump_logits,
                      "Write the logits of the prompt's last position to this JSON file");

  tandem::app::TokenizeOptions tokenize;
  CLI::App* tokenize_cmd = cli.add_subcommand("tokenize", "Print the token ids of a text");
  tokenize_cmd
      ->add_option("-m,--model", tokenize.model, "Model folder, tokenizer.json or .gguf file")
      ->required()
      ->check(CLI::ExistingPath);
  auto* text_opt = tokenize_cmd->add_option("--text", tokenize.text, "The text");
  auto* file_opt =
      tokenize_cmd->add_option("--file", tokenize.file, "Read the text from this file");
  text_opt->excludes(file_opt);
  tokenize_cmd->add_flag("--json", tokenize.json, "Print ids and token strings as JSON");
  tokenize_cmd->add_flag("--no-special", tokenize.no_special,
                         "Treat special-token text as plain text and add no BOS/EOS");

  tandem::app::DownloadCommandOptions download;
  CLI::App* download_cmd = cli.add_subcommand(
      "download",
      "Download a model from Hugging Face (resumable, verified). HF_TOKEN: token for gated models; "
      "HF_ENDPOINT: a mirror; https_proxy: a proxy. Exit status: 0 done, 1 failed (run again to "
      "resume), "
      "2 no such repository/revision/files, 3 not enough disk space, 4 licence and token needed, "
      "130 interrupted");
  download_cmd->add_option("repo", download.repo, "The repository, ORG/MODEL")->required();
  download_cmd->add_option("--revision", download.revision, "Branch, tag or commit")
      ->capture_default_str();
  download_cmd
      ->add_option("--include", download.include,
                   "Only files matching this glob, e.g. \"*.safetensors\" (repeatable)")
      ->allow_extra_args(
          false);  // one pattern per --include, so the repository is never taken for one
  download_cmd
      ->add_option("--exclude", download.exclude, "Skip files matching this glob (repeatable)")
      ->allow_extra_args(false);
  download_cmd->add_option("--dir", download.dir,
                           "Folder for the files (default: the models folder's ORG/MODEL)");
  download_cmd->add_option("--parallel", download.parallel, "Files downloaded at once")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  tandem::app::BenchCommandOptions bench;
  CLI::App* bench_cmd =
      cli.add_subcommand("bench",
                         "Measure prompt and decode speed on random tokens (or, with --kernels, "
                         "the matrix kernels)");
  CLI::Option* bench_model =
      bench_cmd->add_option("-m,--model", bench.model, "Model folder or .gguf file")
          ->check(model_folder());
  bench_cmd
      ->add_option("-p,--prompt-tokens", bench.prompt_tokens,
                   "Prompt length, or lengths as 512,2048 (each a test)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 22))
      ->capture_default_str();
  auto* bench_depth =
      bench_cmd
          ->add_option("-d,--depth", bench.depth_tokens,
                       "Tokens already in the KV cache before each test (as llama-bench's -d): "
                       "prompt and decode measured at that depth, or at each of 0,8192")
          ->delimiter(',')
          ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 22));
  auto* bench_trace =
      bench_cmd
          ->add_option("--trace", bench.trace_path,
                       "Write a timeline of every thread over the counted runs to FILE, in "
                       "the Chrome trace format (ui.perfetto.dev, chrome://tracing)")
          ->type_name("FILE");
  bench_cmd
      ->add_option("-n,--decode-tokens", bench.decode_tokens,
                   "Tokens to decode, or counts as 32,128 (each a test)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 22))
      ->capture_default_str();
  bench_cmd
      ->add_option("-t,--threads,--cpuinfer", bench.threads,
                   "CPU threads (default: physical cores)")
      ->check(CLI::Range(1, 4096));
  add_pools_option(bench_cmd, bench.pools);
  tandem::app::add_engine_flags(bench_cmd, bench.engine);
  bench_cmd->add_flag("--serial", bench.serial,
                      "Run the CPU's experts only after the accelerator's (the serial order), to "
                      "measure what overlapping them gains");
  add_dense_format_option(bench_cmd, bench.dense_bf16);
  bench_cmd->add_option("-r,--repetitions", bench.repetitions, "Repetitions")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  bench_cmd
      ->add_option(
          "--cpu-format", bench.cpu_format,
          "Weights on the CPU: native, int8, int8-rotated, int4, int4-down8, bf16 or mxfp4 "
          "(default: native "
          "for a .gguf file, as tandem run takes it, else int8); a converted folder runs in its "
          "own (another named here is refused)")
      ->check(cpu_format_names());
  add_int4_group_option(bench_cmd, bench.int4_group);
  bench_cmd
      ->add_option("--dense", bench.dense,
                   "Dense INT8 matrices: auto or packed (our kernels, activation scales per 32 "
                   "columns) or onednn (every prompt, one activation scale per token: a little "
                   "faster, less accurate; decode keeps ours)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "packed", "onednn"}));
  bench_cmd->add_flag("--json", bench.json, "Print JSON");
  bench_cmd->add_flag("--no-warmup", bench.no_warmup,
                      "Count the first prompt and decode too (by default one uncounted pass "
                      "warms the buffers, as llama-bench does)");

  auto* kernels_flag =
      bench_cmd
          ->add_flag(
              "--kernels", bench.kernels,
              "Instead of a model: time our packed kernels against oneDNN on Qwen3-30B-A3B's "
              "matrix shapes (the formats from --formats; all thread counts from -t, else all "
              "cores and 1)")
          ->excludes(bench_model)
          ->excludes(bench_trace);
  auto* delta_rule_flag =
      bench_cmd
          ->add_flag("--delta-rule", bench.delta_rule,
                     "Instead of a model: time the CPU's gated DeltaNet layer (Qwen3-Next's linear "
                     "attention) at Qwen3-Next-80B's shapes, token by token and chunked")
          ->excludes(bench_model)
          ->excludes(kernels_flag)
          ->excludes(bench_trace);
  bench_cmd
      ->add_flag("--attention", bench.attention,
                 "Instead of a model: time a prompt's attention on the CPU at Qwen3-30B-A3B's "
                 "shapes over a BF16 cache, flash-style against token by token (lengths from "
                 "--tokens, default 512,2048; after -d cached tokens, default 0 and 8192)")
      ->excludes(bench_model)
      ->excludes(kernels_flag)
      ->excludes(delta_rule_flag)
      ->excludes(bench_trace);
  bench_cmd
      ->add_option("--shape", bench.attention_shape,
                   "--attention: query heads, KV heads and head width as Q/KV/D (SmolLM2-135M's "
                   "9/3/64)")
      ->capture_default_str()
      ->needs(bench_cmd->get_option("--attention"));
  bench_cmd
      ->add_flag("--gguf-products", bench.gguf_products,
                 "With -m FILE.gguf: time the product of each GGUF block format the file's "
                 "matrices use (Q4_K, IQ2_XS, ...), on its own matrices of that format, with "
                 "every SIMD variant this CPU runs (AVX2, AVX-512; only the one --cpu-variant "
                 "names, if given): GB/s of weights at one token as decode, or at the --tokens "
                 "counts")
      ->needs(bench_model)
      ->excludes(kernels_flag)
      ->excludes(delta_rule_flag)
      ->excludes(bench_trace);
  auto* kernel_tokens =
      bench_cmd
          ->add_option("--tokens", bench.kernel_tokens,
                       "--kernels, --delta-rule, --attention, --gguf-products: token counts (M), "
                       "e.g. 1,8,64,512")
          ->delimiter(',')
          ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 22));
  bench_cmd
      ->add_option("--formats", bench.kernel_formats,
                   "--kernels: weight formats, from int8, int8-rotated, int4, bf16 and mxfp4 "
                   "(oneDNN multiplies INT8 and BF16 only: INT4 and MXFP4 rows have our kernels "
                   "alone; int8-rotated's oneDNN rows multiply its weights turned back)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"int8", "int8-rotated", "int4", "bf16", "mxfp4"}));
  bench_cmd
      ->add_option("--head-rows", bench.head_rows,
                   "--kernels: rows of the output head (fewer save time and memory)")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  bench_cmd
      ->add_option("--sample-time", bench.sample_seconds,
                   "--kernels: seconds each sample repeats a product for (at least)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60.0));
  bench_cmd
      ->add_option("--working-set", bench.working_set_mib,
                   "--kernels: MiB of weight copies the products rotate over, so they come "
                   "from memory rather than the cache (--gguf-products: MiB of the file's "
                   "matrices a pass multiplies by)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  tandem::app::ConvertCommandOptions convert;
  CLI::App* convert_cmd = cli.add_subcommand("convert",
                                             "Convert a Hugging Face model folder or a GGUF "
                                             "file into Tandem's packed CPU weights (resumable: "
                                             "run it again after an interruption). Exit status: "
                                             "0 done, 1 failed (run again to resume), 2 bad "
                                             "input, 130 interrupted");
  convert_cmd
      ->add_option("--in", convert.input,
                   "The Hugging Face model folder, or the .gguf file (any part of a split set)")
      ->required();
  convert_cmd
      ->add_option("--out", convert.output, "The folder for the converted model (new or empty)")
      ->required();
  convert_cmd
      ->add_option(
          "--method", convert.method,
          "int8 (a scale per 32 columns), int8-rotated (int8 rotated, a scale per row and block: "
          "the same size, faster prompts), int4 (a scale and an offset per group), "
          "int4-down8 (int4 with the routed experts' down projections in INT8: about "
          "6.2 bits an expert weight instead of 5, more accurate), bf16, or mxfp4 "
          "(experts stored as MXFP4 kept exactly: gpt-oss)")
      ->required();
  convert_cmd
      ->add_option("--int4-group,--group", convert.group,
                   "With --method int4 or int4-down8: columns per scale and offset, a multiple "
                   "of 8 (default 32; 64 takes half a bit less per weight and is less accurate)")
      ->check(int4_group_check());
  convert_cmd
      ->add_option("--pools", convert.pools,
                   "Thread pools the experts are split for, one per NUMA node of the machine that "
                   "runs the model (default: this machine's NUMA nodes)")
      ->check(CLI::Range(1, 256));
  convert_cmd->add_option("-t,--threads", convert.threads, "Packing threads (default: all)")
      ->check(CLI::Range(1, 4096));
  add_dense_format_option(convert_cmd, convert.dense_bf16);
  convert_cmd->add_flag("--verify", convert.verify,
                        "Print each packed tensor's relative error against the source");

  tandem::app::SynthCommandOptions synth;
  CLI::App* synth_cmd = cli.add_subcommand(
      "synth", "Write a random-weight checkpoint shaped like a real model, for benchmarks");
  synth_cmd->add_option("--like", synth.like, "qwen3-30b-a3b or deepseek-v3")
      ->required()
      ->check(CLI::IsMember({"qwen3-30b-a3b", "deepseek-v3"}));
  synth_cmd->add_option("--layers", synth.layers, "Number of layers (default: the real model's)")
      ->check(CLI::Range(1, 200));
  synth_cmd
      ->add_option("--experts", synth.experts,
                   "Routed experts per MoE layer, each of the real shape (default: the real "
                   "model's; fewer make a layer fit a smaller machine)")
      ->check(CLI::Range(1, 4096));
  synth_cmd->add_option("--out", synth.out, "Output folder")->required();
  synth_cmd->add_option("--seed", synth.seed, "Random seed, 0 or more")
      ->capture_default_str()
      ->check(seed_check(/*minus_one_draws=*/false));

  tandem::app::RecommendOptions recommend;
  bool save_profile = false;
  CLI::App* recommend_cmd = cli.add_subcommand(
      "recommend", "Plan memory and recommend parameters for a model on this machine");
  recommend_cmd
      ->add_option("-m,--model", recommend.model,
                   "A model folder, a .gguf file, a catalog id (e.g. qwen3-30b-a3b) or a "
                   "Hugging Face repository (e.g. Qwen/Qwen3-30B-A3B). A repository in the "
                   "catalog is answered offline; any other is asked of the Hub (HF_ENDPOINT, "
                   "HF_TOKEN) for its config.json and file list only. A folder on this computer "
                   "wins over a repository of the same relative name")
      ->required();
  auto* recommend_context =
      recommend_cmd->add_option("-c,--context", recommend.context, "Context length in tokens")
          ->capture_default_str()
          ->check(CLI::Range(256, 10000000));
  recommend_cmd->add_option("--quality", recommend.quality, "quality, balanced or speed")
      ->capture_default_str()
      ->check(CLI::IsMember({"quality", "balanced", "speed"}));
  recommend_cmd
      ->add_option("--hardware", recommend.hardware,
                   "Plan for a machine recorded with tandem detect --json")
      ->check(CLI::ExistingFile);
  recommend_cmd->add_flag("--json", recommend.json, "Print JSON");
  recommend_cmd
      ->add_option("--expert-stats", recommend.expert_stats,
                   "Routing statistics recorded with --record-expert-stats, for the frequency "
                   "placement (default: the model folder's tandem-expert-stats.json)")
      ->check(CLI::ExistingFile);
  recommend_cmd->add_option(
      "--quant", recommend.quant,
      "For a GGUF repository (e.g. unsloth/Qwen3-30B-A3B-GGUF): the quantisation to plan for, "
      "such as Q4_K_M (default: the largest that fits)");
  recommend_cmd->add_flag("--save", save_profile,
                          "Save the plan as the model's profile in the data folder");

  tandem::app::ChatOptions chat;
  CLI::App* chat_cmd = cli.add_subcommand("chat", "Chat with a model in the terminal");
  chat_cmd
      ->add_option("-m,--model", chat.model,
                   "Model folder or .gguf file; default: the built-in demo model")
      ->check(model_folder());
  chat_cmd
      ->add_option("-t,--threads,--cpuinfer", chat.threads, "CPU threads (default: physical cores)")
      ->check(CLI::Range(1, 4096));
  add_pools_option(chat_cmd, chat.pools);
  tandem::app::add_engine_flags(chat_cmd, chat.engine);
  add_context_option(chat_cmd, chat.context);
  chat_cmd->add_option("--system", chat.system_prompt, "System prompt");
  chat_cmd
      ->add_option("--temperature", chat.temperature, "Sampling temperature (0 to 2; 0: greedy)")
      ->capture_default_str()
      ->check(sampling_check([](tandem::generate::SamplingParams& p, double v) {
        p.temperature = static_cast<float>(v);
      }));
  add_seed_option(chat_cmd, chat.seed, chat.seed_given);
  chat_cmd->add_option("-n,--max-tokens", chat.max_tokens, "Longest reply in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));

  tandem::app::ExportOptions export_options;
  CLI::App* export_cmd = cli.add_subcommand("export", "Hand the model over to another engine");
  CLI::App* export_sglang_cmd = export_cmd->add_subcommand(
      "sglang",
      "Print the SGLang + kt-kernel commands (weight conversion and launch) for the model and "
      "this computer's plan");
  export_cmd->require_subcommand(1);
  export_sglang_cmd
      ->add_option("-m,--model", export_options.plan.model,
                   "Model folder, catalog id or Hugging Face repository")
      ->required();
  CLI::Option* export_context =
      export_sglang_cmd
          ->add_option("-c,--context", export_options.plan.context, "Context length in tokens")
          ->capture_default_str()
          ->check(CLI::Range(256, 10000000));
  export_sglang_cmd
      ->add_option("--quality", export_options.plan.quality, "quality, balanced or speed")
      ->capture_default_str();
  export_sglang_cmd->add_option("--hardware", export_options.plan.hardware,
                                "Plan for the machine recorded by tandem detect --json");
  export_sglang_cmd
      ->add_option("--gpus", export_options.gpus,
                   "GPUs for tensor parallelism (default: the usable ones found)")
      ->check(CLI::Range(1, 64));
  export_sglang_cmd->add_option("--host", export_options.host, "Address SGLang listens on")
      ->capture_default_str();
  export_sglang_cmd->add_option("--port", export_options.port, "Port SGLang listens on")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  export_sglang_cmd->add_option("--kt-weight-path", export_options.kt_weight_path,
                                "Where kt-kernel's converted experts go (default: beside the "
                                "model)");
  export_sglang_cmd->add_flag("--json", export_options.json, "Print JSON");
  export_sglang_cmd->add_option("-o,--out", export_options.out, "Write the script to this file");

  tandem::app::ServeOptions serve;
  CLI::App* serve_cmd = cli.add_subcommand(
      "serve", "Serve the model through OpenAI's API (chat, completions, models) until Ctrl+C");
  serve_cmd
      ->add_option("-m,--model", serve.model,
                   "Model folder or .gguf file; default: the built-in demo model")
      ->check(model_folder());
  serve_cmd
      ->add_option("-t,--threads,--cpuinfer", serve.threads,
                   "CPU threads (default: physical cores)")
      ->check(CLI::Range(1, 4096));
  add_pools_option(serve_cmd, serve.pools);
  tandem::app::add_engine_flags(serve_cmd, serve.engine);
  add_context_option(serve_cmd, serve.context);
  serve_cmd
      ->add_option("--host", serve.host,
                   "Address to listen on; another than 127.0.0.1 needs --api-key")
      ->capture_default_str();
  serve_cmd->add_option("--port", serve.port, "Port to listen on (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve_cmd->add_option("--api-key", serve.api_key,
                        "Key clients must send as 'Authorization: Bearer KEY' (or TANDEM_API_KEY)");
  serve_cmd->add_option("--cors", serve.cors,
                        "Origin allowed to call from a browser (repeat; * for any); default: none");
  serve_cmd
      ->add_option("--max-waiting", serve.max_waiting,
                   "Requests that may wait behind the running one; more are told to retry")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  serve_cmd->add_option("--max-body-mib", serve.max_body_mib, "Largest request body, in MiB")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();

  tandem::app::PerplexityOptions perplexity;
  CLI::App* perplexity_cmd = cli.add_subcommand(
      "perplexity",
      "Measure how well a model predicts a text (and its KL divergence from a base model)");
  perplexity_cmd->add_option("-m,--model", perplexity.model, "Model folder or .gguf file")
      ->required()
      ->check(model_folder());
  perplexity_cmd->add_option("-f,--file", perplexity.file, "The text file")
      ->required()
      ->check(CLI::ExistingFile);
  perplexity_cmd
      ->add_option(
          "-c,--context", perplexity.context,
          "Tokens per window, each starting afresh (default: 512, at most the model's context)")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 20));
  auto* kl_base_opt =
      perplexity_cmd
          ->add_option(
              "--kl-base", perplexity.kl_base,
              "Also report the mean KL divergence from this model's predictions (same tokenizer)")
          ->check(model_folder());
  perplexity_cmd
      ->add_option("--save-logits", perplexity.save_logits,
                   "Save the model's next-token distributions to this file, for --kl-base-logits "
                   "later (2 bytes per vocabulary entry and position: 2.2 GiB for 7 600 tokens "
                   "at a vocabulary of 150k)")
      ->check(CLI::Validator(
          [](std::string& path) -> std::string {
            return tandem::files::folder_writable_for(path)
                       ? std::string()
                       : std::filesystem::absolute(path).parent_path().string() +
                             " is not a folder that can be written";
          },
          "FILE"));
  perplexity_cmd
      ->add_option("--kl-base-logits", perplexity.kl_base_logits,
                   "Report the mean KL divergence from distributions saved with --save-logits "
                   "(the same text and --context; the base model need not be loaded)")
      ->check(CLI::ExistingFile)
      ->excludes(kl_base_opt);
  perplexity_cmd
      ->add_option("--cpu-format", perplexity.cpu_format,
                   "The model's weights on the CPU: native (as stored), int8, int8-rotated, "
                   "int4, int4-down8, bf16 or mxfp4 (default: as the model loads by itself)")
      ->check(cpu_format_names());
  add_int4_group_option(perplexity_cmd, perplexity.int4_group);
  tandem::app::add_amx_widen_option(perplexity_cmd, perplexity.amx_widen_from);
  perplexity_cmd
      ->add_option("--dense", perplexity.dense,
                   "The model's dense INT8 matrices: auto or packed (our kernels, activation "
                   "scales per 32 columns) or onednn (one activation scale per token), to "
                   "measure what oneDNN costs in accuracy")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "packed", "onednn"}));
  perplexity_cmd
      ->add_option("--kl-base-cpu-format", perplexity.kl_base_cpu_format,
                   "The base model's, likewise: with the same file as --kl-base, the KL "
                   "divergence one format costs against another")
      ->check(cpu_format_names());
  perplexity_cmd
      ->add_option("--kv-cache", perplexity.kv_cache,
                   "How keys and values are kept: bf16 (as run and chat keep them), int8 or f32")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "int8", "f32"}));
  perplexity_cmd
      ->add_option("--kl-base-kv-cache", perplexity.kl_base_kv_cache,
                   "The base model's, likewise (default: the same as --kv-cache): with the same "
                   "model and format as --kl-base, the KL divergence BF16 or 8-bit keys and "
                   "values cost")
      ->check(CLI::IsMember({"bf16", "int8", "f32"}));
  perplexity_cmd
      ->add_option("-t,--threads", perplexity.threads, "CPU threads (default: physical cores)")
      ->check(CLI::Range(1, 4096));
  add_pools_option(perplexity_cmd, perplexity.pools);
  perplexity_cmd->add_flag("--json", perplexity.json, "Print the result as JSON");

  tandem::app::TemplateRenderOptions render;
  CLI::App* template_cmd = cli.add_subcommand("template", "Work with chat templates");
  CLI::App* render_cmd = template_cmd->add_subcommand(
      "render", "Print the exact prompt a model receives for a conversation");
  template_cmd->require_subcommand(1);
  auto* render_model =
      render_cmd
          ->add_option("-m,--model", render.model,
                       "Model folder (its tokenizer_config.json or chat_template.jinja)")
          ->check(model_folder());
  auto* render_template =
      render_cmd->add_option("--template", render.template_file, "A Jinja template file")
          ->check(CLI::ExistingFile);
  render_model->excludes(render_template);
  render_cmd
      ->add_option("--messages", render.messages_file, "JSON list of {role, content} messages")
      ->required()
      ->check(CLI::ExistingFile);
  render_cmd->add_option("--tools", render.tools_file, "JSON list of tool definitions")
      ->check(CLI::ExistingFile);
  bool no_generation_prompt = false;
  render_cmd->add_flag("--no-generation-prompt", no_generation_prompt,
                       "Leave out the assistant's opening");

  try {
    cli.parse(argc, argv);
    if (render_cmd->parsed() && render.model.empty() && render.template_file.empty()) {
      throw CLI::RequiredError("--model or --template");
    }
    if (run_cmd->parsed() && run.prompt.empty() && run.prompt_file.empty()) {
      throw CLI::RequiredError("--prompt or --prompt-file");
    }
    if (tokenize_cmd->parsed() && text_opt->count() == 0 && file_opt->count() == 0) {
      throw CLI::RequiredError("--text or --file");
    }
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  // The kernels read the variant from the environment, so the flag and the variable are one
  // setting. A command refuses a variant this CPU cannot run before it starts, with a
  // sentence; the window shows it when a model loads.
  if (!cpu_variant.empty()) ::setenv("TANDEM_CPU_VARIANT", cpu_variant.c_str(), 1);
  if (!cli.get_subcommands().empty()) {
    try {
      tandem::kernels::forced_variant();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem: %s\n", e.what());
      return 1;
    }
  }

  if (detect_cmd->parsed()) {
    setup_logging(verbose, true);
    if (detect.disk_path.empty())
      detect.disk_path = tandem::ui::MainWindow::modelsFolder().toStdString();
    return tandem::app::run_detect(detect);
  }

  if (run_cmd->parsed()) {
    setup_logging(verbose, true);
    if (!use_demo_model_if_none(run.model)) return 2;
    return tandem::app::run_generate(run);
  }
  if (recommend_cmd->parsed()) {
    setup_logging(verbose, true);
    recommend.context_given = recommend_context->count() > 0;
    if (save_profile) {
      QString name = QString::fromStdString(recommend.model)
                         .section(QLatin1Char('/'), -1, -1, QString::SectionSkipEmpty);
      recommend.save = (QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                        QStringLiteral("/profiles/") + name + QStringLiteral(".json"))
                           .toStdString();
    }
    return tandem::app::run_recommend(recommend);
  }
  if (download_cmd->parsed()) {
    setup_logging(verbose, true);
    if (download.dir.empty()) {
      download.dir = (tandem::ui::MainWindow::modelsFolder() + QLatin1Char('/') +
                      QString::fromStdString(download.repo))
                         .toStdString();
    }
    return tandem::app::run_download(download);
  }
  if (bench_cmd->parsed()) {
    setup_logging(verbose, true);
    bench.tokens_given = kernel_tokens->count() > 0;
    bench.depth_given = bench_depth->count() > 0;
    return tandem::app::run_bench(bench);
  }
  if (convert_cmd->parsed()) {
    setup_logging(verbose, true);
    return tandem::app::run_convert(convert);
  }
  if (synth_cmd->parsed()) {
    setup_logging(verbose, true);
    return tandem::app::run_synth(synth);
  }
  if (chat_cmd->parsed()) {
    setup_logging(verbose, true);
    if (!use_demo_model_if_none(chat.model)) return 2;
    return tandem::app::run_chat(chat);
  }
  if (export_sglang_cmd->parsed()) {
    setup_logging(verbose, true);
    export_options.plan.context_given = export_context->count() > 0;
    export_options.models_folder = tandem::ui::MainWindow::modelsFolder().toStdString();
    return tandem::app::run_export_sglang(export_options);
  }
  if (serve_cmd->parsed()) {
    setup_logging(verbose, true);
    if (!use_demo_model_if_none(serve.model)) return 2;
    return tandem::app::run_serve(argc, argv, serve);
  }
  if (perplexity_cmd->parsed()) {
    setup_logging(verbose, true);
    return tandem::app::run_perplexity(perplexity);
  }
  if (render_cmd->parsed()) {
    setup_logging(verbose, true);
    render.generation_prompt = !no_generation_prompt;
    return tandem::app::run_template_render(render);
  }
  if (tokenize_cmd->parsed()) {
    setup_logging(verbose, true);
    return tandem::app::run_tokenize(tokenize);
  }

  desktop.engine_overrides = [&desktop_engine](tandem::forward::RunSettings& settings,
                                               std::string& error) {
    if (!desktop_engine.profile.empty()) {
      try {
        tandem::forward::apply_profile(tandem::plan::read_run_profile(desktop_engine.profile),
                                       settings);
      } catch (const std::exception& e) {
        error = e.what();
        return false;
      }
    }
    return tandem::app::apply_engine_flags(desktop_engine, /*given_only=*/true, settings, error);
  };
  desktop.screenshot_path = QString::fromStdString(screenshot);
  desktop.page = QString::fromStdString(page);
  desktop.prompt = QString::fromStdString(screenshot_prompt);
  const auto x = size.find('x');
  desktop.size = QSize(std::stoi(size.substr(0, x)), std::stoi(size.substr(x + 1)));
  if (desktop.screenshot_path.isEmpty() && !tandem::app::display_available()) {
    std::fputs(kHeadlessHelp, stdout);
    return 0;
  }
  // The window has its own log view through Qt's logging; the console gets what Qt prints.
  setup_logging(verbose, false);
  return tandem::app::run_desktop(argc, argv, desktop);
}
