// A model's next-token distributions over a text, saved by `tandem perplexity --save-logits`
// so that another model's KL divergence from them is measured later, without both models in
// memory at once (a BF16 original beside its INT8 copy is three times the INT8 model's RAM).
//
// Each predicted token keeps the log probability of every token in the vocabulary in FP16:
// 2 bytes a token of the vocabulary, so 300 KiB a predicted token at 150k (2.2 GiB for a text
// of 7 600 tokens). Keeping only the likeliest 256 would take 2 KiB, but on SmolLM2-135M the
// tokens past them carry 7% of INT8's KL divergence: a figure too small by that much, which
// looks right (docs/benchmarks.md, "KL divergence from saved distributions").
//
// File: "TNDMDIST", a little-endian u32 length, that many bytes of JSON (what was measured,
// and how), then one record per predicted token in order: the largest log probability (f32),
// then every token's below it (FP16, vocab of them).
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "engine/text/tokenizer.h"

namespace tandem::measure {

// What a file was measured on; a later measurement must match it to compare.
struct DistributionHeader {
  std::int64_t vocab = 0;
  std::int64_t context = 0;           // tokens per window
  std::int64_t text_tokens = 0;       // the whole text
  std::int64_t evaluated_tokens = 0;  // the records
  std::string ids_digest;             // of the text's token ids (FNV-1a, hex)
  std::string model;                  // what was measured, and how: said with the divergence
  std::string cpu_format, kv_cache;
};

// The digest a header keeps of a text's token ids.
std::string digest_ids(std::span<const text::TokenId> ids);

// Writes under `path + ".part"` and renames into place at finish(); a writer destroyed
// before finish() removes the part. Throws std::runtime_error with a sentence when the file
// cannot be written.
class DistributionWriter {
 public:
  DistributionWriter(std::string path, const DistributionHeader& header);
  ~DistributionWriter();
  DistributionWriter(const DistributionWriter&) = delete;
  DistributionWriter& operator=(const DistributionWriter&) = delete;

  // One predicted token's log probabilities over the whole vocabulary.
  void add(const std::vector<double>& log_probabilities);
  void finish();

 private:
  void write(const void* data, std::size_t bytes);
  std::string path_, part_;
  std::FILE* file_ = nullptr;
  std::int64_t written_ = 0, expected_ = 0;
  std::vector<std::uint16_t> record_;
};

// Reads a file written so, one record at a time. Throws std::runtime_error with a sentence
// for a file that is not one, or is cut short.
class DistributionReader {
 public:
  explicit DistributionReader(std::string path);
  ~DistributionReader();
  DistributionReader(const DistributionReader&) = delete;
  DistributionReader& operator=(const DistributionReader&) = delete;

  const DistributionHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // KL(saved || model) for the next record, given the model's log probabilities over the
  // whole vocabulary.
  double next_kl(const std::vector<double>& log_q);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  DistributionHeader header_;
  std::int64_t read_ = 0;
  std::vector<std::uint16_t> record_;
  std::vector<double> values_;
};

}  // namespace tandem::measure
