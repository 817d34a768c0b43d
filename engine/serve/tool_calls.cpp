#include "engine/serve/tool_calls.h"

#include "engine/serve/openai_request.h"

#include <optional>

namespace tandem::serve {
namespace {

using nlohmann::json;

constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kKimiSectionBegin = "<|tool_calls_section_begin|>";
constexpr std::string_view kKimiSectionEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kKimiCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kKimiArgumentBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kKimiCallEnd = "<|tool_call_end|>";

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The text between `open` and `close` after `from`; npos positions when absent.
struct Span {
  std::size_t begin = std::string_view::npos;  // of `open`
  std::size_t inner = 0;                       // after `open`
  std::size_t inner_end = 0;                   // at `close`
  std::size_t end = 0;                         // after `close`
};
Span find_between(std::string_view text, std::string_view open, std::string_view close,
                  std::size_t from) {
  Span s;
  const std::size_t b = text.find(open, from);
  if (b == std::string_view::npos) return s;
  const std::size_t e = text.find(close, b + open.size());
  if (e == std::string_view::npos) return s;
  s.begin = b;
  s.inner = b + open.size();
  s.inner_end = e;
  s.end = e + close.size();
  return s;
}

std::optional<json> parse_json(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Arguments as OpenAI sends them: an object's JSON text. Text that is not JSON is passed
// on as written (the client sees what the model wrote), unless `strict`.
std::optional<std::string> arguments_text(std::string_view text, bool strict) {
  text = trim(text);
  if (text.empty()) return std::string("{}");
  if (auto j = parse_json(text); j && j->is_object()) return j->dump();
  if (strict) return std::nullopt;
  return std::string(text);
}

// The JSON-schema type of parameter `key` of tool `name`, or "" when the request does not say.
std::string parameter_type(const json& tools, std::string_view name, std::string_view key) {
  if (!tools.is_array()) return {};
  for (const json& t : tools) {
    const json* f = t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || f->value("name", std::string()) != name) continue;
    const json* props = nullptr;
    if (f->contains("parameters") && (*f)["parameters"].is_object() &&
        (*f)["parameters"].contains("properties"))
      props = &(*f)["parameters"]["properties"];
    if (props == nullptr || !props->is_object() || !props->contains(std::string(key))) return {};
    const json& p = (*props)[std::string(key)];
    if (p.is_object() && p.contains("type") && p["type"].is_string())
      return p["type"].get<std::string>();
    return {};
  }
  return {};
}

// A value written as bare text (GLM, Qwen3-Coder): a string when the schema says so (or
// when it is not JSON), otherwise the JSON it spells.
json typed_value(std::string_view text, const std::string& type) {
  if (type == "string") return std::string(text);
  // Templates that print values with Python's str() write True, False and None.
  const std::string_view bare = trim(text);
  if (type == "boolean" && (bare == "True" || bare == "False")) return bare == "True";
  if (bare == "None" && type != "string") return nullptr;
  if (auto j = parse_json(trim(text))) return *j;
  return std::string(text);
}

std::string next_call_id(std::uint64_t& next_id) {
  return "call_" + std::to_string(next_id++);
}

// Hermes: <tool_call>{json}</tool_call>, any number of them.
ParsedReply parse_hermes(std::string_view reply, std::uint64_t& next_id) {
  ParsedReply out;
  std::size_t at = 0;
  for (;;) {
    const Span s = find_between(reply, "<tool_call>", "</tool_call>", at);
    if (s.begin == std::string_view::npos) break;
    const auto j = parse_json(trim(reply.substr(s.inner, s.inner_end - s.inner)));
    if (!j || !j->is_object() || !j->contains("name") || !(*j)["name"].is_string() ||
        (*j)["name"].get<std::string>().empty()) {
      out.content += reply.substr(at, s.end - at);  // not a call: left as written
      at = s.end;
      continue;
    }
    out.content += reply.substr(at, s.begin - at);
    ToolCall call;
    call.id = next_call_id(next_id);
    call.name = (*j)["name"].get<std::string>();
    const json args = j->contains("arguments")    ? (*j)["arguments"]
                      : j->contains("parameters") ? (*j)["parameters"]
                                                  : json::object();
    call.arguments =
        args.is_string() ? *arguments_text(args.get<std::string>(), false) : json_text(args);
    out.calls.push_back(std::move(call));
    at = s.end;
  }
  out.content += reply.substr(at);
  return out;
}

// Strips the one newline templates put after an opening tag and before a closing one.
std::string_view strip_newlines(std::string_view s) {
  if (s.starts_with('\n')) s.remove_prefix(1);
  if (s.ends_with('\n')) s.remove_suffix(1);
  return s;
}

// Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>.
std::optional<ToolCall> parse_coder_call(std::string_view inner, const json& tools,
                                         std::uint64_t& next_id) {
  const Span f = find_between(inner, "<function=", "</function>", 0);
  if (f.begin == std::string_view::npos) return std::nullopt;
  const std::string_view body = inner.substr(f.inner, f.inner_end - f.inner);
  const std::size_t name_end = body.find('>');
  if (name_end == std::string_view::npos) return std::nullopt;
  ToolCall call;
  call.name = std::string(trim(body.substr(0, name_end)));
  if (call.name.empty()) return std::nullopt;
  json args = json::object();
  std::size_t at = name_end + 1;
  for (;;) {
    const Span p = find_between(body, "<parameter=", "</parameter>", at);
    if (p.begin == std::string_view::npos) break;
    const std::string_view param = body.substr(p.inner, p.inner_end - p.inner);
    const std::size_t key_end = param.find('>');
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(param.substr(0, key_end)));
    args[key] = typed_value(strip_newlines(param.substr(key_end + 1)),
                            parameter_type(tools, call.name, key));
    at = p.end;
  }
  call.id = next_call_id(next_id);
  call.arguments = json_text(args);
  return call;
}

// GLM: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>.
std::optional<ToolCall> parse_glm_call(std::string_view inner, const json& tools,
                                       std::uint64_t& next_id) {
  const std::size_t first_key = inner.find("<arg_key>");
  ToolCall call;
  call.name = std::string(trim(inner.substr(0, first_key)));
  if (call.name.empty() || contains(call.name, "<") || contains(call.name, "\n")) return {};
  json args = json::object();
  std::size_t at = first_key == std::string_view::npos ? inner.size() : first_key;
  while (at < inner.size()) {
    const Span k = find_between(inner, "<arg_key>", "</arg_key>", at);
    if (k.begin == std::string_view::npos) break;
    const Span v = find_between(inner, "<arg_value>", "</arg_value>", k.end);
    if (v.begin == std::string_view::npos) return std::nullopt;
    const std::string key(trim(inner.substr(k.inner, k.inner_end - k.inner)));
    args[key] = typed_value(inner.substr(v.inner, v.inner_end - v.inner),
                            parameter_type(tools, call.name, key));
    at = v.end;
  }
  call.id = next_call_id(next_id);
  call.arguments = json_text(args);
  return call;
}

template <typename ParseOne>
ParsedReply parse_tagged(std::string_view reply, ParseOne parse_one) {
  ParsedReply out;
  std::size_t at = 0;
  for (;;) {
    const Span s = find_between(reply, "<tool_call>", "</tool_call>", at);
    if (s.begin == std::string_view::npos) break;
    std::optional<ToolCall> call = parse_one(reply.substr(s.inner, s.inner_end - s.inner));
    if (!call) {
      out.content += reply.substr(at, s.end - at);
    } else {
      out.content += reply.substr(at, s.begin - at);
      out.calls.push_back(std::move(*call));
    }
    at = s.end;
  }
  out.content += reply.substr(at);
  return out;
}

// DeepSeek: a section of calls, each "function<sep>NAME\n```json\nARGS\n```" (V3, R1) or
// "NAME<sep>ARGS" (V3.1).
ParsedReply parse_deepseek(std::string_view reply, std::uint64_t& next_id) {
  ParsedReply out;
  const std::size_t section = reply.find(kDeepSeekCallsBegin);
  if (section == std::string_view::npos) {
    out.content = std::string(reply);
    return out;
  }
  out.content = std::string(reply.substr(0, section));
  std::size_t section_end = reply.find(kDeepSeekCallsEnd, section);
  const std::string_view calls =
      reply.substr(section, section_end == std::string_view::npos ? std::string_view::npos
                                                                  : section_end - section);
  std::size_t at = 0;
  for (;;) {
    const Span c = find_between(calls, kDeepSeekCallBegin, kDeepSeekCallEnd, at);
    if (c.begin == std::string_view::npos) break;
    at = c.end;
    const std::string_view inner = calls.substr(c.inner, c.inner_end - c.inner);
    const std::size_t sep = inner.find(kDeepSeekSep);
    if (sep == std::string_view::npos) continue;
    std::string_view head = trim(inner.substr(0, sep));
    std::string_view tail = inner.substr(sep + kDeepSeekSep.size());
    ToolCall call;
    if (head == "function") {
      const std::size_t nl = tail.find('\n');
      call.name = std::string(trim(tail.substr(0, nl)));
      std::string_view args = nl == std::string_view::npos ? std::string_view() : tail.substr(nl);
      args = trim(args);
      if (args.starts_with("```json"))
        args.remove_prefix(7);
      else if (args.starts_with("```"))
        args.remove_prefix(3);
      if (args.ends_with("```")) args.remove_suffix(3);
      call.arguments = *arguments_text(args, false);
    } else {
      call.name = std::string(head);
      call.arguments = *arguments_text(tail, false);
    }
    if (call.name.empty()) continue;
    call.id = next_call_id(next_id);
    out.calls.push_back(std::move(call));
  }
  if (section_end != std::string_view::npos)
    out.content += reply.substr(section_end + kDeepSeekCallsEnd.size());
  return out;
}

// Kimi-K2:
// "<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>".
ParsedReply parse_kimi(std::string_view reply) {
  ParsedReply out;
  const std::size_t section = reply.find(kKimiSectionBegin);
  if (section == std::string_view::npos) {
    out.content = std::string(reply);
    return out;
  }
  out.content = std::string(reply.substr(0, section));
  const std::size_t section_end = reply.find(kKimiSectionEnd, section);
  const std::string_view calls =
      reply.substr(section, section_end == std::string_view::npos ? std::string_view::npos
                                                                  : section_end - section);
  std::size_t at = 0;
  for (;;) {
    const Span c = find_between(calls, kKimiCallBegin, kKimiCallEnd, at);
    if (c.begin == std::string_view::npos) break;
    at = c.end;
    const std::string_view inner = calls.substr(c.inner, c.inner_end - c.inner);
    const std::size_t arg = inner.find(kKimiArgumentBegin);
    if (arg == std::string_view::npos) continue;
    const std::string_view id = trim(inner.substr(0, arg));
    std::string_view name = id;
    if (name.starts_with("functions.")) name.remove_prefix(10);
    if (const std::size_t colon = name.rfind(':'); colon != std::string_view::npos)
      name = name.substr(0, colon);
    if (name.empty()) continue;
    ToolCall call;
    call.id = std::string(id);
    call.name = std::string(name);
    call.arguments = *arguments_text(inner.substr(arg + kKimiArgumentBegin.size()), false);
    out.calls.push_back(std::move(call));
  }
  if (section_end != std::string_view::npos)
    out.content += reply.substr(section_end + kKimiSectionEnd.size());
  return out;
}

// Harmony: messages "header<|message|>body" ending at <|end|>, <|call|> or <|return|>; a
// header with "to=functions.NAME" is a call, its body the arguments. Only the calls are
// read: the answer comes from the channels.
ParsedReply parse_harmony(std::string_view reply, std::uint64_t& next_id) {
  ParsedReply out;
  std::size_t at = 0;
  while (at < reply.size()) {
    const std::size_t message = reply.find("<|message|>", at);
    if (message == std::string_view::npos) break;
    std::string_view header = reply.substr(at, message - at);
    if (const std::size_t start = header.rfind("<|start|>"); start != std::string_view::npos)
      header.remove_prefix(start);
    std::size_t body_end = reply.size();
    for (std::string_view end : {"<|end|>", "<|call|>", "<|return|>", "<|start|>"}) {
      const std::size_t e = reply.find(end, message);
      if (e != std::string_view::npos && e < body_end) body_end = e;
    }
    const std::string_view body = reply.substr(message + 11, body_end - message - 11);
    at = body_end;
    const std::size_t to = header.find("to=functions.");
    if (to == std::string_view::npos) continue;
    std::string_view name = header.substr(to + 13);
    const std::size_t name_end = name.find_first_of(" <\n\t");
    if (name_end != std::string_view::npos) name = name.substr(0, name_end);
    if (name.empty()) continue;
    ToolCall call;
    call.id = next_call_id(next_id);
    call.name = std::string(name);
    call.arguments = *arguments_text(body, false);
    out.calls.push_back(std::move(call));
  }
  return out;
}

}  // namespace

ToolFormat detect_tool_format(std::string_view t) {
  if (contains(t, kDeepSeekCallsBegin) || contains(t, kDeepSeekCallBegin))
    return ToolFormat::DeepSeek;
  if (contains(t, kKimiSectionBegin) || contains(t, kKimiCallBegin)) return ToolFormat::Kimi;
  if (contains(t, "<|channel|>") && contains(t, "functions.")) return ToolFormat::Harmony;
  if (contains(t, "<tool_call>") && contains(t, "<arg_key>")) return ToolFormat::Glm;
  if (contains(t, "<tool_call>") && contains(t, "<function=")) return ToolFormat::QwenCoder;
  if (contains(t, "<tool_call>")) return ToolFormat::Hermes;
  return ToolFormat::None;
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::None:
      return "none";
    case ToolFormat::Hermes:
      return "Hermes (Qwen)";
    case ToolFormat::QwenCoder:
      return "Qwen3-Coder";
    case ToolFormat::Glm:
      return "GLM";
    case ToolFormat::DeepSeek:
      return "DeepSeek";
    case ToolFormat::Kimi:
      return "Kimi-K2";
    case ToolFormat::Harmony:
      return "harmony (gpt-oss)";
  }
  return "none";
}

bool template_wants_argument_objects(std::string_view template_source) {
  return !(detect_tool_format(template_source) == ToolFormat::DeepSeek &&
           contains(template_source, "```json"));
}

std::vector<std::string> tool_call_openers(ToolFormat format) {
  switch (format) {
    case ToolFormat::None:
      return {};
    case ToolFormat::Hermes:
    case ToolFormat::QwenCoder:
    case ToolFormat::Glm:
      return {"<tool_call>"};
    case ToolFormat::DeepSeek:
      return {std::string(kDeepSeekCallsBegin), std::string(kDeepSeekCallBegin)};
    case ToolFormat::Kimi:
      return {std::string(kKimiSectionBegin), std::string(kKimiCallBegin)};
    case ToolFormat::Harmony:
      return {"to=functions."};
  }
  return {};
}

ParsedReply parse_tool_calls(ToolFormat format, std::string_view reply, const json& tools,
                             std::uint64_t& next_id) {
  ParsedReply out;
  switch (format) {
    case ToolFormat::None:
      out.content = std::string(reply);
      break;
    case ToolFormat::Hermes:
      out = parse_hermes(reply, next_id);
      break;
    case ToolFormat::QwenCoder:
      out = parse_tagged(
          reply, [&](std::string_view inner) { return parse_coder_call(inner, tools, next_id); });
      break;
    case ToolFormat::Glm:
      out = parse_tagged(
          reply, [&](std::string_view inner) { return parse_glm_call(inner, tools, next_id); });
      break;
    case ToolFormat::DeepSeek:
      out = parse_deepseek(reply, next_id);
      break;
    case ToolFormat::Kimi:
      out = parse_kimi(reply);
      break;
    case ToolFormat::Harmony:
      out = parse_harmony(reply, next_id);
      break;
  }
  // The space the model left around its calls goes with them.
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

}  // namespace tandem::serve
