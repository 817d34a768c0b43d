#include "ui/live_panel.h"

#include <QDateTime>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QLinearGradient>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "engine/hw/hardware_report.h"
#include "ui/expert_heatmap_model.h"
#include "ui/theme.h"
#include "ui/throughput_chart.h"
#include "ui/time_split_view.h"

namespace tandem::ui {
namespace {

QLabel* heading(const QString& text, QWidget* parent) {
  auto* l = new QLabel(text, parent);
  l->setStyleSheet(QStringLiteral("font-weight: 600; margin-top: 4px;"));
  return l;
}

// The parts of a token's time (measure/metrics.h). Without an accelerator one lane, the CPU:
// attention, CPU experts, dense, other. With one, the host's lane (CPU experts, waiting,
// other) and the accelerator's (attention, its experts, dense, bus, idle).
enum Part {
  kAttention,
  kCpuExperts,
  kAcceleratorExperts,
  kDense,
  kBus,
  kWaiting,
  kOther,
  kIdle,
  kParts
};
const char* const kSplitNames[kParts] = {
    "Attention", "CPU experts", "Accelerator experts", "Dense", "Bus", "Waiting", "Other", "Idle"};
const char* const kSplitColors[kParts] = {"#2f6fdb", "#8b5cf6", "#1f9d55", "#f59e0b",
                                          "#ef4444", "#94a3b8", "#cbd5e1", "#e2e8f0"};
// Which lane each part is drawn in: 0 the host (the CPU alone: its only lane), 1 the
// accelerator; -1 not drawn.
int lane_of(int part, bool accelerator) {
  if (!accelerator) {
    return part == kAttention || part == kCpuExperts || part == kDense || part == kOther ? 0 : -1;
  }
  switch (part) {
    case kCpuExperts:
    case kWaiting:
    case kOther:
      return 0;
    default:
      return 1;
  }
}

}  // namespace

HeatmapView::HeatmapView(ExpertHeatmapModel* model, QWidget* parent)
    : QWidget(parent), model_(model) {
  setMinimumHeight(110);
  setMouseTracking(true);
  setAccessibleName(tr("Experts in use"));
  setToolTip(
      tr("Each cell is one expert of one layer; the darker, the more tokens it took "
         "lately. Point at a cell for its count."));
  connect(model_, &QAbstractItemModel::dataChanged, this, qOverload<>(&QWidget::update));
  connect(model_, &QAbstractItemModel::modelReset, this, qOverload<>(&QWidget::update));
}

namespace {
constexpr int kLabelLeft = 30;    // "layer" and its numbers
constexpr int kLabelBottom = 28;  // "expert" and its numbers, and the colour scale
// From the empty cell's colour to deep blue: hot experts stand out at a glance.
QColor heat_color(double v) {
  const QColor low(theme::colors().surface);
  const QColor high = theme::scheme() == theme::Scheme::Dark ? QColor(QStringLiteral("#7aa7ff"))
                                                             : QColor::fromRgbF(0.18, 0.38, 0.85);
  return QColor::fromRgbF(low.redF() + (high.redF() - low.redF()) * v,
                          low.greenF() + (high.greenF() - low.greenF()) * v,
                          low.blueF() + (high.blueF() - low.blueF()) * v);
}
}  // namespace

QRect HeatmapView::cellArea() const {
  return rect().adjusted(kLabelLeft, 2, -2, -kLabelBottom);
}

QModelIndex HeatmapView::cellAt(const QPoint& pos) const {
  const int layers = model_->layers(), experts = model_->experts();
  const QRect area = cellArea();
  if (layers == 0 || experts == 0 || !area.contains(pos)) return {};
  const int e =
      std::min(experts - 1, (pos.x() - area.left()) * experts / std::max(1, area.width()));
  const int l = std::min(layers - 1, (pos.y() - area.top()) * layers / std::max(1, area.height()));
  return model_->index(l, e);
}

bool HeatmapView::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const QModelIndex cell = cellAt(help->pos());
    if (cell.isValid())
      QToolTip::showText(help->globalPos(), cell.data(Qt::ToolTipRole).toString(), this);
    else
      QToolTip::showText(help->globalPos(), toolTip(), this);
    return true;
  }
  return QWidget::event(event);
}

void HeatmapView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor(theme::colors().surface));
  const int layers = model_->layers(), experts = model_->experts();
  if (layers == 0 || experts == 0) {
    p.setPen(QColor(theme::colors().muted_text));
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               tr("Load a mixture-of-experts model to see which experts it uses."));
    return;
  }
  const QRect area = cellArea();
  const double cw = static_cast<double>(area.width()) / experts;
  const double ch = static_cast<double>(area.height()) / layers;
  const double max = std::max(1e-9, model_->maxHeat());
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      const QModelIndex i = model_->index(l, e);
      const double v = i.data(ExpertHeatmapModel::HeatRole).toDouble() / max;
      const QRectF cell(area.left() + e * cw, area.top() + l * ch, cw, ch);
      p.fillRect(cell, heat_color(v));
      if (i.data(ExpertHeatmapModel::GpuResidentRole).toBool()) {
        p.setPen(QPen(QColor(theme::colors().good), 1.5));
        p.drawRect(cell.adjusted(0.75, 0.75, -0.75, -0.75));
      }
    }
  }
  // Axes: the first and last layer and expert, and what each axis is.
  QFont small = font();
  small.setPointSizeF(7.0);
  p.setFont(small);
  p.setPen(QColor(theme::colors().muted_text));
  const QFontMetrics fm(small);
  const int text_h = fm.height();
  p.drawText(QRect(0, area.top(), kLabelLeft - 4, text_h), Qt::AlignRight, QStringLiteral("0"));
  p.drawText(QRect(0, area.bottom() - text_h, kLabelLeft - 4, text_h), Qt::AlignRight,
             QString::number(layers - 1));
  p.save();
  p.translate(9, area.center().y());
  p.rotate(-90);
  p.drawText(QRect(-area.height() / 2, -text_h / 2 - 2, area.height(), text_h), Qt::AlignCenter,
             tr("layer"));
  p.restore();
  const int row = area.bottom() + 2;
  p.drawText(QRect(area.left(), row, 40, text_h), Qt::AlignLeft, QStringLiteral("0"));
  p.drawText(QRect(area.right() - 40, row, 40, text_h), Qt::AlignRight,
             QString::number(experts - 1));
  p.drawText(QRect(area.left(), row, area.width() / 2, text_h), Qt::AlignCenter, tr("expert"));
  // The colour scale on a row of its own: from no tokens to the most a cell took lately.
  const int scale_row = row + text_h;
  const int label_w = fm.horizontalAdvance(tr("none")) + 4;
  const QRect scale(area.left() + label_w, scale_row + 3, std::min(120, area.width() / 2), 6);
  QLinearGradient g(scale.topLeft(), scale.topRight());
  g.setColorAt(0, heat_color(0));
  g.setColorAt(1, heat_color(1));
  p.fillRect(scale, g);
  p.setPen(QColor(theme::colors().border));
  p.drawRect(scale);
  p.setPen(QColor(theme::colors().muted_text));
  p.drawText(QRect(area.left(), scale_row, label_w, text_h), Qt::AlignLeft, tr("none"));
  p.drawText(QRect(scale.right() + 4, scale_row, area.right() - scale.right(), text_h),
             Qt::AlignLeft, tr("busiest lately"));
}

LivePanel::LivePanel(QWidget* parent) : QWidget(parent) {
  // Narrower, the buttons, legends and heat-map labels would be cut.
  setMinimumWidth(260);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(6, 6, 6, 6);
  v->setSpacing(6);

  auto* bar = new QHBoxLayout;
  freeze_ = new QPushButton(tr("Freeze"), this);
  freeze_->setToolTip(tr("Stop updating the charts, to read or export them"));
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

  // What the panel shows, apart from its buttons (and what Export PNG saves).
  content_ = new QWidget(this);
  auto* c = new QVBoxLayout(content_);
  c->setContentsMargins(0, 0, 0, 0);
  c->setSpacing(6);
  v->addWidget(content_, 1);

  throughput_ = new ThroughputChart(this);
  c->addWidget(throughput_, 3);

  c->addWidget(heading(tr("Experts in use"), this));
  heatmap_ = new ExpertHeatmapModel(this);
  heatmap_view_ = new HeatmapView(heatmap_, this);
  c->addWidget(heatmap_view_, 2);
  placement_ = new QLabel(this);
  placement_->setWordWrap(true);
  theme::follow(placement_, [label = placement_] {
    label->setStyleSheet(QStringLiteral("color: %1;").arg(theme::colors().muted_text));
  });
  c->addWidget(placement_);
  moves_ = new QLabel(this);
  moves_->setObjectName(QStringLiteral("moves"));
  moves_->setWordWrap(true);
  theme::follow(moves_, [label = moves_] {
    label->setStyleSheet(QStringLiteral("color: %1;").arg(theme::colors().muted_text));
  });
  moves_->setVisible(false);
  c->addWidget(moves_);

  c->addWidget(heading(tr("Time per token"), this));
  split_ = new TimeSplitView(this);
  split_->setToolTip(
      tr("Milliseconds per token. With an accelerator the host and the accelerator work at the "
         "same time: the host runs its experts and waits, the accelerator computes, moves data "
         "over the bus, and idles while it waits for the host."));
  c->addWidget(split_);

  c->addWidget(heading(tr("Memory"), this));
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
  c->addLayout(mem);

  timer_ = new QTimer(this);
  timer_->setInterval(250);
  connect(timer_, &QTimer::timeout, this, &LivePanel::poll);
  timer_->start();
  clear();
}

void LivePanel::clear() {
  metrics_.reset();
  accelerator_ = dynamic_ = false;
  last_ = {};
  heatmap_->setShape(0, 0);
  placement_->setText(tr("No model loaded."));
  moves_->setVisible(false);
  split_ms_per_token_.assign(kParts, 0.0);
  setLanes();
  vram_->setRange(0, 1000);
  vram_->setValue(0);
  vram_->setFormat(tr("no accelerator"));
}

void LivePanel::setModel(const ModelInfo& info) {
  metrics_ = info.metrics;
  if (!metrics_) {
    clear();
    return;
  }
  accelerator_ = !info.accelerator.isEmpty();
  dynamic_ = info.dynamic_update;
  last_ = metrics_->snapshot();
  last_ms_ = QDateTime::currentMSecsSinceEpoch();
  moves_per_s_ = 0;
  heatmap_->setShape(last_.experts > 1 ? static_cast<int>(last_.layers) : 0,
                     static_cast<int>(last_.experts));
  QSet<int> resident;
  for (std::size_t i = 0; i < last_.resident.size(); ++i)
    if (last_.resident[i]) resident.insert(static_cast<int>(i));
  heatmap_->setGpuResident(resident);
  placement_->setToolTip(info.placement_note);
  if (!accelerator_) {
    // The reason in a few words; the whole sentence is the tooltip (and on the System page).
    const QString why = info.no_accelerator_reason.isEmpty()
                            ? QString()
                            : QStringLiteral(" (%1)").arg(info.no_accelerator_reason);
    placement_->setText(info.experts > 0
                            ? tr("No accelerator: all experts run on the CPU%1.").arg(why)
                            : tr("No accelerator: the model runs on the CPU%1.").arg(why));
  } else if (info.experts == 0) {
    placement_->setText(tr("On the %1.").arg(info.accelerator));
  } else {
    QStringList extras;
    if (info.deferred_per_token > 0)
      extras << (info.deferred_per_token == 1
                     ? tr("the lowest-weighted CPU expert of each token deferred a layer")
                     : tr("the %1 lowest-weighted CPU experts of each token deferred a layer")
                           .arg(info.deferred_per_token));
    if (info.layerwise_threshold > 0)
      extras << tr("prompts from %1 tokens run layerwise on the accelerator")
                    .arg(info.layerwise_threshold);
    if (info.dynamic_update) extras << tr("experts that turn hot move onto it");
    placement_->setText(tr("On the %1: %2 of %3 experts per layer (%4 placement), outlined in "
                           "green.%5")
                            .arg(info.accelerator)
                            .arg(info.gpu_experts_per_layer)
                            .arg(info.experts)
                            .arg(info.placement_strategy)
                            .arg(extras.isEmpty()
                                     ? QString()
                                     : QStringLiteral(" ") + extras.join(QStringLiteral("; ")) +
                                           QStringLiteral(".")));
  }
  moves_->setVisible(dynamic_);
  moves_->setText(tr("Moves: none yet"));
  split_ms_per_token_.assign(kParts, 0.0);
  setLanes();
}

void LivePanel::setLanes() {
  split_->setLanes(accelerator_ ? QStringList{tr("Host"), tr("Accelerator")}
                                : QStringList{tr("CPU")});
  showSplit();
}

void LivePanel::showSplit() {
  std::vector<TimeSplitView::Part> parts;
  for (int i = 0; i < kParts; ++i) {
    const int lane = lane_of(i, accelerator_);
    if (lane < 0) continue;
    parts.push_back({tr(kSplitNames[i]), QColor(QLatin1String(kSplitColors[i])), lane,
                     split_ms_per_token_[static_cast<std::size_t>(i)]});
  }
  split_->setParts(parts);
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
  const qint64 now_ms = QDateTime::currentMSecsSinceEpoch();
  if (now.hits.size() == last_.hits.size() && heatmap_->layers() > 0) {
    std::vector<std::uint64_t> delta(now.hits.size());
    std::uint64_t any = 0;
    for (std::size_t i = 0; i < delta.size(); ++i) any |= delta[i] = now.hits[i] - last_.hits[i];
    // Idle, the map keeps showing the last reply's experts instead of fading to white.
    if (any != 0) heatmap_->addHits(delta);
    if (now.resident != last_.resident) {
      QSet<int> resident;
      for (std::size_t i = 0; i < now.resident.size(); ++i)
        if (now.resident[i]) resident.insert(static_cast<int>(i));
      heatmap_->setGpuResident(resident);
    }
  }
  if (now.device_memory_budget > 0) {
    vram_->setRange(0, 1000);
    vram_->setValue(static_cast<int>(1000 * now.device_memory_used / now.device_memory_budget));
    vram_->setFormat(tr("Accel. %1 / %2")
                         .arg(QString::fromStdString(hw::format_bytes(now.device_memory_used)),
                              QString::fromStdString(hw::format_bytes(now.device_memory_budget))));
  }
  if (dynamic_) {
    const double seconds = static_cast<double>(now_ms - last_ms_) / 1000.0;
    if (seconds > 0) {
      const double rate = static_cast<double>(now.moves - last_.moves) / seconds;
      moves_per_s_ = 0.7 * moves_per_s_ + 0.3 * rate;
    }
    moves_->setText(tr("Moves: %1 per second · %2 in all (%3)")
                        .arg(moves_per_s_, 0, 'f', 1)
                        .arg(now.moves)
                        .arg(QString::fromStdString(hw::format_bytes(now.moved_bytes))));
  }
  const std::uint64_t tokens = now.tokens - last_.tokens;
  if (tokens > 0) {
    const double per = 1000.0 / static_cast<double>(tokens);
    const auto d = [&](double a, double b) { return (b - a) * per; };
    double parts[kParts] = {};
    parts[kAttention] = d(last_.attention_seconds, now.attention_seconds);
    parts[kCpuExperts] = d(last_.cpu_expert_seconds, now.cpu_expert_seconds);
    parts[kAcceleratorExperts] = d(last_.gpu_expert_seconds, now.gpu_expert_seconds);
    parts[kDense] = d(last_.dense_seconds, now.dense_seconds);
    parts[kBus] = d(last_.bus_seconds, now.bus_seconds);
    parts[kWaiting] = d(last_.waiting_seconds, now.waiting_seconds);
    parts[kOther] = d(last_.other_seconds, now.other_seconds);
    parts[kIdle] = d(last_.device_idle_seconds(), now.device_idle_seconds());
    for (int i = 0; i < kParts; ++i)
      split_ms_per_token_[static_cast<std::size_t>(i)] =
          lane_of(i, accelerator_) < 0 ? 0.0 : std::max(0.0, parts[i]);
    showSplit();
  }
  last_ = now;
  last_ms_ = now_ms;
}

QString LivePanel::placementText() const {
  return placement_->text();
}

QString LivePanel::timeSplitText() const {
  QStringList lanes[2];
  for (int i = 0; i < kParts; ++i) {
    const int lane = lane_of(i, accelerator_);
    if (lane < 0) continue;
    lanes[lane] << QStringLiteral("%1 %2 ms")
                       .arg(tr(kSplitNames[i]))
                       .arg(split_ms_per_token_[static_cast<std::size_t>(i)], 0, 'f', 2);
  }
  if (!accelerator_) return lanes[0].join(QStringLiteral(", "));
  return tr("host: %1; accelerator: %2")
      .arg(lanes[0].join(QStringLiteral(", ")), lanes[1].join(QStringLiteral(", ")));
}

bool LivePanel::exportPng(const QString& path) {
  // The charts, not the buttons above them.
  return content_->grab().save(path, "PNG");
}

}  // namespace tandem::ui
