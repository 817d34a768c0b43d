#include "engine/backend/cpu/kv_cache.h"

#include <algorithm>

namespace tandem::backend {

KvCache::KvCache(const model::ModelSpec& spec, std::int64_t capacity_tokens)
    : capacity_(capacity_tokens) {
  if (spec.mla) {
    key_row_ = spec.kv_lora_rank;
    value_row_ = 0;
    latent_rank_ = spec.kv_lora_rank;
    rope_dim_ = spec.qk_rope_head_dim;
  } else {
    key_row_ = spec.num_kv_heads * spec.head_dim;
    value_row_ = key_row_;
    head_dim_ = spec.head_dim;
    kv_heads_ = spec.num_kv_heads;
  }
  keys_.resize(static_cast<std::size_t>(spec.num_layers));
  values_.resize(static_cast<std::size_t>(spec.num_layers));
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    keys_[i].assign(static_cast<std::size_t>(capacity_ * key_row_), 0.0f);
    values_[i].assign(static_cast<std::size_t>(capacity_ * value_row_), 0.0f);
  }
  if (spec.mla) {
    latent_keys_.resize(keys_.size());
    for (auto& k : latent_keys_)
      k.assign(static_cast<std::size_t>(capacity_ * (latent_rank_ + rope_dim_)), 0.0f);
  }
}

void KvCache::store_latent(std::int64_t layer, std::int64_t pos, const float* latent,
                           const float* rope_key) {
  std::copy_n(latent, latent_rank_, &keys_[l(layer)][off(pos, key_row_)]);
  float* t = latent_keys_[l(layer)].data();
  for (std::int64_t i = 0; i < latent_rank_; ++i) t[i * capacity_ + pos] = latent[i];
  for (std::int64_t i = 0; i < rope_dim_; ++i)
    t[(latent_rank_ + i) * capacity_ + pos] = rope_key[i];
}

void KvCache::store_key(std::int64_t layer, std::int64_t pos, const float* k) {
  float* base = keys_[l(layer)].data();
  for (std::int64_t i = 0; i < kv_heads_ * head_dim_; ++i) base[i * capacity_ + pos] = k[i];
}

void KvCache::truncate(std::int64_t tokens) {
  size_ = std::clamp<std::int64_t>(tokens, 0, size_);
}

std::uint64_t KvCache::bytes() const {
  return static_cast<std::uint64_t>(keys_.size()) * static_cast<std::uint64_t>(capacity_) *
         static_cast<std::uint64_t>(key_row_ + value_row_ +
                                    (latent_keys_.empty() ? 0 : latent_rank_ + rope_dim_)) *
         sizeof(float);
}

std::uint64_t KvCache::bytes_for(const model::ModelSpec& spec, std::int64_t capacity_tokens) {
  const std::int64_t per_position = spec.mla ? 2 * spec.kv_lora_rank + spec.qk_rope_head_dim
                                             : 2 * spec.num_kv_heads * spec.head_dim;
  return static_cast<std::uint64_t>(spec.num_layers) * static_cast<std::uint64_t>(capacity_tokens) *
         static_cast<std::uint64_t>(per_position) * sizeof(float);
}

}  // namespace tandem::backend
