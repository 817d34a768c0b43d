#include "engine/hub/gguf_quantizations.h"

#include <algorithm>
#include <map>
#include <regex>

namespace tandem::hub {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// llama.cpp's quantisation names (and unsloth's "UD-" dynamic ones) at the end of a name,
// after a separator: Q4_K_M, Q8_0, IQ2_XXS, TQ1_0, BF16, F16, F32, MXFP4(_MOE).
const std::regex& label_at_end() {
  static const std::regex r(
      R"((?:^|[-_.])((?:UD-)?(?:I?Q[1-8](?:_[0-9A-Z]+)*|TQ[12]_0|BF16|F16|F32|MXFP4(?:_MOE)?))$)",
      std::regex::icase);
  return r;
}

// "NAME-00001-of-00003" -> "NAME" and part 1 of 3; other stems are part 1 of 1.
std::string without_split_suffix(const std::string& stem, int& part) {
  static const std::regex split(R"(^(.*)-(\d{5})-of-(\d{5})$)");
  std::smatch m;
  if (std::regex_match(stem, m, split)) {
    part = std::stoi(m[2].str());
    return m[1].str();
  }
  part = 1;
  return stem;
}

}  // namespace

std::string gguf_quantization_label(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string stem = file.substr(0, file.size() - (ends_with(lower(file), ".gguf") ? 5 : 0));
  int part = 1;
  stem = without_split_suffix(stem, part);
  std::smatch m;
  if (std::regex_search(stem, m, label_at_end())) return m[1].str();
  // A split set in a folder named after its quantisation ("Q4_K_M/model-00001-of-00003").
  if (slash != std::string::npos) {
    const std::string folder = path.substr(0, slash);
    const std::size_t up = folder.rfind('/');
    const std::string last = up == std::string::npos ? folder : folder.substr(up + 1);
    if (std::regex_search(last, m, label_at_end())) return m[1].str();
  }
  return stem;
}

std::vector<GgufQuantization> gguf_quantizations(const std::vector<RepoFile>& files) {
  // Keyed by the label and the folder, so that two folders' sets of one label stay apart.
  std::map<std::string, GgufQuantization> by_key;
  std::map<std::string, std::map<int, const RepoFile*>> parts;
  for (const RepoFile& f : files) {
    const std::string name = lower(f.path);
    if (!ends_with(name, ".gguf")) continue;
    const std::size_t slash = f.path.rfind('/');
    const std::string file = lower(slash == std::string::npos ? f.path : f.path.substr(slash + 1));
    if (file.find("mmproj") != std::string::npos || file.find("imatrix") != std::string::npos)
      continue;
    const std::string label = gguf_quantization_label(f.path);
    const std::string folder = slash == std::string::npos ? "" : f.path.substr(0, slash);
    int part = 1;
    without_split_suffix(file.substr(0, file.size() - 5), part);
    const std::string key = lower(label) + "|" + folder;
    GgufQuantization& q = by_key[key];
    q.name = label;
    q.bytes += f.size;
    parts[key][part] = &f;
  }
  std::vector<GgufQuantization> out;
  for (auto& [key, q] : by_key) {
    for (const auto& [part, file] : parts[key]) {
      q.files.push_back(file->path);
      q.file_bytes.push_back(file->size);
    }
    out.push_back(std::move(q));
  }
  std::sort(out.begin(), out.end(), [](const GgufQuantization& a, const GgufQuantization& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.name < b.name;
  });
  return out;
}

}  // namespace tandem::hub
