#include "ui/live_panel.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

#include "engine/hw/hardware_report.h"
#include "ui/expert_heatmap_model.h"
#include "ui/theme.h"
#include "ui/throughput_chart.h"

namespace tandem::ui {
namespace {

QLabel* heading(const QString& text, QWidget* parent) {
  auto* l = new QLabel(text, parent);
  l->setStyleSheet(QStringLiteral("font-weight: 600; margin-top: 4px;"));
  return l;
}

const char* const kSplitNames[] = {"Attention", "CPU exp.", "GPU exp.", "Other"};
const char* const kSplitColors[] = {"#2f6fdb", "#8b5cf6", "#1f9d55", "#9aa5b1"};

}  // namespace

HeatmapView::HeatmapView(ExpertHeatmapModel* model, QWidget* parent)
    : QWidget(parent), model_(model) {
  setMinimumHeight(90);
  connect(model_, &QAbstractItemModel::dataChanged, this, qOverload<>(&QWidget::update));
  connect(model_, &QAbstractItemModel::modelReset, this, qOverload<>(&QWidget::update));
}

void HeatmapView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  const int layers = model_->layers(), experts = model_->experts();
  if (layers == 0 || experts == 0) {
    p.setPen(QColor(theme::kMutedText));
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               tr("Load a mixture-of-experts model to see which experts it uses."));
    return;
  }
  const double cw = static_cast<double>(width()) / experts;
  const double ch = static_cast<double>(height()) / layers;
  const double max = std::max(1e-9, model_->maxHeat());
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      const QModelIndex i = model_->index(l, e);
      const double v = i.data(ExpertHeatmapModel::HeatRole).toDouble() / max;
      // White to deep blue: hot experts stand out at a glance.
      const QColor c = QColor::fromRgbF(1.0 - 0.82 * v, 1.0 - 0.62 * v, 1.0 - 0.15 * v);
      const QRectF cell(e * cw, l * ch, cw, ch);
      p.fillRect(cell, c);
      if (i.data(ExpertHeatmapModel::GpuResidentRole).toBool()) {
        p.setPen(QPen(QColor(theme::kGood), 1.5));
        p.drawRect(cell.adjusted(0.75, 0.75, -0.75, -0.75));
      }
    }
  }
}

LivePanel::LivePanel(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(6, 6, 6, 6);
  v->setSpacing(6);

  auto* bar = new QHBoxLayout;
  freeze_ = new QPushButton(tr("Freeze"), this);
  freeze_->setCheckable(true);
  auto* save = new QPushButton(tr("Export PNG…"), this);
  bar->addWidget(freeze_);
  bar->addWidget(save);
  bar->addStretch(1);
  v->addLayout(bar);
  connect(freeze_, &QPushButton::toggled, this, &LivePanel::setFrozen);
  connect(save, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export charts"), QStringLiteral("tandem-charts.png"), tr("PNG images (*.png)"));
    if (!path.isEmpty()) exportPng(path);
  });

  throughput_ = new ThroughputChart(this);
  v->addWidget(throughput_, 3);

  v->addWidget(heading(tr("Experts in use"), this));
  heatmap_ = new ExpertHeatmapModel(this);
  heatmap_view_ = new HeatmapView(heatmap_, this);
  v->addWidget(heatmap_view_, 2);
  placement_ = new QLabel(this);
  placement_->setWordWrap(true);
  placement_->setStyleSheet(QStringLiteral("color: %1;").arg(theme::kMutedText));
  v->addWidget(placement_);

  v->addWidget(heading(tr("Time per token"), this));
  split_chart_ = new QChart;
  split_chart_->legend()->setAlignment(Qt::AlignBottom);
  split_chart_->setMargins(QMargins(2, 2, 2, 2));
  split_series_ = new QHorizontalStackedBarSeries(split_chart_);
  for (int i = 0; i < 4; ++i) {
    auto* set = new QBarSet(tr(kSplitNames[i]));
    set->setColor(QColor(kSplitColors[i]));
    set->append(0.0);
    split_series_->append(set);
    split_sets_.push_back(set);
  }
  split_chart_->addSeries(split_series_);
  split_axis_ = new QValueAxis(split_chart_);
  split_axis_->setTitleText(tr("ms per token"));
  split_axis_->setLabelFormat(QStringLiteral("%.3g"));
  split_axis_->setRange(0, 1);
  auto* category = new QBarCategoryAxis(split_chart_);
  category->append(tr("now"));
  split_chart_->addAxis(split_axis_, Qt::AlignBottom);
  split_chart_->addAxis(category, Qt::AlignLeft);
  split_series_->attachAxis(split_axis_);
  split_series_->attachAxis(category);
  QFont small = split_chart_->font();
  small.setPointSizeF(7.5);
  split_chart_->legend()->setFont(small);
  split_axis_->setLabelsFont(small);
  split_axis_->setTitleFont(small);
  split_axis_->setTickCount(3);
  category->setLabelsFont(small);
  auto* split_view = new QChartView(split_chart_, this);
  split_view->setRenderHint(QPainter::Antialiasing);
  split_view->setMinimumHeight(110);
  v->addWidget(split_view, 2);

  v->addWidget(heading(tr("Memory"), this));
  auto* mem = new QHBoxLayout;
  ram_ = new QProgressBar(this);
  vram_ = new QProgressBar(this);
  ram_->setFormat(tr("RAM"));
  ram_->setTextVisible(true);
  vram_->setTextVisible(true);
  vram_->setFormat(tr("no GPU"));
  vram_->setValue(0);
  mem->addWidget(ram_);
  mem->addWidget(vram_);
  v->addLayout(mem);

  timer_ = new QTimer(this);
  timer_->setInterval(250);
  connect(timer_, &QTimer::timeout, this, &LivePanel::poll);
  timer_->start();
  setMetrics(nullptr, QString(), false);
}

void LivePanel::setMetrics(std::shared_ptr<const measure::Metrics> metrics, const QString& strategy,
                           bool gpu) {
  metrics_ = std::move(metrics);
  last_ = metrics_ ? metrics_->snapshot() : measure::MetricsSnapshot{};
  heatmap_->setShape(metrics_ && last_.experts > 1 ? static_cast<int>(last_.layers) : 0,
                     static_cast<int>(last_.experts));
  if (!metrics_) {
    placement_->setText(tr("No model loaded."));
  } else if (!gpu) {
    placement_->setText(tr("No GPU: all experts run on the CPU. Placement strategy: none."));
  } else {
    placement_->setText(
        tr("GPU-resident experts are outlined in green. Placement strategy: %1.").arg(strategy));
  }
  split_ms_per_token_.assign(4, 0.0);
}

void LivePanel::setVramUse(std::uint64_t used, std::uint64_t total) {
  vram_->setRange(0, 1000);
  vram_->setValue(total > 0 ? static_cast<int>(1000 * used / total) : 0);
  vram_->setFormat(total > 0 ? tr("VRAM %1 of %2")
                                   .arg(QString::fromStdString(hw::format_bytes(used)),
                                        QString::fromStdString(hw::format_bytes(total)))
                             : tr("no GPU"));
}

void LivePanel::setFrozen(bool frozen) {
  frozen_ = frozen;
  freeze_->setChecked(frozen);
  freeze_->setText(frozen ? tr("Frozen") : tr("Freeze"));
}

void LivePanel::poll() {
  static std::uint64_t total_ram = 0;
  if (total_ram == 0) {
    const hw::MemoryInfo m = hw::probe_memory();
    total_ram = m.total_bytes;
  }
  const std::uint64_t rss = measure::process_resident_bytes();
  ram_->setRange(0, 1000);
  ram_->setValue(total_ram > 0 ? static_cast<int>(1000 * rss / total_ram) : 0);
  ram_->setFormat(tr("RAM %1").arg(QString::fromStdString(hw::format_bytes(rss))));
  if (frozen_ || !metrics_) return;
  const measure::MetricsSnapshot now = metrics_->snapshot();
  if (now.hits.size() == last_.hits.size() && heatmap_->layers() > 0) {
    std::vector<std::uint64_t> delta(now.hits.size());
    for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = now.hits[i] - last_.hits[i];
    heatmap_->addHits(delta);
  }
  const std::uint64_t tokens = now.tokens - last_.tokens;
  if (tokens > 0) {
    const double per = 1000.0 / static_cast<double>(tokens);
    const double parts[4] = {(now.attention_seconds - last_.attention_seconds) * per,
                             (now.cpu_expert_seconds - last_.cpu_expert_seconds) * per,
                             (now.gpu_expert_seconds - last_.gpu_expert_seconds) * per,
                             (now.other_seconds - last_.other_seconds) * per};
    double total = 0;
    for (int i = 0; i < 4; ++i) {
      split_ms_per_token_[static_cast<std::size_t>(i)] = parts[i];
      split_sets_[static_cast<std::size_t>(i)]->replace(0, parts[i]);
      total += parts[i];
    }
    split_axis_->setRange(0, std::max(0.1, total * 1.1));
  }
  last_ = now;
}

QString LivePanel::placementText() const {
  return placement_->text();
}

QString LivePanel::timeSplitText() const {
  QStringList parts;
  for (int i = 0; i < 4; ++i)
    parts << QStringLiteral("%1 %2 ms")
                 .arg(tr(kSplitNames[i]))
                 .arg(split_ms_per_token_[static_cast<std::size_t>(i)], 0, 'f', 2);
  return parts.join(QStringLiteral(", "));
}

bool LivePanel::exportPng(const QString& path) {
  return grab().save(path, "PNG");
}

}  // namespace tandem::ui
