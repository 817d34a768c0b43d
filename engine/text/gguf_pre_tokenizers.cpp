// llama.cpp's named pre-tokenizers: for each value of the GGUF key tokenizer.ggml.pre, the
// regexes that cut text into words (run one after the other, every match and every gap a
// word of its own) and the options that change ids. The regexes are the word boundaries the
// model families were trained with, as their tokenizer.json files publish them; where
// llama.cpp rewrote one for its own regex engine, the published form is used, since it is
// what the model's own tokenizer runs.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/text/pre_tokenizer.h"

namespace tandem::text {

namespace {

const char kGpt2NoTrailing[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3's pattern with whitespace runs cut into powers of two.
const char kJais2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";
const char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen35[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o (o200k): words split at lower-to-upper case changes, contractions attached.
const char kGpt4o[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kTekken[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kYoutuWords[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kYoutuCjk[] =
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
const char kBailing[] =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char kSeedCoder[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen 2's pattern without the English contractions, so that Turkish suffixes stay on.
const char kUfakzeka[] =
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kExaoneMoe[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)";
const char kMiniCpm5[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek-V3 and its relatives: ASCII punctuation glued to the letters after it.
const char kDeepseekV3Words[] =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kSpark25Words[] =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";
const char kHanKana[] = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
const char kCjkHangul[] = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// DeepSeek LLM's cased letters of every script, spelled out as code point ranges.
const char kDeepseekLlmLetters[] =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
const char kDeepseekLlmPunctuation[] =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
// Text up to a sentence mark or a space (Bloom, Poro, GPT-3 Finnish).
const char kBloom[] = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
const char kAfmoeAsian[] =
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF})"
    R"(\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF})"
    R"(\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)";
// AFMoE's digit runs: the first group takes the remainder modulo three, then groups of
// three (llama.cpp implements this rule in code; the lookahead states it as a regex).
const char kAfmoeDigits[] = R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";
const char kNewlineRuns[] = R"([^\n]+|[\n]+)";
// Kimi-K2's tiktoken pattern (tokenization_kimi.py joins these with "|"), in Rust regex
// syntax.
const std::vector<std::string_view>& kimi_alternatives() {
  static const std::vector<std::string_view> alternatives = {
      R"([\p{Han}]+)",
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)",
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)",
      R"(\p{N}{1,3})",
      R"( ?[^\s\p{L}\p{N}]+[\r\n]*)",
      R"(\s*[\r\n]+)",
      R"(\s+(?!\S))",
      R"(\s+)",
  };
  return alternatives;
}

const std::string& kimi_k2_pattern() {
  static const std::string pattern = [] {
    std::string joined;
    for (std::string_view alternative : kimi_alternatives()) {
      if (!joined.empty()) joined += '|';
      joined += alternative;
    }
    return joined;
  }();
  return pattern;
}

enum class Special {
  kNone,
  kTiktoken,    // Kimi-K2: chunks, rank merges, whole words
  kSpaceMarks,  // Gemma 4, Sarvam: "▁" for spaces, raw UTF-8, no byte alphabet
  kWhitespace,  // words between whitespace, raw UTF-8
};

struct Entry {
  std::vector<std::string_view> names;
  std::vector<std::string_view> patterns;
  bool ignore_merges = false;
  bool adds_bos = false;
  bool forces_bos = false;
  Special special = Special::kNone;
  bool newline_runs_whole = false;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {.names = {"default"},
       .patterns = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTrailing, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {.names = {"minicpm5"}, .patterns = {R"(\p{N}{1,3})", kMiniCpm5}, .ignore_merges = true},
      {.names = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                 "lfm2", "jina-v5-nano"},
       .patterns = {kLlama3},
       .ignore_merges = true,
       .adds_bos = true},
      {.names = {"deepseek-llm"},
       .patterns = {R"([\r\n])", kDeepseekLlmLetters, kDeepseekLlmPunctuation, R"(\s+$)",
                    kCjkHangul, R"(\p{N}+)"}},
      {.names = {"deepseek-coder"},
       .patterns = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"}},
      {.names = {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
       .patterns = {R"(\p{N}{1,3})", kHanKana, kDeepseekV3Words}},
      {.names = {"spark2_5"}, .patterns = {R"(\p{N}{1,3})", kHanKana, kSpark25Words, R"(\p{N})"}},
      {.names = {"youtu"}, .patterns = {kYoutuCjk, kYoutuWords}, .ignore_merges = true},
      {.names = {"falcon"},
       .patterns = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTrailing, "[0-9][0-9][0-9]"}},
      {.names = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                 "mellum2"},
       .patterns = {R"(\p{N})", kGpt2NoTrailing}},
      {.names = {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                 "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                 "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling"},
       .patterns = {kGpt2NoTrailing}},
      {.names = {"jais-2"}, .patterns = {kJais2}},
      {.names = {"gemma4", "granite-embed-multi-311m"},
       .patterns = {kNewlineRuns},
       .forces_bos = true,
       .special = Special::kSpaceMarks,
       .newline_runs_whole = true},
      {.names = {"sarvam-moe"}, .patterns = {kNewlineRuns}, .special = Special::kSpaceMarks},
      {.names = {"whitespace"}, .patterns = {}, .special = Special::kWhitespace},
      {.names = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                 "solar-open", "grok-2"},
       .patterns = {kQwen2}},
      {.names = {"qwen35"}, .patterns = {kQwen35}},
      {.names = {"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, .patterns = {kLlama3}},
      {.names = {"poro-chat", "bloom", "gpt3-finnish"}, .patterns = {kBloom}},
      {.names = {"viking"}, .patterns = {kBloom, R"(\p{N})"}},
      {.names = {"tekken"}, .patterns = {kTekken}, .ignore_merges = true, .adds_bos = true},
      {.names = {"chameleon"},
       .patterns = {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                    "([\\t\\n]|    |  )", R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2NoTrailing},
       .adds_bos = true},
      {.names = {"exaone-moe"}, .patterns = {kExaoneMoe}},
      {.names = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, .patterns = {kGpt4o}},
      {.names = {"granite-embed-multi-97m"}, .patterns = {kGpt4o}, .ignore_merges = true},
      {.names = {"tiny_aya", "cohere2moe"}, .patterns = {R"(\d{1,3}(?=(?:\d{3})*\b))", kGpt4o}},
      {.names = {"superbpe"}, .patterns = {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"}},
      {.names = {"bailingmoe", "bailingmoe2", "llada-moe"}, .patterns = {kBailing}},
      {.names = {"seed-coder"}, .patterns = {kSeedCoder}},
      // llama.cpp merges Kimi-K2 by its merge list; tiktoken, the model's own tokenizer,
      // merges by rank and takes whole words first, which can give other ids.
      {.names = {"kimi-k2"},
       .patterns = {kimi_k2_pattern()},
       .ignore_merges = true,
       .special = Special::kTiktoken},
      {.names = {"ufakzeka"}, .patterns = {kUfakzeka}},
      {.names = {"afmoe"}, .patterns = {kAfmoeDigits, kAfmoeAsian, kDeepseekV3Words}},
      {.names = {"laguna"}, .patterns = {kNewlineRuns, kQwen2}},
  };
  return table;
}

}  // namespace

const std::vector<std::string_view>& kimi_k2_pattern_alternatives() {
  return kimi_alternatives();
}

std::vector<std::string_view> gguf_pre_tokenizer_names() {
  std::vector<std::string_view> names;
  for (const Entry& entry : entries())
    names.insert(names.end(), entry.names.begin(), entry.names.end());
  return names;
}

NamedPreTokenizer pre_tokenizer_for_gguf(std::string_view pre) {
  for (const Entry& entry : entries()) {
    if (std::find(entry.names.begin(), entry.names.end(), pre) == entry.names.end()) continue;
    NamedPreTokenizer result;
    result.ignore_merges = entry.ignore_merges;
    result.adds_bos = entry.adds_bos;
    result.forces_bos = entry.forces_bos;
    result.newline_runs_whole = entry.newline_runs_whole;
    const RegexDialect dialect =
        entry.special == Special::kTiktoken ? RegexDialect::kRustRegex : RegexDialect::kOniguruma;
    if (entry.special == Special::kTiktoken) {
      result.pre_tokenizer.add_tiktoken_chunks();
      result.merges_by_rank = true;
    }
    if (entry.special == Special::kWhitespace) result.pre_tokenizer.add_split(whitespace_split());
    for (std::string_view pattern : entry.patterns) {
      result.pre_tokenizer.add_split(RegexSplit(pattern, SplitBehavior::kIsolated, false, dialect));
    }
    if (entry.special == Special::kSpaceMarks || entry.special == Special::kWhitespace) {
      result.byte_level = false;
      result.escapes_spaces = entry.special == Special::kSpaceMarks;
    } else {
      result.pre_tokenizer.add_byte_level_alphabet();
    }
    return result;
  }
  std::string supported;
  for (std::string_view name : gguf_pre_tokenizer_names()) {
    supported += supported.empty() ? "" : ", ";
    supported += name;
  }
  throw std::invalid_argument("its pre-tokenizer \"" + std::string(pre) +
                              "\" is not supported; Tandem knows " + supported);
}

}  // namespace tandem::text
