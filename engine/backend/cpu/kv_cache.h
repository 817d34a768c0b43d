// Keys and values of the tokens seen so far, per layer, in fp32, BF16 or 8 bits (KvCacheFormat; the
// layouts are the attention kernels', kernels/cpu/attention/attention.h). For multi-head latent
// attention only the compressed latent and the shared rotary key are kept (MLA-aware). A
// gated DeltaNet layer (Qwen3-Next) keeps no keys or values but its state after the last
// token: the convolution's last inputs and the recurrent matrix of every value head. That
// state cannot go back to an earlier position; a snapshot of it, taken at one position,
// can be restored (the session's last prompt, for a regenerated reply or a turn whose
// history the template rewrote).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/huge_pages.h"

namespace tandem::backend {

class KvCache {
 public:
  KvCache(const model::ModelSpec& spec, std::int64_t capacity_tokens,
          KvCacheFormat format = KvCacheFormat::F32);

  KvCacheFormat format() const { return format_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t size() const { return size_; }
  // Forgets every token from `tokens` on (a new turn that diverges, an edited message).
  void truncate(std::int64_t tokens);
  void set_size(std::int64_t tokens) { size_ = tokens; }
  std::uint64_t bytes() const;
  // Why `spec`'s keys and values cannot be kept in `format`, as a sentence that says what to
  // use instead; empty when they can.
  static std::string refusal(const model::ModelSpec& spec, KvCacheFormat format);
  // What a cache for `spec` and `capacity_tokens` holds.
  static std::uint64_t bytes_for(const model::ModelSpec& spec, std::int64_t capacity_tokens,
                                 KvCacheFormat format = KvCacheFormat::F32);

  // Standard attention. Keys are kept per KV head in the attention kernel's tiles
  // (kernels/cpu/attention/attention.h: 16 positions x head_dim, transposed); values row-major,
  // [kv_heads * head_dim] per position (BF16: per KV head, [head_dim] per position with pairs
  // of positions interleaved). The fp32
  // accessors are for an F32 cache, bf16_head for a BF16 one.
  void store_key(std::int64_t layer, std::int64_t pos, const float* k);
  void store_value(std::int64_t layer, std::int64_t pos, const float* v);
  kernels::Bf16Kv bf16_head(std::int64_t layer, std::int64_t kv_head) const;
  const float* tiled_keys(std::int64_t layer, std::int64_t kv_head) const {
    return &keys_[l(layer)][static_cast<std::size_t>(kv_head) * head_keys_];
  }
  float* value(std::int64_t layer, std::int64_t pos) {
    return &values_[l(layer)][off(pos, value_row_)];
  }
  // MLA: the normalised latent [kv_lora_rank] per position (what the heads weigh), and the
  // keys every head scores against, the latent followed by the rotary key, in the attention
  // kernel's tiles.
  void store_latent(std::int64_t layer, std::int64_t pos, const float* latent,
                    const float* rope_key);
  const float* latent(std::int64_t layer, std::int64_t pos) const {
    return &keys_[l(layer)][off(pos, key_row_)];
  }
  const float* latent_tiled_keys(std::int64_t layer) const { return latent_keys_[l(layer)].data(); }
  // The same in a BF16 cache: keys [latent | rotary], values the latent.
  kernels::Bf16Kv bf16_latent(std::int64_t layer) const;
  // An 8-bit cache's head, and its latent (keys [latent | rotary], values the latent).
  kernels::Int8Kv int8_head(std::int64_t layer, std::int64_t kv_head) const;
  kernels::Int8Kv int8_latent(std::int64_t layer) const;

  // Gated DeltaNet: the last (kernel - 1) convolution inputs, oldest first ([kernel - 1] x
  // channels), and the recurrent state ([value heads][key dim][value dim]) of `layer`.
  float* conv_state(std::int64_t layer) { return conv_[l(layer)].data(); }
  float* recurrent_state(std::int64_t layer) { return recurrent_[l(layer)].data(); }
  void clear_recurrent(std::int64_t layer);
  bool has_recurrent() const { return recurrent_bytes_ > 0; }
  // Copies every layer's state aside / back (see the class comment).
  void save_recurrent();
  void restore_recurrent();

 private:
  static std::size_t l(std::int64_t layer) { return static_cast<std::size_t>(layer); }
  std::size_t off(std::int64_t pos, std::int64_t row) const {
    return static_cast<std::size_t>(pos * row);
  }

  std::int64_t capacity_;
  KvCacheFormat format_;
  std::int64_t size_ = 0;
  std::int64_t key_row_;
  std::int64_t head_dim_ = 0;
  std::int64_t kv_heads_ = 0;
  std::int64_t value_row_;
  std::size_t head_keys_ = 0;                    // floats of one KV head's tiled keys
  std::int64_t latent_rank_ = 0, rope_dim_ = 0;  // MLA
  // What a decoded token reads whole, in huge pages (kernels/cpu/huge_pages.h).
  template <class T>
  using Rows = std::vector<T, kernels::HugePageAllocator<T>>;
  std::vector<Rows<float>> keys_;
  std::vector<Rows<float>> values_;
  std::vector<Rows<float>> latent_keys_;  // MLA
  // A BF16 cache's keys (or MLA's latent keys) and values (or latents), per layer.
  std::vector<Rows<std::uint16_t>> keys16_, values16_;
  // An 8-bit cache's, per layer (per KV head within: keys, key scales, values, value scales).
  std::vector<Rows<std::uint8_t>> keys8_;
  std::vector<Rows<std::int8_t>> values8_;
  std::vector<std::vector<float>> key_scales_, value_scales_;
  std::size_t head_key_scales_ = 0, head_values8_ = 0, head_value_scales_ = 0;
  std::int64_t value_scale_stride_ = 0;
  std::vector<std::vector<float>> conv_, recurrent_;  // gated DeltaNet layers
  std::vector<std::vector<float>> saved_conv_, saved_recurrent_;
  std::uint64_t recurrent_bytes_ = 0;
};

}  // namespace tandem::backend
