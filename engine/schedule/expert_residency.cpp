#include "engine/schedule/expert_residency.h"

#include <stdexcept>

namespace tandem::schedule {

ExpertResidency::ExpertResidency(backend::Backend& device, const model::ModelWeights& weights,
                                 const ExpertPlacement& placement)
    : device_(device), weights_(weights) {
  const std::size_t layers = weights.layers.size();
  tables_.resize(layers);
  slot_of_.resize(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    const model::LayerWeights& lw = weights.layers[l];
    if (!lw.moe || lw.experts.experts.empty()) continue;
    if (expert_bytes_ == 0) expert_bytes_ = device.expert_bytes(lw.experts.experts[0]);
    tables_[l].assign(lw.experts.experts.size(), nullptr);
    slot_of_[l].assign(lw.experts.experts.size(), -1);
    for (std::size_t e = 0; e < lw.experts.experts.size(); ++e) {
      if (!placement.on_device(static_cast<std::int64_t>(l), static_cast<std::int64_t>(e)))
        continue;
      Slot slot;
      slot.expert = device.place_expert(lw.experts.experts[e], backend::Queue::Compute);
      slot.layer = static_cast<std::int64_t>(l);
      slot.index = static_cast<std::int64_t>(e);
      tables_[l][e] = slot.expert.get();
      slot_of_[l][e] = static_cast<int>(slots_.size());
      slots_.push_back(std::move(slot));
    }
  }
}

ExpertResidency::~ExpertResidency() {
  try {
    device_.synchronize();
  } catch (const std::exception&) {
    // The device failed and said so; nothing runs on the slots any more.
  }
}

bool ExpertResidency::on_device(std::int64_t layer, std::int64_t expert) const {
  const auto& t = tables_[static_cast<std::size_t>(layer)];
  return !t.empty() && t[static_cast<std::size_t>(expert)] != nullptr;
}

bool ExpertResidency::in_flight(std::int64_t layer, std::int64_t expert) const {
  const auto& s = slot_of_[static_cast<std::size_t>(layer)];
  if (s.empty()) return false;
  const int slot = s[static_cast<std::size_t>(expert)];
  return slot >= 0 && slots_[static_cast<std::size_t>(slot)].arrival != nullptr;
}

ExpertPlacement ExpertResidency::placement() const {
  ExpertPlacement p;
  p.resident.resize(tables_.size());
  for (std::size_t l = 0; l < tables_.size(); ++l) {
    p.resident[l].resize(tables_[l].size());
    for (std::size_t e = 0; e < tables_[l].size(); ++e) p.resident[l][e] = tables_[l][e] != nullptr;
  }
  return p;
}

std::int64_t ExpertResidency::resident(std::int64_t layer) const {
  std::int64_t n = 0;
  for (const backend::DeviceExpert* e : tables_[static_cast<std::size_t>(layer)]) n += e != nullptr;
  return n;
}

std::int64_t ExpertResidency::moves_in_flight() const {
  std::int64_t n = 0;
  for (const Slot& s : slots_) n += s.arrival != nullptr;
  return n;
}

void ExpertResidency::start(const ExpertMove& m) {
  if (!on_device(m.out_layer, m.out_expert) || in_flight(m.out_layer, m.out_expert) ||
      on_device(m.in_layer, m.in_expert) || in_flight(m.in_layer, m.in_expert)) {
    throw std::logic_error("an expert move must take a resident expert off for one that is not");
  }
  const int s =
      slot_of_[static_cast<std::size_t>(m.out_layer)][static_cast<std::size_t>(m.out_expert)];
  Slot& slot = slots_[static_cast<std::size_t>(s)];
  // From now on the CPU computes the leaving expert; the slot is refilled only after the
  // compute queue has run everything already enqueued, some of which may still read it.
  tables_[static_cast<std::size_t>(m.out_layer)][static_cast<std::size_t>(m.out_expert)] = nullptr;
  slot_of_[static_cast<std::size_t>(m.out_layer)][static_cast<std::size_t>(m.out_expert)] = -1;
  device_.wait(backend::Queue::Copy, device_.record(backend::Queue::Compute));
  device_.refill_expert(*slot.expert,
                        weights_.layers[static_cast<std::size_t>(m.in_layer)]
                            .experts.experts[static_cast<std::size_t>(m.in_expert)],
                        backend::Queue::Copy);
  slot.arrival = device_.record(backend::Queue::Copy);
  slot.layer = m.in_layer;
  slot.index = m.in_expert;
  slot_of_[static_cast<std::size_t>(m.in_layer)][static_cast<std::size_t>(m.in_expert)] = s;
}

int ExpertResidency::complete_arrived() {
  int done = 0;
  for (Slot& slot : slots_) {
    if (slot.arrival == nullptr || !slot.arrival->ready()) continue;
    slot.arrival->wait();  // ready: returns at once, or reports the copy queue's failure
    slot.arrival.reset();
    tables_[static_cast<std::size_t>(slot.layer)][static_cast<std::size_t>(slot.index)] =
        slot.expert.get();
    ++done;
  }
  return done;
}

}  // namespace tandem::schedule
