// The routed experts on the accelerator: one slot (a device copy) per resident expert, and
// per layer the table the grouped product reads. A move of the dynamic update refills a slot
// on the copy queue and enters its new expert into the table only once it has arrived, so no
// operation waits for a move and none reads a half-copied expert; while it is in flight
// neither the leaving nor the arriving expert is on the device (the CPU computes both).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model_weights.h"
#include "engine/schedule/expert_placement.h"

namespace tandem::schedule {

struct ExpertMove {
  std::int64_t out_layer = 0, out_expert = 0;  // leaves the device
  std::int64_t in_layer = 0, in_expert = 0;    // comes onto it
};

class ExpertResidency {
 public:
  // Places `placement`'s experts on `device`, copied on its compute queue.
  ExpertResidency(backend::Backend& device, const model::ModelWeights& weights,
                  const ExpertPlacement& placement);
  // Waits for the device first: queued copies and products may still use the slots.
  ~ExpertResidency();
  ExpertResidency(const ExpertResidency&) = delete;
  ExpertResidency& operator=(const ExpertResidency&) = delete;

  // By expert id, the device copy of each expert of `layer` that is resident; null for the
  // others. Empty for dense layers.
  const std::vector<const backend::DeviceExpert*>& table(std::int64_t layer) const {
    return tables_[static_cast<std::size_t>(layer)];
  }
  bool on_device(std::int64_t layer, std::int64_t expert) const;
  // Whether the expert is leaving or arriving.
  bool in_flight(std::int64_t layer, std::int64_t expert) const;
  // What the tables hold now.
  ExpertPlacement placement() const;
  std::int64_t resident(std::int64_t layer) const;
  std::int64_t slot_count() const { return static_cast<std::int64_t>(slots_.size()); }
  std::int64_t moves_in_flight() const;
  std::uint64_t expert_bytes() const { return expert_bytes_; }
  std::uint64_t bytes() const { return expert_bytes_ * slots_.size(); }

  // Starts a move; the leaving expert must be resident and the arriving one not, neither in
  // flight (std::logic_error otherwise).
  void start(const ExpertMove& move);
  // Enters every move that has arrived into the tables; returns how many did.
  int complete_arrived();

 private:
  struct Slot {
    std::unique_ptr<backend::DeviceExpert> expert;
    std::int64_t layer = -1, index = -1;
    backend::EventPtr arrival;  // set while a move into this slot is in flight
  };

  backend::Backend& device_;
  const model::ModelWeights& weights_;
  std::uint64_t expert_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::vector<const backend::DeviceExpert*>> tables_;
  std::vector<std::vector<int>> slot_of_;  // per layer and expert: its slot or -1
};

}  // namespace tandem::schedule
