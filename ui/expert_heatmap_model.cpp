#include "ui/expert_heatmap_model.h"

#include <algorithm>

namespace tandem::ui {

ExpertHeatmapModel::ExpertHeatmapModel(QObject* parent) : QAbstractTableModel(parent) {}

void ExpertHeatmapModel::setShape(int layers, int experts) {
  beginResetModel();
  layers_ = std::max(0, layers);
  experts_ = std::max(0, experts);
  heat_.assign(static_cast<std::size_t>(layers_ * experts_), 0.0);
  total_.assign(heat_.size(), 0);
  gpu_.clear();
  max_ = 0;
  endResetModel();
}

void ExpertHeatmapModel::addHits(const std::vector<std::uint64_t>& delta, double decay) {
  if (delta.size() != heat_.size() || heat_.empty()) return;
  max_ = 0;
  for (std::size_t i = 0; i < heat_.size(); ++i) {
    heat_[i] = heat_[i] * decay + static_cast<double>(delta[i]);
    total_[i] += delta[i];
    max_ = std::max(max_, heat_[i]);
  }
  emit dataChanged(index(0, 0), index(layers_ - 1, experts_ - 1),
                   {HeatRole, HitsRole, Qt::ToolTipRole});
}

void ExpertHeatmapModel::setGpuResident(const QSet<int>& cells) {
  gpu_ = cells;
  if (layers_ > 0 && experts_ > 0)
    emit dataChanged(index(0, 0), index(layers_ - 1, experts_ - 1), {GpuResidentRole});
}

int ExpertHeatmapModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : layers_;
}
int ExpertHeatmapModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : experts_;
}

QVariant ExpertHeatmapModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const std::size_t i = static_cast<std::size_t>(index.row() * experts_ + index.column());
  switch (role) {
    case HeatRole:
    case Qt::DisplayRole:
      return heat_[i];
    case HitsRole:
      return static_cast<qulonglong>(total_[i]);
    case GpuResidentRole:
      return gpu_.contains(static_cast<int>(i));
    case Qt::ToolTipRole:
      return tr("Layer %1, expert %2: %3 tokens routed here%4")
          .arg(index.row())
          .arg(index.column())
          .arg(total_[i])
          .arg(gpu_.contains(static_cast<int>(i)) ? tr(" (on the accelerator)") : QString());
    default:
      return {};
  }
}

QVariant ExpertHeatmapModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  return orientation == Qt::Vertical ? tr("Layer %1").arg(section) : tr("Expert %1").arg(section);
}

}  // namespace tandem::ui
