#include "engine/plan/sglang_export.h"

#include <filesystem>
#include <stdexcept>

namespace tandem::plan {
namespace {

const Parameter* find(const Plan& plan, std::string_view name) {
  for (const Parameter& p : plan.parameters)
    if (p.name == name) return &p;
  return nullptr;
}

std::string value_of(const Plan& plan, std::string_view name, std::string fallback = {}) {
  const Parameter* p = find(plan, name);
  return p != nullptr ? p->value : fallback;
}

// SGLang's parsers for the families it knows, by the checkpoint's architecture.
struct Parsers {
  const char* tool;
  const char* reasoning;
};
Parsers parsers_for(const std::string& architecture, std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool coder = name.find("coder") != std::string::npos;
  if (architecture.rfind("Qwen3Moe", 0) == 0 || architecture.rfind("Qwen3Next", 0) == 0 ||
      architecture.rfind("Qwen3ForCausalLM", 0) == 0)
    return {coder ? "qwen3_coder" : "qwen25", coder ? nullptr : "qwen3"};
  if (architecture.rfind("Glm4Moe", 0) == 0) return {"glm45", "glm45"};
  if (architecture.rfind("DeepseekV3", 0) == 0) {
    if (name.find("kimi") != std::string::npos) return {"kimi_k2", "kimi_k2"};
    if (name.find("v3.1") != std::string::npos) return {"deepseekv31", "deepseek-v3"};
    return {"deepseekv3", name.find("r1") != std::string::npos ? "deepseek-r1" : nullptr};
  }
  if (architecture.rfind("GptOss", 0) == 0) return {"gpt-oss", "gpt-oss"};
  return {nullptr, nullptr};
}

bool needs_quoting(const std::string& s) {
  if (s.empty()) return true;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) ||
          std::string_view("-_./=:,+@%").find(c) != std::string_view::npos))
      return true;
  return false;
}

std::string quoted(const std::string& s) {
  if (!needs_quoting(s)) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

SglangExport export_sglang(const ModelLookup& model, const Plan& plan, const SglangInputs& in) {
  namespace fs = std::filesystem;
  if (model.origin == ModelOrigin::Gguf)
    throw std::runtime_error(
        "SGLang with kt-kernel loads a Hugging Face folder, not a GGUF file: export from the "
        "model's safetensors folder (kt-kernel's LLAMAFILE method can read GGUF experts "
        "beside it).");
  if (plan.cpu_format == WeightFormat::Mxfp4)
    throw std::runtime_error(
        "kt-kernel documents no method for MXFP4 experts (gpt-oss), so Tandem cannot write a "
        "launch for them; Tandem runs them as they are.");
  const std::string repo = model.repo.empty() ? model.name : model.repo;
  if (model.origin != ModelOrigin::Folder && in.download_folder.empty())
    throw std::runtime_error("Say where " + repo +
                             " is downloaded to: kt-kernel converts it from a folder.");
  const std::string folder = model.origin == ModelOrigin::Folder ? model.path : in.download_folder;
  const std::string served =
      model.origin == ModelOrigin::Folder ? fs::path(model.path).filename().string() : model.name;
  SglangExport out;
  if (model.origin != ModelOrigin::Folder)
    out.notes.push_back("Download the model first: tandem download " + repo + " (it goes to " +
                        folder + ").");

  // kt-method: Tandem's CPU format under the name kt-kernel gives it.
  std::string method;
  std::string quant;  // kt-kernel's --quant-method, when its weights must be converted
  switch (plan.cpu_format) {
    case WeightFormat::Bf16:
      method = "BF16";
      break;
    case WeightFormat::Int8:
    case WeightFormat::Int8Rotated:
      method = "AMXINT8", quant = "int8";
      // The same bytes unrotated: kt-kernel multiplies plain INT8 only.
      if (plan.cpu_format == WeightFormat::Int8Rotated)
        out.notes.push_back(
            "kt-kernel has no rotated INT8, which Tandem's plan chose here for AMX's integer "
            "tiles: its experts are plain INT8, the same size.");
      break;
    case WeightFormat::Int4:
      method = "AMXINT4", quant = "int4";
      break;
    case WeightFormat::Int4Down8:
      // kt-kernel has no such mix; its INT4 is smaller, so it fits where the plan's does.
      method = "AMXINT4", quant = "int4";
      out.notes.push_back(
          "kt-kernel has no INT4 with 8-bit down projections, which Tandem's plan chose here: "
          "its experts are all INT4, their down projections too (smaller, and less accurate).");
      break;
    case WeightFormat::Mxfp4:
    case WeightFormat::Native:  // a GGUF file, refused above
      break;
  }
  const std::string tandem_method = value_of(plan, "kt-method");
  if (tandem_method.rfind("AMX", 0) != 0 && !quant.empty())
    out.notes.push_back(
        "This CPU has no AMX: build kt-kernel with CPUINFER_ENABLE_AMX=OFF and "
        "CPUINFER_CPU_INSTRUCT=AVX512 (or AVX2) for " +
        method + " to run here.");
  std::string weights = in.kt_weight_path;
  if (quant.empty()) {
    weights = folder;  // BF16 experts are read from the model's own files
  } else {
    if (weights.empty()) weights = folder + "-" + method;
    std::string input = model.stored.name;
    if (input == "bf16" || input == "fp16" || input == "fp8") {
      // as kt-kernel names them
    } else if (input == "f16") {
      input = "fp16";
    } else {
      throw std::runtime_error("kt-kernel converts BF16, FP16 or FP8 checkpoints; this one is " +
                               input + " (" + model.stored.evidence + ").");
    }
    out.convert = {"python3",
                   "scripts/convert_cpu_weights.py",
                   "--input-path",
                   folder,
                   "--input-type",
                   input,
                   "--output",
                   weights,
                   "--quant-method",
                   quant,
                   "--cpuinfer-threads",
                   value_of(plan, "cpuinfer", "1"),
                   "--threadpool-count",
                   value_of(plan, "threadpool-count", "1")};
  }

  const auto param = [&](const std::string& name, const std::string& value,
                         const std::string& why) {
    out.config[name] = {{"value", value}, {"reason", why}};
  };
  const auto reason = [&](std::string_view name) {
    const Parameter* p = find(plan, name);
    return p != nullptr ? p->reason : std::string();
  };
  out.launch = {"python3",
                "-m",
                "sglang.launch_server",
                "--model-path",
                folder,
                "--served-model-name",
                served,
                "--host",
                in.host,
                "--port",
                std::to_string(in.port)};
  // Modelling code of the model's own (auto_map), or Kimi's tokenizer, which is code.
  const char* tool_parser = parsers_for(model.shape.architecture, served).tool;
  if ((model.config.is_object() && model.config.contains("auto_map")) ||
      (tool_parser != nullptr && std::string_view(tool_parser) == "kimi_k2"))
    out.launch.push_back("--trust-remote-code");
  const auto add = [&](const std::string& flag, const std::string& value, std::string_view from) {
    out.launch.push_back(flag);
    if (!value.empty()) out.launch.push_back(value);
    param(flag.substr(2), value.empty() ? "true" : value, std::string(reason(from)));
  };
  add("--kt-method", method, "kt-method");
  add("--kt-weight-path", weights, "");
  out.config["kt-weight-path"]["reason"] =
      quant.empty() ? "BF16 experts are read from the model's own files"
                    : "the experts as kt-kernel's conversion writes them";
  add("--kt-cpuinfer", value_of(plan, "cpuinfer", "1"), "cpuinfer");
  add("--kt-threadpool-count", value_of(plan, "threadpool-count", "1"), "threadpool-count");
  const std::string gpu_experts = value_of(plan, "num-gpu-experts", "0");
  add("--kt-num-gpu-experts", gpu_experts, "num-gpu-experts");
  add("--kt-max-deferred-experts-per-token", value_of(plan, "max-deferred-experts-per-token", "0"),
      "max-deferred-experts-per-token");
  // kt-kernel copies the experts at the bus's speed: the break-even at that speed, not
  // Tandem's own threshold (which counts its host-side widening).
  if (plan.bus_prefill_threshold > 0) {
    const std::string tokens = std::to_string(plan.bus_prefill_threshold);
    out.launch.push_back("--kt-gpu-prefill-token-threshold");
    out.launch.push_back(tokens);
    param("kt-gpu-prefill-token-threshold", tokens,
          "above " + tokens +
              " prompt tokens, copying a layer's experts to the GPU at the bus's speed is faster "
              "than running them on the CPU");
  }
  // Tandem's routing statistics are its own file; SGLang's frequency placement reads a .pt
  // of its own (--init-expert-location), so the handover starts from uniform.
  std::string strategy = value_of(plan, "expert-placement-strategy", "uniform");
  if (strategy == "frequency") {
    strategy = "uniform";
    out.notes.push_back(
        "Tandem places the GPU experts by its recorded routing statistics; SGLang reads its "
        "own statistics (--init-expert-location, a .pt file), so this launch starts from "
        "uniform placement.");
  }
  add("--kt-expert-placement-strategy", strategy, "expert-placement-strategy");
  if (value_of(plan, "enable-dynamic-expert-update") == "true")
    add("--kt-enable-dynamic-expert-update", "", "enable-dynamic-expert-update");
  add("--context-length", std::to_string(plan.context_tokens), "context-length");
  add("--tensor-parallel-size", std::to_string(std::max(1, in.gpus)), "");
  out.config["tensor-parallel-size"]["reason"] =
      in.gpus > 1 ? "one shard of attention and dense layers per GPU" : "one GPU";
  const Parsers parsers = parsers_for(model.shape.architecture, served);
  if (parsers.tool != nullptr) add("--tool-call-parser", parsers.tool, "");
  if (parsers.reasoning != nullptr) add("--reasoning-parser", parsers.reasoning, "");

  if (in.gpus > 1)
    out.notes.push_back("SGLang is the better choice here: it splits the model over all " +
                        std::to_string(in.gpus) +
                        " GPUs (tensor parallel), while Tandem uses one GPU.");
  out.notes.push_back(
      "SGLang is also the better choice for several users at once: it batches their requests, "
      "while Tandem's local server answers one at a time.");
  if (!plan.uses_gpu)
    out.notes.push_back(
        "Tandem's plan found no usable GPU here; SGLang needs an NVIDIA GPU for attention and "
        "the dense layers.");
  return out;
}

std::string sglang_script(const SglangExport& e) {
  std::string s = "#!/usr/bin/env bash\n# Written by tandem export sglang.\nset -euo pipefail\n";
  for (const std::string& n : e.notes) s += "# " + n + "\n";
  const auto command = [&](const std::vector<std::string>& argv) {
    std::string line;
    for (std::size_t i = 0; i < argv.size(); ++i) {
      const bool flag = argv[i].rfind("--", 0) == 0;
      if (i > 0) line += flag && i > 2 ? " \\\n  " : " ";
      line += quoted(argv[i]);
    }
    return line + "\n";
  };
  if (!e.convert.empty()) {
    s += "\n# 1. kt-kernel's CPU weights (run in kt-kernel's source folder, once):\n";
    s += command(e.convert);
    s += "\n# 2. The server:\n";
  } else {
    s += "\n# The server (kt-kernel reads the experts from the model's own files):\n";
  }
  s += command(e.launch);
  return s;
}

}  // namespace tandem::plan
