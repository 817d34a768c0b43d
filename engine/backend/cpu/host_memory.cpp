#include "engine/backend/cpu/host_memory.h"

#include <cassert>
#include <cstring>

namespace tandem::backend {
namespace {

std::size_t packed_block_bytes(const kernels::PackedMatrix& m) {
  return static_cast<std::size_t>(m.blocks) * m.block_bytes();
}

// The shape of `source` with storage for its bytes and scales, not yet filled.
std::unique_ptr<kernels::PackedMatrix> packed_storage(const kernels::PackedMatrix& source) {
  auto p = std::make_unique<kernels::PackedMatrix>();
  p->format = source.format;
  p->rows = source.rows;
  p->cols = source.cols;
  p->cols_padded = source.cols_padded;
  p->blocks = source.blocks;
  p->group = source.group;
  p->rotation = source.rotation;
  p->bytes = kernels::AlignedBytes::allocate(packed_block_bytes(source));
  p->group_scale.resize(source.group_scale.size());
  return p;
}

void copy_packed(const kernels::PackedMatrix& source, kernels::PackedMatrix& target) {
  assert(source.format == target.format && source.rows == target.rows &&
         source.cols_padded == target.cols_padded &&
         source.group_scale.size() == target.group_scale.size());
  target.rotation = source.rotation;  // a slot takes its expert's (the same for one shape)
  std::memcpy(target.bytes.data.get(), source.bytes.data.get(), packed_block_bytes(source));
  std::copy(source.group_scale.begin(), source.group_scale.end(), target.group_scale.begin());
}

std::uint64_t stored_bytes(const kernels::WeightMatrix& m) {
  return kernels::dtype_bytes(m.dtype, m.rows * m.cols);
}

// The block-scale rows that cover the matrix's rows, and the first of them.
struct ScaleRows {
  std::int64_t first = 0, count = 0, cols = 0;
};
ScaleRows scale_rows(const kernels::WeightMatrix& m) {
  if (m.block_scale == nullptr || m.rows == 0) return {};
  ScaleRows s;
  s.first = m.first_row / m.block_rows;
  s.count = (m.first_row + m.rows - 1) / m.block_rows - s.first + 1;
  s.cols = (m.cols + m.block_cols - 1) / m.block_cols;
  return s;
}

}  // namespace

void MemoryBudget::reserve(std::uint64_t bytes) {
  std::uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (budget_ > 0 && (used > budget_ || bytes > budget_ - used))
      throw DeviceOutOfMemory::allocation(device_, bytes, budget_ > used ? budget_ - used : 0,
                                          budget_);
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
}

MemoryReservation::MemoryReservation(std::shared_ptr<MemoryBudget> budget, std::uint64_t bytes)
    : budget_(std::move(budget)), bytes_(bytes) {
  budget_->reserve(bytes_);
}

MemoryReservation::~MemoryReservation() {
  if (budget_) budget_->release(bytes_);
}

MemoryReservation::MemoryReservation(MemoryReservation&& other) noexcept
    : budget_(std::move(other.budget_)), bytes_(other.bytes_) {
  other.bytes_ = 0;
}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    if (budget_) budget_->release(bytes_);
    budget_ = std::move(other.budget_);
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

HostBuffer::HostBuffer(std::size_t bytes)
    : HostBuffer(kernels::AlignedBytes::allocate(bytes), bytes) {}

HostBuffer::HostBuffer(kernels::AlignedBytes storage, std::size_t bytes)
    : DeviceBuffer(storage.data.get(), bytes), storage_(std::move(storage)) {}

std::uint64_t host_matrix_bytes(const kernels::WeightMatrix& host) {
  if (host.packed != nullptr) return kernels::packed_matrix_bytes(*host.packed);
  const ScaleRows s = scale_rows(host);
  return stored_bytes(host) + static_cast<std::uint64_t>(s.count * s.cols) * sizeof(float);
}

std::unique_ptr<HostMatrix> HostMatrix::view(const kernels::WeightMatrix& host) {
  return std::unique_ptr<HostMatrix>(new HostMatrix(host, 0));
}

std::unique_ptr<HostMatrix> HostMatrix::storage_for(const kernels::WeightMatrix& host) {
  auto m = std::unique_ptr<HostMatrix>(new HostMatrix(host, host_matrix_bytes(host)));
  kernels::WeightMatrix& own = m->matrix_;
  own.onednn = nullptr;
  if (host.packed != nullptr) {
    m->packed_ = packed_storage(*host.packed);
    own.packed = m->packed_.get();
    // The kernels read the packed form only; the rows stay behind on the host.
    own.data = m->packed_->bytes.data.get();
    own.block_scale = nullptr;
    return m;
  }
  m->data_ = kernels::AlignedBytes::allocate(static_cast<std::size_t>(stored_bytes(host)));
  own.data = m->data_.data.get();
  const ScaleRows s = scale_rows(host);
  if (s.count > 0) {
    m->block_scale_.resize(static_cast<std::size_t>(s.count * s.cols));
    own.block_scale = m->block_scale_.data();
    own.first_row = host.first_row - s.first * host.block_rows;
  }
  return m;
}

void HostMatrix::copy_from(const kernels::WeightMatrix& host) {
  assert(host.rows == matrix_.rows && host.cols == matrix_.cols);
  if (packed_) {
    assert(host.packed != nullptr);
    copy_packed(*host.packed, *packed_);
    return;
  }
  // A slot filled with another layer's expert takes that expert's format (GGUF files mix
  // them), in room for the largest (staging slots are made for it).
  const std::uint64_t bytes = stored_bytes(host);
  if (bytes > data_.size) {
    data_ = kernels::AlignedBytes::allocate(static_cast<std::size_t>(bytes));
    matrix_.data = data_.data.get();
  }
  matrix_.dtype = host.dtype;
  std::memcpy(data_.data.get(), host.data, static_cast<std::size_t>(bytes));
  const ScaleRows s = scale_rows(host);
  if (s.count > 0) {
    std::memcpy(block_scale_.data(), host.block_scale + s.first * s.cols,
                block_scale_.size() * sizeof(float));
  }
}

std::uint64_t host_expert_bytes(const model::FeedForwardWeights& host) {
  const std::uint64_t biases =
      (host.gate_bias.size() + host.up_bias.size() + host.down_bias.size()) * sizeof(float);
  if (!host.slices.empty()) {
    std::uint64_t total = biases;
    for (const model::ExpertSlice& s : host.slices) {
      total += kernels::packed_matrix_bytes(*s.gate) + kernels::packed_matrix_bytes(*s.up) +
               kernels::packed_matrix_bytes(*s.down);
    }
    return total;
  }
  return biases + host_matrix_bytes(host.gate) + host_matrix_bytes(host.up) +
         host_matrix_bytes(host.down);
}

std::unique_ptr<HostExpert> HostExpert::view(const model::FeedForwardWeights& host) {
  auto e = std::unique_ptr<HostExpert>(new HostExpert(0));
  e->weights_ = host;
  return e;
}

std::unique_ptr<HostExpert> HostExpert::storage_for(const model::FeedForwardWeights& host) {
  auto e = std::unique_ptr<HostExpert>(new HostExpert(host_expert_bytes(host)));
  e->weights_ = host;
  if (!host.slices.empty()) {
    for (const model::ExpertSlice& s : host.slices) {
      for (const kernels::PackedMatrix* part : {s.gate, s.up, s.down})
        e->slices_.push_back(packed_storage(*part));
    }
  } else {
    for (const kernels::WeightMatrix* part : {&host.gate, &host.up, &host.down})
      e->parts_.push_back(HostMatrix::storage_for(*part));
  }
  e->bind();
  return e;
}

void HostExpert::bind() {
  if (!slices_.empty()) {
    for (std::size_t s = 0; s < weights_.slices.size(); ++s) {
      weights_.slices[s].gate = slices_[3 * s].get();
      weights_.slices[s].up = slices_[3 * s + 1].get();
      weights_.slices[s].down = slices_[3 * s + 2].get();
    }
    return;
  }
  weights_.gate = parts_[0]->matrix();
  weights_.up = parts_[1]->matrix();
  weights_.down = parts_[2]->matrix();
}

void HostExpert::copy_from(const model::FeedForwardWeights& host) {
  if (parts_.empty() && slices_.empty()) {  // a view: point at the other expert
    weights_ = host;
    return;
  }
  // The biases (gpt-oss) travel with the expert: copied, as the matrices are.
  weights_.gate_bias = host.gate_bias;
  weights_.up_bias = host.up_bias;
  weights_.down_bias = host.down_bias;
  weights_.glu = host.glu;
  if (!slices_.empty()) {
    assert(host.slices.size() * 3 == slices_.size());
    for (std::size_t s = 0; s < host.slices.size(); ++s) {
      copy_packed(*host.slices[s].gate, *slices_[3 * s]);
      copy_packed(*host.slices[s].up, *slices_[3 * s + 1]);
      copy_packed(*host.slices[s].down, *slices_[3 * s + 2]);
      weights_.slices[s].variant = host.slices[s].variant;
    }
    return;
  }
  parts_[0]->copy_from(host.gate);
  parts_[1]->copy_from(host.up);
  parts_[2]->copy_from(host.down);
  bind();  // their formats may have changed with the layer
}

}  // namespace tandem::backend
