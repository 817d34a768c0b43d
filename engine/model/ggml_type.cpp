#include "engine/model/ggml_type.h"

#include <array>

namespace tandem::model {

namespace {

struct TypeEntry {
  std::uint32_t id;
  GgmlTypeLayout layout;
};

// Numbers and block sizes follow ggml's type table; ids 4 and 5 (Q4_2, Q4_3) and 31-33
// were removed from ggml and never appear in current files.
constexpr std::array kTypes = {
    TypeEntry{0, {"F32", 1, 4}},         TypeEntry{1, {"F16", 1, 2}},
    TypeEntry{2, {"Q4_0", 32, 18}},      TypeEntry{3, {"Q4_1", 32, 20}},
    TypeEntry{6, {"Q5_0", 32, 22}},      TypeEntry{7, {"Q5_1", 32, 24}},
    TypeEntry{8, {"Q8_0", 32, 34}},      TypeEntry{9, {"Q8_1", 32, 36}},
    TypeEntry{10, {"Q2_K", 256, 84}},    TypeEntry{11, {"Q3_K", 256, 110}},
    TypeEntry{12, {"Q4_K", 256, 144}},   TypeEntry{13, {"Q5_K", 256, 176}},
    TypeEntry{14, {"Q6_K", 256, 210}},   TypeEntry{15, {"Q8_K", 256, 292}},
    TypeEntry{16, {"IQ2_XXS", 256, 66}}, TypeEntry{17, {"IQ2_XS", 256, 74}},
    TypeEntry{18, {"IQ3_XXS", 256, 98}}, TypeEntry{19, {"IQ1_S", 256, 50}},
    TypeEntry{20, {"IQ4_NL", 32, 18}},   TypeEntry{21, {"IQ3_S", 256, 110}},
    TypeEntry{22, {"IQ2_S", 256, 82}},   TypeEntry{23, {"IQ4_XS", 256, 136}},
    TypeEntry{24, {"I8", 1, 1}},         TypeEntry{25, {"I16", 1, 2}},
    TypeEntry{26, {"I32", 1, 4}},        TypeEntry{27, {"I64", 1, 8}},
    TypeEntry{28, {"F64", 1, 8}},        TypeEntry{29, {"IQ1_M", 256, 56}},
    TypeEntry{30, {"BF16", 1, 2}},       TypeEntry{34, {"TQ1_0", 256, 54}},
    TypeEntry{35, {"TQ2_0", 256, 66}},   TypeEntry{39, {"MXFP4", 32, 17}},
};

}  // namespace

std::optional<GgmlTypeLayout> ggml_type_layout(std::uint32_t ggml_type) {
  for (const TypeEntry& entry : kTypes) {
    if (entry.id == ggml_type) return entry.layout;
  }
  return std::nullopt;
}

}  // namespace tandem::model
