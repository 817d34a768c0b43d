#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "engine/text/byte_level.h"
#include "engine/text/utf8.h"

namespace tandem::text {

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

RegexSplit::RegexSplit(TokenizerRegex regex, SplitBehavior behavior, bool invert)
    : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

RegexSplit::RegexSplit(std::string_view pattern, SplitBehavior behavior, bool invert,
                       RegexDialect dialect)
    : RegexSplit(TokenizerRegex(pattern, dialect), behavior, invert) {}

RegexSplit RegexSplit::literal(std::string_view text, SplitBehavior behavior, bool invert) {
  return RegexSplit(TokenizerRegex::literal(text), behavior, invert);
}

std::vector<RegexSplit::Span> RegexSplit::split(std::string_view text) const {
  struct Segment {
    std::size_t begin, end;
    bool is_match;
  };
  // Matches and the gaps between them, as Hugging Face's find_matches lists them: an empty
  // match is a segment of its own, which matters to the merging behaviours.
  std::vector<Segment> segments;
  std::size_t gap_begin = 0;
  for (const RegexMatch& match : regex_.find_all(text)) {
    if (match.begin > gap_begin) segments.push_back({gap_begin, match.begin, invert_});
    segments.push_back({match.begin, match.end, !invert_});
    gap_begin = match.end;
  }
  if (gap_begin < text.size()) segments.push_back({gap_begin, text.size(), invert_});

  // Folds the segments into words with Hugging Face's definitions: merging looks only at
  // whether the neighbouring segment matched, so two adjacent matches join only under
  // kContiguous (which also joins adjacent gaps, which arise with `invert`).
  std::vector<Span> words;
  bool previous_match = false;
  switch (behavior_) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) words.push_back({s.begin, s.end});
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) words.push_back({s.begin, s.end});
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !words.empty())
          words.back().end = s.end;
        else
          words.push_back({s.begin, s.end});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !words.empty())
          words.back().begin = it->begin;
        else
          words.push_back({it->begin, it->end});
        previous_match = it->is_match;
      }
      std::reverse(words.begin(), words.end());
      break;
    case SplitBehavior::kContiguous:
      for (std::size_t i = 0; i < segments.size(); ++i) {
        if (i > 0 && segments[i].is_match == previous_match)
          words.back().end = segments[i].end;
        else
          words.push_back({segments[i].begin, segments[i].end});
        previous_match = segments[i].is_match;
      }
      break;
  }
  std::erase_if(words, [](const Span& span) { return span.end == span.begin; });
  return words;
}

namespace {

// Rust's char::is_alphanumeric-based \w and char::is_whitespace, as PCRE2 classes.
constexpr char kWordClass[] = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])";
// Hugging Face's is_punc: char::is_ascii_punctuation or a Unicode punctuation category.
constexpr char kPunctuationClass[] = R"([\p{P}!-/:-@\[-`{-~])";

}  // namespace

RegexSplit whitespace_words() {
  // Hugging Face keeps the matches of \w+|[^\w\s]+ and drops what lies between them.
  const std::string pattern = std::string(kWordClass) +
                              R"(+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})" +
                              R"(\p{White_Space}]+)";
  return RegexSplit(TokenizerRegex(pattern, RegexDialect::kPcre2), SplitBehavior::kRemoved, true);
}

RegexSplit whitespace_split() {
  return RegexSplit(TokenizerRegex(R"(\p{White_Space})", RegexDialect::kPcre2),
                    SplitBehavior::kRemoved);
}

RegexSplit digits_split(bool individual_digits) {
  // char::is_numeric: every N category, each digit a match of its own.
  return RegexSplit(TokenizerRegex(R"(\p{N})", RegexDialect::kPcre2),
                    individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
}

RegexSplit punctuation_split(SplitBehavior behavior) {
  return RegexSplit(TokenizerRegex(kPunctuationClass, RegexDialect::kPcre2), behavior);
}

RegexSplit char_delimiter_split(std::string_view delimiter) {
  return RegexSplit::literal(delimiter, SplitBehavior::kRemoved);
}

namespace {

// A word and whether it begins the whole input.
struct Word {
  std::string text;
  bool at_origin;
};

std::size_t character_length(std::string_view text, std::size_t at) {
  std::size_t length = utf8_sequence_length(static_cast<unsigned char>(text[at]));
  if (length == 0 || at + length > text.size()) length = 1;
  return length;
}

// Python's str.isspace(): general category Zs or bidirectional class WS, B or S.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The scripts of Hugging Face's UnicodeScripts table; code points it does not list (and
// scripts added to Unicode after it) belong to every script, as spaces do.
constexpr const char* kScriptNames[] = {"Adlam",
                                        "Ahom",
                                        "Anatolian_Hieroglyphs",
                                        "Arabic",
                                        "Armenian",
                                        "Avestan",
                                        "Balinese",
                                        "Bamum",
                                        "Bassa_Vah",
                                        "Batak",
                                        "Bengali",
                                        "Bhaiksuki",
                                        "Bopomofo",
                                        "Brahmi",
                                        "Braille",
                                        "Buginese",
                                        "Buhid",
                                        "Canadian_Aboriginal",
                                        "Carian",
                                        "Caucasian_Albanian",
                                        "Chakma",
                                        "Cham",
                                        "Cherokee",
                                        "Common",
                                        "Coptic",
                                        "Cuneiform",
                                        "Cypriot",
                                        "Cyrillic",
                                        "Deseret",
                                        "Devanagari",
                                        "Dogra",
                                        "Duployan",
                                        "Egyptian_Hieroglyphs",
                                        "Elbasan",
                                        "Ethiopic",
                                        "Georgian",
                                        "Glagolitic",
                                        "Gothic",
                                        "Grantha",
                                        "Greek",
                                        "Gujarati",
                                        "Gunjala_Gondi",
                                        "Gurmukhi",
                                        "Han",
                                        "Hangul",
                                        "Hanifi_Rohingya",
                                        "Hanunoo",
                                        "Hatran",
                                        "Hebrew",
                                        "Hiragana",
                                        "Imperial_Aramaic",
                                        "Inherited",
                                        "Inscriptional_Pahlavi",
                                        "Inscriptional_Parthian",
                                        "Javanese",
                                        "Kaithi",
                                        "Kannada",
                                        "Katakana",
                                        "Kayah_Li",
                                        "Kharoshthi",
                                        "Khmer",
                                        "Khojki",
                                        "Khudawadi",
                                        "Lao",
                                        "Latin",
                                        "Lepcha",
                                        "Limbu",
                                        "Linear_A",
                                        "Linear_B",
                                        "Lisu",
                                        "Lycian",
                                        "Lydian",
                                        "Mahajani",
                                        "Makasar",
                                        "Malayalam",
                                        "Mandaic",
                                        "Manichaean",
                                        "Marchen",
                                        "Masaram_Gondi",
                                        "Medefaidrin",
                                        "Meetei_Mayek",
                                        "Mende_Kikakui",
                                        "Meroitic_Cursive",
                                        "Meroitic_Hieroglyphs",
                                        "Miao",
                                        "Modi",
                                        "Mongolian",
                                        "Mro",
                                        "Multani",
                                        "Myanmar",
                                        "Nabataean",
                                        "New_Tai_Lue",
                                        "Newa",
                                        "Nko",
                                        "Nushu",
                                        "Ogham",
                                        "Ol_Chiki",
                                        "Old_Hungarian",
                                        "Old_Italic",
                                        "Old_North_Arabian",
                                        "Old_Permic",
                                        "Old_Persian",
                                        "Old_Sogdian",
                                        "Old_South_Arabian",
                                        "Old_Turkic",
                                        "Oriya",
                                        "Osage",
                                        "Osmanya",
                                        "Pahawh_Hmong",
                                        "Palmyrene",
                                        "Pau_Cin_Hau",
                                        "Phags_Pa",
                                        "Phoenician",
                                        "Psalter_Pahlavi",
                                        "Rejang",
                                        "Runic",
                                        "Samaritan",
                                        "Saurashtra",
                                        "Sharada",
                                        "Shavian",
                                        "Siddham",
                                        "SignWriting",
                                        "Sinhala",
                                        "Sogdian",
                                        "Sora_Sompeng",
                                        "Soyombo",
                                        "Sundanese",
                                        "Syloti_Nagri",
                                        "Syriac",
                                        "Tagalog",
                                        "Tagbanwa",
                                        "Tai_Le",
                                        "Tai_Tham",
                                        "Tai_Viet",
                                        "Takri",
                                        "Tamil",
                                        "Tangut",
                                        "Telugu",
                                        "Thaana",
                                        "Thai",
                                        "Tibetan",
                                        "Tifinagh",
                                        "Tirhuta",
                                        "Ugaritic",
                                        "Vai",
                                        "Warang_Citi",
                                        "Yi",
                                        "Zanabazar_Square"};

// Code points Unicode has given a script since Hugging Face's table was made: the table
// says "any" for them, and so does Tandem.
struct CodepointRange {
  char32_t first, last;
};
constexpr CodepointRange kUnlistedInScriptTable[] = {
    {0x560, 0x560},      {0x588, 0x588},     {0x5EF, 0x5EF},     {0x61D, 0x61D},
    {0x7FD, 0x7FF},      {0x860, 0x86A},     {0x870, 0x88E},     {0x890, 0x891},
    {0x898, 0x89F},      {0x8B5, 0x8B5},     {0x8BE, 0x8D3},     {0x9FC, 0x9FE},
    {0xA76, 0xA76},      {0xAFA, 0xAFF},     {0xB55, 0xB55},     {0xC04, 0xC04},
    {0xC3C, 0xC3C},      {0xC5D, 0xC5D},     {0xC77, 0xC77},     {0xC84, 0xC84},
    {0xCDD, 0xCDD},      {0xD00, 0xD00},     {0xD04, 0xD04},     {0xD3B, 0xD3C},
    {0xD81, 0xD81},      {0xE86, 0xE86},     {0xE89, 0xE89},     {0xE8C, 0xE8C},
    {0xE8E, 0xE93},      {0xE98, 0xE98},     {0xEA0, 0xEA0},     {0xEA8, 0xEA9},
    {0xEAC, 0xEAC},      {0xEBA, 0xEBA},     {0x170D, 0x170D},   {0x1715, 0x1715},
    {0x171F, 0x171F},    {0x180F, 0x180F},   {0x1878, 0x1878},   {0x1ABF, 0x1ACE},
    {0x1B4C, 0x1B4C},    {0x1B7D, 0x1B7E},   {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},
    {0x1CF7, 0x1CF7},    {0x1CFA, 0x1CFA},   {0x1DF6, 0x1DFA},   {0x20BF, 0x20C0},
    {0x23FF, 0x23FF},    {0x2B97, 0x2B97},   {0x2BBA, 0x2BBC},   {0x2BC9, 0x2BC9},
    {0x2BD2, 0x2BEB},    {0x2BF0, 0x2BFF},   {0x2C2F, 0x2C2F},   {0x2C5F, 0x2C5F},
    {0x2E45, 0x2E5D},    {0x312E, 0x312F},   {0x31BB, 0x31BF},   {0x32FF, 0x32FF},
    {0x4DB6, 0x4DBF},    {0x9FD6, 0x9FFF},   {0xA7AF, 0xA7AF},   {0xA7B8, 0xA7CA},
    {0xA7D0, 0xA7D1},    {0xA7D3, 0xA7D3},   {0xA7D5, 0xA7D9},   {0xA7F2, 0xA7F6},
    {0xA82C, 0xA82C},    {0xA8FE, 0xA8FF},   {0xAB66, 0xAB6B},   {0xE000, 0xF8FF},
    {0xFBC2, 0xFBC2},    {0xFD40, 0xFD4F},   {0xFDCF, 0xFDCF},   {0xFDFE, 0xFDFF},
    {0x1019C, 0x1019C},  {0x1032D, 0x1032F}, {0x10570, 0x1057A}, {0x1057C, 0x1058A},
    {0x1058C, 0x10592},  {0x10594, 0x10595}, {0x10597, 0x105A1}, {0x105A3, 0x105B1},
    {0x105B3, 0x105B9},  {0x105BB, 0x105BC}, {0x10780, 0x10785}, {0x10787, 0x107B0},
    {0x107B2, 0x107BA},  {0x10A34, 0x10A35}, {0x10A48, 0x10A48}, {0x10D00, 0x10D27},
    {0x10D30, 0x10D39},  {0x10E80, 0x10EA9}, {0x10EAB, 0x10EAD}, {0x10EB0, 0x10EB1},
    {0x10F00, 0x10F27},  {0x10F30, 0x10F59}, {0x10F70, 0x10F89}, {0x10FB0, 0x10FCB},
    {0x10FE0, 0x10FF6},  {0x11070, 0x11075}, {0x110C2, 0x110C2}, {0x110CD, 0x110CD},
    {0x11144, 0x11147},  {0x111CE, 0x111CF}, {0x1133B, 0x1133B}, {0x1145A, 0x1145A},
    {0x1145E, 0x11461},  {0x116B8, 0x116B9}, {0x1171A, 0x1171A}, {0x11740, 0x11746},
    {0x11800, 0x1183B},  {0x11900, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913},
    {0x11915, 0x11916},  {0x11918, 0x11935}, {0x11937, 0x11938}, {0x1193B, 0x11946},
    {0x11950, 0x11959},  {0x119A0, 0x119A7}, {0x119AA, 0x119D7}, {0x119DA, 0x119E4},
    {0x11A00, 0x11A47},  {0x11A50, 0x11AA2}, {0x11AB0, 0x11ABF}, {0x11D00, 0x11D06},
    {0x11D08, 0x11D09},  {0x11D0B, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D},
    {0x11D3F, 0x11D47},  {0x11D50, 0x11D59}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68},
    {0x11D6A, 0x11D8E},  {0x11D90, 0x11D91}, {0x11D93, 0x11D98}, {0x11DA0, 0x11DA9},
    {0x11EE0, 0x11EF8},  {0x11FB0, 0x11FB0}, {0x11FC0, 0x11FF1}, {0x11FFF, 0x11FFF},
    {0x12F90, 0x12FF2},  {0x13430, 0x13438}, {0x16A70, 0x16ABE}, {0x16AC0, 0x16AC9},
    {0x16E40, 0x16E9A},  {0x16F45, 0x16F4A}, {0x16F4F, 0x16F4F}, {0x16F7F, 0x16F87},
    {0x16FE1, 0x16FE4},  {0x16FF0, 0x16FF1}, {0x187ED, 0x187F7}, {0x18AF3, 0x18CD5},
    {0x18D00, 0x18D08},  {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE},
    {0x1B002, 0x1B122},  {0x1B150, 0x1B152}, {0x1B164, 0x1B167}, {0x1B170, 0x1B2FB},
    {0x1CF00, 0x1CF2D},  {0x1CF30, 0x1CF46}, {0x1CF50, 0x1CFC3}, {0x1D1E9, 0x1D1EA},
    {0x1D2E0, 0x1D2F3},  {0x1D372, 0x1D378}, {0x1DF00, 0x1DF1E}, {0x1E100, 0x1E12C},
    {0x1E130, 0x1E13D},  {0x1E140, 0x1E149}, {0x1E14E, 0x1E14F}, {0x1E290, 0x1E2AE},
    {0x1E2C0, 0x1E2F9},  {0x1E2FF, 0x1E2FF}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB},
    {0x1E7ED, 0x1E7EE},  {0x1E7F0, 0x1E7FE}, {0x1E94B, 0x1E94B}, {0x1EC71, 0x1ECB4},
    {0x1ED01, 0x1ED3D},  {0x1F10D, 0x1F10F}, {0x1F12F, 0x1F12F}, {0x1F16C, 0x1F16F},
    {0x1F1AD, 0x1F1AD},  {0x1F260, 0x1F265}, {0x1F6D3, 0x1F6D7}, {0x1F6DD, 0x1F6DF},
    {0x1F6F7, 0x1F6FC},  {0x1F7D5, 0x1F7D8}, {0x1F7E0, 0x1F7EB}, {0x1F7F0, 0x1F7F0},
    {0x1F8B0, 0x1F8B1},  {0x1F900, 0x1F90F}, {0x1F91F, 0x1F91F}, {0x1F928, 0x1F92F},
    {0x1F931, 0x1F932},  {0x1F93F, 0x1F93F}, {0x1F94C, 0x1F94F}, {0x1F95F, 0x1F97F},
    {0x1F992, 0x1F9BF},  {0x1F9C1, 0x1FA53}, {0x1FA60, 0x1FA6D}, {0x1FA70, 0x1FA74},
    {0x1FA78, 0x1FA7C},  {0x1FA80, 0x1FA86}, {0x1FA90, 0x1FAAC}, {0x1FAB0, 0x1FABA},
    {0x1FAC0, 0x1FAC5},  {0x1FAD0, 0x1FAD9}, {0x1FAE0, 0x1FAE7}, {0x1FAF0, 0x1FAF6},
    {0x1FB00, 0x1FB92},  {0x1FB94, 0x1FBCA}, {0x1FBF0, 0x1FBF9}, {0x2A6D7, 0x2A6DF},
    {0x2B735, 0x2B738},  {0x2CEB0, 0x2EBE0}, {0x30000, 0x3134A}, {0xF0000, 0xFFFFD},
    {0x100000, 0x10FFFD}};

bool unlisted_in_script_table(char32_t c) {
  const auto* end = std::end(kUnlistedInScriptTable);
  const auto* it = std::upper_bound(
      std::begin(kUnlistedInScriptTable), end, c,
      [](char32_t value, const CodepointRange& range) { return value < range.first; });
  return it != std::begin(kUnlistedInScriptTable) && c <= (it - 1)->last;
}

// Finds a code point's script with one anchored match of an alternation of the scripts'
// Script (not Script_Extensions) properties; the number of the group that matched is the
// script.
class ScriptClassifier {
 public:
  static constexpr int kAny = -1;

  ScriptClassifier() {
    std::string pattern;
    for (const char* name : kScriptNames) {
      if (!pattern.empty()) pattern += '|';
      pattern += std::string("(\\p{sc=") + name + "})";
    }
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_ANCHORED, &error, &offset, nullptr);
    if (code_ == nullptr) throw std::logic_error("the script classifier does not compile");
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
    for (std::size_t i = 0; i < std::size(kScriptNames); ++i) {
      const std::string_view name = kScriptNames[i];
      if (name == "Han") han_ = static_cast<int>(i);
      if (name == "Hiragana") hiragana_ = static_cast<int>(i);
      if (name == "Katakana") katakana_ = static_cast<int>(i);
    }
  }
  ~ScriptClassifier() { pcre2_code_free(code_); }

  using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
  MatchData match_data() const {
    MatchData data(pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    if (!data) throw std::bad_alloc();
    return data;
  }

  // Hugging Face's fixed_script.
  int script_of(std::string_view character, char32_t codepoint, pcre2_match_data* data) const {
    if (codepoint == 0x30FC) return han_;
    if (codepoint == ' ' || unlisted_in_script_table(codepoint)) return kAny;
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(character.data()),
                               character.size(), 0, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc <= 1) return kAny;
    const int script = rc - 2;  // group n is script n - 1; rc is the highest group + 1
    return script == hiragana_ || script == katakana_ ? han_ : script;
  }

 private:
  pcre2_code* code_ = nullptr;
  int han_ = 0, hiragana_ = 0, katakana_ = 0;
};

const ScriptClassifier& script_classifier() {
  static const ScriptClassifier instance;
  return instance;
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind {
    kSplit,
    kPrefixSpace,
    kByteLevelAlphabet,
    kMetaspace,
    kFixedLength,
    kUnicodeScripts,
    kTiktokenChunks,
  } kind;
  std::unique_ptr<RegexSplit> split;  // kSplit, and kMetaspace with split
  MetaspaceOptions metaspace;
  std::size_t length = 0;

  void apply(Word word, std::vector<Word>& out) const;
};

namespace {

void push_pieces(const Word& word, const std::vector<RegexSplit::Span>& spans,
                 std::vector<Word>& out) {
  for (const RegexSplit::Span& span : spans) {
    out.push_back(
        {word.text.substr(span.begin, span.end - span.begin), word.at_origin && span.begin == 0});
  }
}

void split_unicode_scripts(const Word& word, std::vector<Word>& out) {
  const ScriptClassifier& classifier = script_classifier();
  const std::string_view text = word.text;
  // Hugging Face starts a word where the script differs from the last one that was not
  // "any"; text before the first such place is dropped, as the reference does.
  std::vector<std::size_t> starts;
  const auto match_data = classifier.match_data();
  bool have_last = false;
  int last = ScriptClassifier::kAny;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = character_length(text, at);
    const int script = classifier.script_of(text.substr(at, length),
                                            utf8_codepoint_at(text, at, length), match_data.get());
    if (script != ScriptClassifier::kAny && (!have_last || last != script)) starts.push_back(at);
    if (script != ScriptClassifier::kAny) {
      last = script;
      have_last = true;
    }
    at += length;
  }
  starts.push_back(text.size());
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    if (starts[i + 1] > starts[i]) {
      out.push_back({std::string(text.substr(starts[i], starts[i + 1] - starts[i])),
                     word.at_origin && starts[i] == 0});
    }
  }
}

void split_tiktoken_chunks(const Word& word, std::vector<Word>& out) {
  constexpr std::size_t kMaxChunkCharacters = 400'000;
  constexpr std::size_t kMaxRunCharacters = 25'000;
  const std::string_view text = word.text;
  std::size_t chunk_begin = 0;
  while (chunk_begin < text.size()) {
    // One chunk of at most kMaxChunkCharacters code points, cut into runs.
    std::size_t at = chunk_begin;
    std::size_t characters = 0;
    std::size_t slice_begin = chunk_begin;
    std::size_t run_length = 0;
    bool run_is_space = false;
    while (at < text.size() && characters < kMaxChunkCharacters) {
      const std::size_t length = character_length(text, at);
      const bool is_space = is_python_space(utf8_codepoint_at(text, at, length));
      if (characters == 0) run_is_space = is_space;
      if (is_space != run_is_space) {
        run_length = 1;
        run_is_space = is_space;
      } else if (++run_length > kMaxRunCharacters) {
        out.push_back({std::string(text.substr(slice_begin, at - slice_begin)),
                       word.at_origin && slice_begin == 0});
        slice_begin = at;
        run_length = 1;
      }
      at += length;
      ++characters;
    }
    if (at > slice_begin) {
      out.push_back({std::string(text.substr(slice_begin, at - slice_begin)),
                     word.at_origin && slice_begin == 0});
    }
    chunk_begin = at;
  }
}

}  // namespace

void PreTokenizer::Step::apply(Word word, std::vector<Word>& out) const {
  switch (kind) {
    case Kind::kSplit:
      push_pieces(word, split->split(word.text), out);
      return;
    case Kind::kPrefixSpace:
      if (word.text.front() != ' ') word.text.insert(word.text.begin(), ' ');
      out.push_back(std::move(word));
      return;
    case Kind::kByteLevelAlphabet:
      word.text = to_byte_level(word.text);
      out.push_back(std::move(word));
      return;
    case Kind::kMetaspace: {
      std::string text;
      for (char c : word.text) {
        if (c == ' ')
          text += metaspace.replacement;
        else
          text += c;
      }
      const bool starts_marked = text.starts_with(metaspace.replacement);
      const bool prepend =
          metaspace.prepend == MetaspaceOptions::Prepend::kAlways ||
          (metaspace.prepend == MetaspaceOptions::Prepend::kFirst && word.at_origin);
      if (prepend && !starts_marked) text.insert(0, metaspace.replacement);
      Word marked{std::move(text), word.at_origin};
      if (split) {
        push_pieces(marked, split->split(marked.text), out);
      } else {
        out.push_back(std::move(marked));
      }
      return;
    }
    case Kind::kFixedLength: {
      std::size_t begin = 0;
      while (begin < word.text.size()) {
        std::size_t end = begin;
        for (std::size_t n = 0; n < length && end < word.text.size(); ++n) {
          end += character_length(word.text, end);
        }
        out.push_back({word.text.substr(begin, end - begin), word.at_origin && begin == 0});
        begin = end;
      }
      return;
    }
    case Kind::kUnicodeScripts:
      split_unicode_scripts(word, out);
      return;
    case Kind::kTiktokenChunks:
      split_tiktoken_chunks(word, out);
      return;
  }
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::add_split(RegexSplit split) {
  steps_.push_back({Step::Kind::kSplit, std::make_unique<RegexSplit>(std::move(split)), {}, 0});
}

void PreTokenizer::add_prefix_space() {
  steps_.push_back({Step::Kind::kPrefixSpace, nullptr, {}, 0});
}

void PreTokenizer::add_byte_level_alphabet() {
  steps_.push_back({Step::Kind::kByteLevelAlphabet, nullptr, {}, 0});
}

void PreTokenizer::add_metaspace(MetaspaceOptions options) {
  std::unique_ptr<RegexSplit> split;
  if (options.split) {
    split = std::make_unique<RegexSplit>(
        RegexSplit::literal(options.replacement, SplitBehavior::kMergedWithNext));
  }
  steps_.push_back({Step::Kind::kMetaspace, std::move(split), std::move(options), 0});
}

void PreTokenizer::add_fixed_length(std::size_t characters) {
  if (characters == 0) throw std::invalid_argument("a FixedLength pre-tokenizer of length 0");
  steps_.push_back({Step::Kind::kFixedLength, nullptr, {}, characters});
}

void PreTokenizer::add_unicode_scripts() {
  steps_.push_back({Step::Kind::kUnicodeScripts, nullptr, {}, 0});
}

void PreTokenizer::add_tiktoken_chunks() {
  steps_.push_back({Step::Kind::kTiktokenChunks, nullptr, {}, 0});
}

std::vector<std::string> PreTokenizer::split(std::string_view text, bool at_origin) const {
  std::vector<Word> words;
  if (!text.empty()) words.push_back({std::string(text), at_origin});
  for (const Step& step : steps_) {
    std::vector<Word> next;
    next.reserve(words.size() * 2);
    for (Word& word : words) step.apply(std::move(word), next);
    std::erase_if(next, [](const Word& word) { return word.text.empty(); });
    words = std::move(next);
  }
  std::vector<std::string> result;
  result.reserve(words.size());
  for (Word& word : words) result.push_back(std::move(word.text));
  return result;
}

}  // namespace tandem::text
