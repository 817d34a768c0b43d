#include "engine/backend/cpu/kv_cache.h"

#include <algorithm>

#include "kernels/cpu/attention.h"

namespace tandem::backend {
namespace {

bool linear(const model::ModelSpec& spec, std::size_t layer) {
  return !spec.layer_is_linear.empty() && spec.layer_is_linear[layer];
}
std::int64_t conv_floats(const model::ModelSpec& spec) {
  return (spec.linear_conv_kernel - 1) * spec.linear_conv_channels();
}
std::int64_t recurrent_floats(const model::ModelSpec& spec) {
  return spec.linear_value_heads * spec.linear_key_dim * spec.linear_value_dim;
}
std::int64_t attention_layers(const model::ModelSpec& spec) {
  std::int64_t n = 0;
  for (std::size_t l = 0; l < static_cast<std::size_t>(spec.num_layers); ++l)
    n += linear(spec, l) ? 0 : 1;
  return n;
}

}  // namespace

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
    head_keys_ = kernels::tiled_key_floats(capacity_, head_dim_);
  }
  const auto layers = static_cast<std::size_t>(spec.num_layers);
  keys_.resize(layers);
  values_.resize(layers);
  conv_.resize(layers);
  recurrent_.resize(layers);
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (linear(spec, i)) {
      conv_[i].assign(static_cast<std::size_t>(conv_floats(spec)), 0.0f);
      recurrent_[i].assign(static_cast<std::size_t>(recurrent_floats(spec)), 0.0f);
      recurrent_bytes_ += (conv_[i].size() + recurrent_[i].size()) * sizeof(float);
      continue;
    }
    keys_[i].assign(spec.mla ? static_cast<std::size_t>(capacity_ * key_row_)
                             : static_cast<std::size_t>(kv_heads_) * head_keys_,
                    0.0f);
    values_[i].assign(static_cast<std::size_t>(capacity_ * value_row_), 0.0f);
  }
  if (spec.mla) {
    latent_keys_.resize(keys_.size());
    for (auto& k : latent_keys_)
      k.assign(kernels::tiled_key_floats(capacity_, latent_rank_ + rope_dim_), 0.0f);
  }
}

void KvCache::store_latent(std::int64_t layer, std::int64_t pos, const float* latent,
                           const float* rope_key) {
  std::copy_n(latent, latent_rank_, &keys_[l(layer)][off(pos, key_row_)]);
  float* t = latent_keys_[l(layer)].data();
  const std::int64_t dim = latent_rank_ + rope_dim_;
  for (std::int64_t i = 0; i < latent_rank_; ++i)
    t[kernels::tiled_key_index(pos, i, dim)] = latent[i];
  for (std::int64_t i = 0; i < rope_dim_; ++i)
    t[kernels::tiled_key_index(pos, latent_rank_ + i, dim)] = rope_key[i];
}

void KvCache::store_key(std::int64_t layer, std::int64_t pos, const float* k) {
  for (std::int64_t h = 0; h < kv_heads_; ++h) {
    float* head = keys_[l(layer)].data() + static_cast<std::size_t>(h) * head_keys_;
    for (std::int64_t d = 0; d < head_dim_; ++d)
      head[kernels::tiled_key_index(pos, d, head_dim_)] = k[h * head_dim_ + d];
  }
}

void KvCache::clear_recurrent(std::int64_t layer) {
  std::fill(conv_[l(layer)].begin(), conv_[l(layer)].end(), 0.0f);
  std::fill(recurrent_[l(layer)].begin(), recurrent_[l(layer)].end(), 0.0f);
}

void KvCache::save_recurrent() {
  saved_conv_ = conv_;
  saved_recurrent_ = recurrent_;
}

void KvCache::restore_recurrent() {
  if (saved_conv_.size() != conv_.size()) return;  // nothing saved
  for (std::size_t i = 0; i < conv_.size(); ++i) {
    std::copy(saved_conv_[i].begin(), saved_conv_[i].end(), conv_[i].begin());
    std::copy(saved_recurrent_[i].begin(), saved_recurrent_[i].end(), recurrent_[i].begin());
  }
}

void KvCache::truncate(std::int64_t tokens) {
  size_ = std::clamp<std::int64_t>(tokens, 0, size_);
}

std::uint64_t KvCache::bytes() const {
  std::uint64_t kv = 0;
  for (std::size_t i = 0; i < keys_.size(); ++i) kv += keys_[i].size() + values_[i].size();
  for (const auto& k : latent_keys_) kv += k.size();
  // The states twice: the live ones and their snapshot.
  return kv * sizeof(float) + 2 * recurrent_bytes_;
}

std::uint64_t KvCache::bytes_for(const model::ModelSpec& spec, std::int64_t capacity_tokens) {
  const std::int64_t per_position = spec.mla ? 2 * spec.kv_lora_rank + spec.qk_rope_head_dim
                                             : 2 * spec.num_kv_heads * spec.head_dim;
  const auto linear_layers = static_cast<std::uint64_t>(spec.num_layers - attention_layers(spec));
  return static_cast<std::uint64_t>(attention_layers(spec)) *
             static_cast<std::uint64_t>(capacity_tokens) *
             static_cast<std::uint64_t>(per_position) * sizeof(float) +
         2 * linear_layers *
             static_cast<std::uint64_t>(conv_floats(spec) + recurrent_floats(spec)) * sizeof(float);
}

}  // namespace tandem::backend
