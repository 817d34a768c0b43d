// Routing hits per (layer, expert) as a table model, with exponential decay so the heat map
// shows what the model uses now; GPU-resident experts are flagged.
#pragma once

#include <QAbstractTableModel>
#include <QSet>
#include <cstdint>
#include <vector>

namespace tandem::ui {

class ExpertHeatmapModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Role { HeatRole = Qt::UserRole + 1, GpuResidentRole, HitsRole };

  explicit ExpertHeatmapModel(QObject* parent = nullptr);

  void setShape(int layers, int experts);
  // Adds the hits since the last call ([layer x expert]); older heat fades by `decay` first.
  void addHits(const std::vector<std::uint64_t>& delta, double decay = 0.9);
  void setGpuResident(const QSet<int>& cells);  // cell = layer * experts + expert
  double maxHeat() const { return max_; }
  int layers() const { return layers_; }
  int experts() const { return experts_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  int layers_ = 0;
  int experts_ = 0;
  std::vector<double> heat_;
  std::vector<std::uint64_t> total_;
  QSet<int> gpu_;
  double max_ = 0;
};

}  // namespace tandem::ui
