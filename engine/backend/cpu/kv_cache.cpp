#include "engine/backend/cpu/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/dtype.h"

#include "kernels/cpu/attention/attention.h"

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

std::string KvCache::refusal(const model::ModelSpec& spec, KvCacheFormat format) {
  if (attention_layers(spec) == 0) return {};
  const std::int64_t key_dim = spec.mla ? spec.kv_lora_rank + spec.qk_rope_head_dim : spec.head_dim;
  const std::int64_t value_dim = spec.mla ? spec.kv_lora_rank : spec.head_dim;
  if (format == KvCacheFormat::Bf16 && key_dim % 2 != 0) {
    return "a BF16 KV cache needs heads of an even width, and this model's are " +
           std::to_string(key_dim) +
           " wide; keep them in fp32 instead (--kv-cache f32; in the app, KV cache in "
           "Preferences)";
  }
  if (format == KvCacheFormat::Int8 &&
      (!kernels::int8_cache_takes(key_dim) || !kernels::int8_cache_takes(value_dim))) {
    return "an 8-bit KV cache needs rows of keys and values of whole " +
           std::to_string(kernels::kInt8Group) + "s, at most " +
           std::to_string(kernels::kInt8MaxDim) + " wide, and this model's are " +
           std::to_string(key_dim) +
           (value_dim != key_dim ? " and " + std::to_string(value_dim) : std::string()) +
           " wide; keep them in BF16 instead (--kv-cache bf16; in the app, KV cache in "
           "Preferences)";
  }
  return {};
}

KvCache::KvCache(const model::ModelSpec& spec, std::int64_t capacity_tokens, KvCacheFormat format)
    : capacity_(capacity_tokens), format_(format) {
  if (const std::string why = refusal(spec, format); !why.empty()) throw std::invalid_argument(why);
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
  if (format_ == KvCacheFormat::Bf16) {
    keys16_.resize(layers);
    values16_.resize(layers);
  }
  if (format_ == KvCacheFormat::Int8) {
    keys8_.resize(layers);
    values8_.resize(layers);
    key_scales_.resize(layers);
    value_scales_.resize(layers);
    value_scale_stride_ = kernels::int8_value_scale_stride(capacity_);
  }
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (linear(spec, i)) {
      conv_[i].assign(static_cast<std::size_t>(conv_floats(spec)), 0.0f);
      recurrent_[i].assign(static_cast<std::size_t>(recurrent_floats(spec)), 0.0f);
      recurrent_bytes_ += (conv_[i].size() + recurrent_[i].size()) * sizeof(float);
      continue;
    }
    const std::int64_t key_dim = spec.mla ? latent_rank_ + rope_dim_ : head_dim_;
    if (format_ == KvCacheFormat::Bf16) {
      keys16_[i].assign(spec.mla ? kernels::tiled_key_floats(capacity_, key_dim)
                                 : static_cast<std::size_t>(kv_heads_) * head_keys_,
                        0);
      values16_[i].assign(spec.mla ? kernels::bf16_value_elements(capacity_, key_row_)
                                   : static_cast<std::size_t>(kv_heads_) *
                                         kernels::bf16_value_elements(capacity_, head_dim_),
                          0);
      continue;
    }
    if (format_ == KvCacheFormat::Int8) {
      const std::int64_t value_dim = spec.mla ? latent_rank_ : head_dim_;
      const std::size_t heads = spec.mla ? 1 : static_cast<std::size_t>(kv_heads_);
      head_key_scales_ = kernels::int8_key_scales(capacity_, key_dim);
      head_values8_ = kernels::int8_value_elements(capacity_, value_dim);
      head_value_scales_ = kernels::int8_value_scales(value_scale_stride_, value_dim);
      keys8_[i].assign(heads * kernels::tiled_key_floats(capacity_, key_dim), 0);
      key_scales_[i].assign(heads * head_key_scales_, 0.0f);
      values8_[i].assign(heads * head_values8_, 0);
      value_scales_[i].assign(heads * head_value_scales_, 0.0f);
      continue;
    }
    keys_[i].assign(spec.mla ? static_cast<std::size_t>(capacity_ * key_row_)
                             : static_cast<std::size_t>(kv_heads_) * head_keys_,
                    0.0f);
    values_[i].assign(static_cast<std::size_t>(capacity_ * value_row_), 0.0f);
  }
  if (spec.mla && format_ == KvCacheFormat::F32) {
    latent_keys_.resize(keys_.size());
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      if (!linear(spec, i))
        latent_keys_[i].assign(kernels::tiled_key_floats(capacity_, latent_rank_ + rope_dim_),
                               0.0f);
    }
  }
}

void KvCache::store_latent(std::int64_t layer, std::int64_t pos, const float* latent,
                           const float* rope_key) {
  const std::int64_t dim = latent_rank_ + rope_dim_;
  if (format_ == KvCacheFormat::Int8) {
    thread_local std::vector<float> row;
    row.assign(latent, latent + latent_rank_);
    row.insert(row.end(), rope_key, rope_key + rope_dim_);
    kernels::int8_store_key(keys8_[l(layer)].data(), key_scales_[l(layer)].data(), pos, dim,
                            row.data());
    kernels::int8_store_value(values8_[l(layer)].data(), value_scales_[l(layer)].data(),
                              value_scale_stride_, pos, latent_rank_, latent);
    return;
  }
  if (format_ == KvCacheFormat::Bf16) {
    std::uint16_t* t = keys16_[l(layer)].data();
    std::uint16_t* v = values16_[l(layer)].data();
    for (std::int64_t i = 0; i < latent_rank_; ++i) {
      const std::uint16_t x = kernels::f32_to_bf16(latent[i]);
      t[kernels::bf16_key_index(pos, i, dim)] = x;
      v[kernels::bf16_value_index(pos, i, latent_rank_)] = x;
    }
    for (std::int64_t i = 0; i < rope_dim_; ++i)
      t[kernels::bf16_key_index(pos, latent_rank_ + i, dim)] = kernels::f32_to_bf16(rope_key[i]);
    return;
  }
  std::copy_n(latent, latent_rank_, &keys_[l(layer)][off(pos, key_row_)]);
  float* t = latent_keys_[l(layer)].data();
  for (std::int64_t i = 0; i < latent_rank_; ++i)
    t[kernels::tiled_key_index(pos, i, dim)] = latent[i];
  for (std::int64_t i = 0; i < rope_dim_; ++i)
    t[kernels::tiled_key_index(pos, latent_rank_ + i, dim)] = rope_key[i];
}

void KvCache::store_key(std::int64_t layer, std::int64_t pos, const float* k) {
  if (format_ == KvCacheFormat::Int8) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      kernels::int8_store_key(
          keys8_[l(layer)].data() + static_cast<std::size_t>(h) * head_keys_,
          key_scales_[l(layer)].data() + static_cast<std::size_t>(h) * head_key_scales_, pos,
          head_dim_, k + h * head_dim_);
    }
    return;
  }
  for (std::int64_t h = 0; h < kv_heads_; ++h) {
    const std::size_t head = static_cast<std::size_t>(h) * head_keys_;
    if (format_ == KvCacheFormat::Bf16) {
      std::uint16_t* t = keys16_[l(layer)].data() + head;
      for (std::int64_t d = 0; d < head_dim_; ++d)
        t[kernels::bf16_key_index(pos, d, head_dim_)] = kernels::f32_to_bf16(k[h * head_dim_ + d]);
    } else {
      float* t = keys_[l(layer)].data() + head;
      for (std::int64_t d = 0; d < head_dim_; ++d)
        t[kernels::tiled_key_index(pos, d, head_dim_)] = k[h * head_dim_ + d];
    }
  }
}

void KvCache::store_value(std::int64_t layer, std::int64_t pos, const float* v) {
  if (format_ == KvCacheFormat::Int8) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      kernels::int8_store_value(
          values8_[l(layer)].data() + static_cast<std::size_t>(h) * head_values8_,
          value_scales_[l(layer)].data() + static_cast<std::size_t>(h) * head_value_scales_,
          value_scale_stride_, pos, head_dim_, v + h * head_dim_);
    }
    return;
  }
  if (format_ == KvCacheFormat::Bf16) {
    // Each KV head's values apart ([head][pos / 2][head_dim][2]): a head's rows are then
    // adjacent, which the attention kernels stream and keep in their caches best.
    const std::size_t head_values = kernels::bf16_value_elements(capacity_, head_dim_);
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      std::uint16_t* values =
          values16_[l(layer)].data() + static_cast<std::size_t>(h) * head_values;
      for (std::int64_t c = 0; c < head_dim_; ++c)
        values[kernels::bf16_value_index(pos, c, head_dim_)] =
            kernels::f32_to_bf16(v[h * head_dim_ + c]);
    }
  } else {
    std::copy_n(v, value_row_, value(layer, pos));
  }
}

kernels::Bf16Kv KvCache::bf16_head(std::int64_t layer, std::int64_t kv_head) const {
  return {keys16_[l(layer)].data() + static_cast<std::size_t>(kv_head) * head_keys_, head_dim_,
          values16_[l(layer)].data() + static_cast<std::size_t>(kv_head) *
                                           kernels::bf16_value_elements(capacity_, head_dim_),
          head_dim_, head_dim_};
}

kernels::Bf16Kv KvCache::bf16_latent(std::int64_t layer) const {
  return {keys16_[l(layer)].data(), latent_rank_ + rope_dim_, values16_[l(layer)].data(),
          latent_rank_, latent_rank_};
}

kernels::Int8Kv KvCache::int8_head(std::int64_t layer, std::int64_t kv_head) const {
  const auto h = static_cast<std::size_t>(kv_head);
  return {keys8_[l(layer)].data() + h * head_keys_,
          key_scales_[l(layer)].data() + h * head_key_scales_,
          head_dim_,
          values8_[l(layer)].data() + h * head_values8_,
          value_scales_[l(layer)].data() + h * head_value_scales_,
          value_scale_stride_,
          head_dim_};
}

kernels::Int8Kv KvCache::int8_latent(std::int64_t layer) const {
  return {keys8_[l(layer)].data(),
          key_scales_[l(layer)].data(),
          latent_rank_ + rope_dim_,
          values8_[l(layer)].data(),
          value_scales_[l(layer)].data(),
          value_scale_stride_,
          latent_rank_};
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
  std::uint64_t kv16 = 0;
  for (std::size_t i = 0; i < keys16_.size(); ++i) kv16 += keys16_[i].size() + values16_[i].size();
  std::uint64_t kv8 = 0;
  for (std::size_t i = 0; i < keys8_.size(); ++i) {
    kv8 += keys8_[i].size() + values8_[i].size() +
           (key_scales_[i].size() + value_scales_[i].size()) * sizeof(float);
  }
  // The states twice: the live ones and their snapshot.
  return kv * sizeof(float) + kv16 * sizeof(std::uint16_t) + kv8 + 2 * recurrent_bytes_;
}

std::uint64_t KvCache::bytes_for(const model::ModelSpec& spec, std::int64_t capacity_tokens,
                                 KvCacheFormat format) {
  const std::int64_t per_position = spec.mla ? 2 * spec.kv_lora_rank + spec.qk_rope_head_dim
                                             : 2 * spec.num_kv_heads * spec.head_dim;
  // Bytes a position takes: 8 bits an element, a float per kInt8Group of a key and per
  // int8_value_group of a value row.
  const std::int64_t key_width =
                         spec.mla ? spec.kv_lora_rank + spec.qk_rope_head_dim : spec.head_dim,
                     value_width = spec.mla ? spec.kv_lora_rank : spec.head_dim,
                     rows = spec.mla ? 1 : spec.num_kv_heads;
  const std::int64_t scales = rows * (key_width / kernels::kInt8Group +
                                      value_width / kernels::int8_value_group(value_width));
  const std::uint64_t position_bytes =
      format == KvCacheFormat::Int8 ? static_cast<std::uint64_t>(per_position + scales * 4)
                                    : static_cast<std::uint64_t>(per_position) *
                                          (format == KvCacheFormat::Bf16 ? 2 : sizeof(float));
  const auto linear_layers = static_cast<std::uint64_t>(spec.num_layers - attention_layers(spec));
  return static_cast<std::uint64_t>(attention_layers(spec)) *
             static_cast<std::uint64_t>(capacity_tokens) * position_bytes +
         2 * linear_layers *
             static_cast<std::uint64_t>(conv_floats(spec) + recurrent_floats(spec)) * sizeof(float);
}

}  // namespace tandem::backend
