#include "ui/system_page.h"

#include <QDateTime>
#include <QFrame>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QScrollArea>
#include <QStringList>
#include <QTextDocument>
#include <QVBoxLayout>

#include "ui/theme.h"

namespace tandem::ui {
namespace {

QString q(const std::string& s) {
  return QString::fromStdString(s);
}
QString q(std::string_view s) {
  return QString::fromUtf8(s.data(), static_cast<int>(s.size()));
}
QString bytes(std::uint64_t b) {
  return q(hw::format_bytes(b));
}

QString row(const QString& key, const QString& value) {
  return QStringLiteral(
             "<tr><td style='color:%1; padding-right:14px; white-space:nowrap'>%2</td>"
             "<td>%3</td></tr>")
      .arg(theme::colors().muted_text, key.toHtmlEscaped(), value);
}

// "avx512_vnni" -> "AVX512-VNNI", "sse4_2" -> "SSE4.2": the spelling vendors use.
QString displayName(std::string_view name) {
  if (name == "sse4_2") return QStringLiteral("SSE4.2");
  // A non-breaking hyphen: a chip never breaks across lines.
  return q(name).toUpper().replace(QLatin1Char('_'), QChar(0x2011));
}

QString featureChips(const kernels::IsaFeatures& usable) {
  QString html;
  for (const auto& info : kernels::kIsaFeatureTable) {
    const bool on = usable.*(info.member);
    html += QStringLiteral("<span style='background-color:%1; color:%2'>&nbsp;%3&nbsp;</span> ")
                .arg(on ? theme::colors().chip_on : theme::colors().chip_off,
                     on ? theme::colors().chip_on_text : theme::colors().muted_text,
                     displayName(info.name));
  }
  return html;
}

QString cpuList(const std::vector<int>& cpus) {
  QStringList parts;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts << (i == j ? QString::number(cpus[i])
                     : QStringLiteral("%1–%2").arg(cpus[i]).arg(cpus[j]));
    i = j + 1;
  }
  return parts.join(QStringLiteral(", "));
}

}  // namespace

SystemPage::SystemPage(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  // The page fits its width: texts wrap, nothing scrolls sideways.
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // Without a horizontal scroll bar the area would ask for its content's widest line as its
  // minimum, which, through the window's page stack, squeezed the live panel on every page.
  scroll->setMinimumWidth(360);
  scroll->setFrameShape(QFrame::NoFrame);
  outer->addWidget(scroll);

  auto* content = new QWidget(scroll);
  content->setObjectName(QStringLiteral("systemContent"));
  scroll->setWidget(content);
  auto* layout = new QVBoxLayout(content);
  layout->setContentsMargins(28, 22, 28, 22);
  layout->setSpacing(16);

  auto* header = new QHBoxLayout;
  auto* titles = new QVBoxLayout;
  auto* title = new QLabel(tr("This machine"), content);
  title->setObjectName(QStringLiteral("pageTitle"));
  status_ = new QLabel(content);
  status_->setObjectName(QStringLiteral("pageSubtitle"));
  status_->setWordWrap(true);
  titles->addWidget(title);
  titles->addWidget(status_);
  header->addLayout(titles, 1);
  refresh_ = new QPushButton(tr("Detect again"), content);
  connect(refresh_, &QPushButton::clicked, this, &SystemPage::refreshRequested);
  header->addWidget(refresh_, 0, Qt::AlignTop);
  layout->addLayout(header);

  layout->addWidget(makeCard(tr("What this means"), &findings_));
  auto* grid = new QGridLayout;
  grid->setSpacing(16);
  grid->addWidget(makeCard(tr("Processor"), &processor_), 0, 0, 1, 2);
  grid->addWidget(makeCard(tr("Memory and topology"), &memory_), 1, 0);
  grid->addWidget(makeCard(tr("Accelerators"), &gpu_), 1, 1);
  grid->addWidget(makeCard(tr("Recommended settings"), &recommended_), 2, 0);
  grid->addWidget(makeCard(tr("Disk"), &disk_), 2, 1);
  grid->setColumnStretch(0, 1);
  grid->setColumnStretch(1, 1);
  layout->addLayout(grid);
  layout->addStretch(1);
  showProbing();
  // The findings' colours are written into their text: written anew in a new scheme.
  theme::follow(this, [this] {
    if (report_) setReport(report_);
  });
}

QWidget* SystemPage::makeCard(const QString& title, QLabel** body) {
  auto* card = new QFrame(this);
  card->setObjectName(QStringLiteral("card"));
  auto* v = new QVBoxLayout(card);
  v->setContentsMargins(16, 12, 16, 14);
  v->setSpacing(8);
  auto* heading = new QLabel(title, card);
  heading->setObjectName(QStringLiteral("cardTitle"));
  v->addWidget(heading);
  *body = new QLabel(card);
  (*body)->setWordWrap(true);
  (*body)->setTextFormat(Qt::RichText);
  (*body)->setTextInteractionFlags(Qt::TextSelectableByMouse);
  (*body)->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  // As wide as the card lets it be (rich text would otherwise ask for its longest line).
  (*body)->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::MinimumExpanding);
  (*body)->setMinimumWidth(120);
  v->addWidget(*body, 1);
  return card;
}

void SystemPage::showProbing() {
  status_->setText(tr("Detecting processor, memory, graphics and disk…"));
  refresh_->setEnabled(false);
  for (QLabel* l : {findings_, processor_, memory_, gpu_, disk_, recommended_}) {
    l->setText(QStringLiteral("<span style='color:%1'>%2</span>")
                   .arg(theme::colors().muted_text, tr("Detecting…")));
  }
}

void SystemPage::setReport(const HardwareReportPtr& report) {
  report_ = report;
  refresh_->setEnabled(true);
  if (!report) return;
  const hw::HardwareReport& r = *report;
  status_->setText(
      tr("Detected %1. Tandem chooses its settings from these findings.")
          .arg(QLocale().toString(QDateTime::currentDateTime(), QLocale::ShortFormat)));

  QString f = QStringLiteral("<table cellspacing='0' cellpadding='3'>");
  for (const hw::Finding& finding : r.findings) {
    const char* color = finding.level == hw::FindingLevel::Good      ? theme::colors().good
                        : finding.level == hw::FindingLevel::Warning ? theme::colors().warning
                                                                     : theme::colors().accent;
    f += QStringLiteral(
             "<tr><td valign='top' style='color:%1; font-size:14px; padding-right:8px'>●</td>"
             "<td><b>%2</b><br/><span style='color:%3'>%4</span></td></tr>")
             .arg(color, q(finding.headline).toHtmlEscaped(), theme::colors().muted_text,
                  q(finding.detail).toHtmlEscaped());
  }
  f += QStringLiteral("</table>");
  findings_->setText(f);

  const auto& id = r.isa.identity;
  QString p = row(tr("Model"), q(id.brand.empty() ? id.vendor : id.brand).toHtmlEscaped());
  p += row(tr("Cores"),
           tr("%1 physical cores, %2 hardware threads, %3")
               .arg(r.topology.physical_cores)
               .arg(r.topology.hardware_threads)
               .arg(r.topology.packages == 1 ? tr("1 package")
                                             : tr("%1 packages").arg(r.topology.packages)));
  p += row(tr("Caches"), tr("L2 %1 × %2, L3 %3 × %4")
                             .arg(r.topology.l2_caches)
                             .arg(bytes(r.topology.l2_cache_bytes))
                             .arg(r.topology.l3_caches)
                             .arg(bytes(r.topology.l3_cache_bytes)));
  p += row(tr("Instructions"), featureChips(r.isa.usable));
  processor_rows_ = p;
  showProcessor();

  QString m = QStringLiteral("<table cellspacing='0' cellpadding='2'>");
  if (r.memory.error.empty()) {
    m += row(tr("RAM"), tr("%1 total, %2 available")
                            .arg(bytes(r.memory.total_bytes), bytes(r.memory.available_bytes)));
  } else {
    m += row(tr("RAM"), q(r.memory.error).toHtmlEscaped());
  }
  for (const hw::NumaNode& n : r.topology.numa_nodes) {
    m += row(tr("NUMA node %1").arg(n.os_index), tr("CPUs %1 · %2 cores · %3")
                                                     .arg(cpuList(n.cpus))
                                                     .arg(n.physical_cores)
                                                     .arg(bytes(n.memory_bytes)));
  }
  m += QStringLiteral("</table>");
  memory_->setText(m);

  QString g;
  if (r.gpus.devices.empty()) {
    g += row(tr("GPU"), tr("None found"));
    g += row(tr("Why"), q(r.gpus.reason).toHtmlEscaped());
  }
  for (const hw::GpuDevice& d : r.gpus.devices) {
    g += row(tr("GPU %1").arg(d.index), tr("%1 (compute %2.%3)")
                                            .arg(q(d.name).toHtmlEscaped())
                                            .arg(d.compute_major)
                                            .arg(d.compute_minor));
    g += row(tr("Memory"), tr("%1 free of %2").arg(bytes(d.free_bytes), bytes(d.total_bytes)));
    if (!d.usable) g += row(tr("Not usable"), q(d.not_usable).toHtmlEscaped());
  }
  auto version = [](int v) {
    return v > 0 ? QStringLiteral("%1.%2").arg(v / 1000).arg(v % 1000 / 10) : tr("none");
  };
  g += row(tr("Driver"), version(r.gpus.driver_version));
  g += row(tr("CUDA runtime"),
           r.gpus.compiled ? version(r.gpus.runtime_version) : tr("not built in"));
  gpu_rows_ = g;
  showAccelerators();

  const auto& rec = r.recommendation;
  QString s = QStringLiteral("<table cellspacing='0' cellpadding='3'>");
  auto recRow = [&](const QString& name, const QString& value, const std::string& reason) {
    s += QStringLiteral(
             "<tr><td style='color:%1; padding-right:14px; white-space:nowrap'>%2</td>"
             "<td><b>%3</b><br/><span style='color:%1'>%4</span></td></tr>")
             .arg(theme::colors().muted_text, name, value, q(reason).toHtmlEscaped());
  };
  recRow(tr("CPU backend"), q(hw::backend_label(rec.cpu_backend.value)), rec.cpu_backend.reason);
  recRow(tr("CPU threads"), QString::number(rec.cpu_threads.value), rec.cpu_threads.reason);
  recRow(tr("Thread pools"), QString::number(rec.thread_pools.value), rec.thread_pools.reason);
  s += QStringLiteral("</table>");
  recommended_->setText(s);

  QString d = QStringLiteral("<table cellspacing='0' cellpadding='2'>");
  if (r.disk.error.empty()) {
    d += row(tr("Free"), tr("%1 of %2").arg(bytes(r.disk.free_bytes), bytes(r.disk.total_bytes)));
    d += row(tr("Folder"), q(r.disk.measured_path).toHtmlEscaped());
  } else {
    d += row(tr("Error"), q(r.disk.error).toHtmlEscaped());
  }
  d += QStringLiteral("</table>");
  disk_->setText(d);
}

void SystemPage::setActiveAccelerator(const QString& description, const QString& note) {
  active_ = description;
  active_note_ = note;
  showAccelerators();
}

void SystemPage::setActiveCpuKernels(const QString& kernels, const QString& format,
                                     const QString& widening, const QString& widening_detail,
                                     bool widens) {
  cpu_kernels_ = kernels;
  cpu_format_ = format;
  widening_ = widening;
  widening_detail_ = widening_detail;
  widens_ = widens;
  showProcessor();
}

void SystemPage::showProcessor() {
  if (!report_) return;  // still detecting: shown with the report
  QString p = QStringLiteral("<table cellspacing='0' cellpadding='2'>") + processor_rows_;
  if (cpu_format_ == QLatin1String("native")) {
    // Weights as the files store them (a GGUF file's blocks, or the reference path): none of
    // them goes through the packed kernels the variant names.
    p += row(tr("Kernels"),
             tr("none packed: the model computes on its weights as its files store them"));
  } else if (!cpu_kernels_.isEmpty()) {
    p += row(
        tr("Kernels"),
        tr("%1 (the model's weights packed in %2)").arg(cpu_kernels_, cpu_format_).toHtmlEscaped());
  }
  if (!widening_.isEmpty()) {
    // Where nothing is widened, every product takes the AVX-512 kernel: the line says so.
    QStringList notes;
    if (widens_) notes << tr("Products of fewer tokens multiply quantised activations on AVX-512.");
    if (!widening_detail_.isEmpty()) notes << widening_detail_;
    QString cell = widening_.toHtmlEscaped();
    if (!notes.isEmpty()) {
      cell += QStringLiteral("<br/><span style='color:%1'>%2</span>")
                  .arg(theme::colors().muted_text, notes.join(QLatin1Char(' ')).toHtmlEscaped());
    }
    p += row(tr("Widening"), cell);
  }
  p += QStringLiteral("</table>");
  processor_->setText(p);
}

void SystemPage::showAccelerators() {
  QString g = QStringLiteral("<table cellspacing='0' cellpadding='2'>");
  g += row(tr("In use"), active_.isEmpty() ? tr("none: the model runs on the CPU alone")
                                           : active_.toHtmlEscaped());
  if (!active_note_.isEmpty() && active_.isEmpty())
    g += row(tr("Why"), active_note_.toHtmlEscaped());
  g += gpu_rows_;
  g += row(tr("Emulated"),
           tr("an accelerator emulated on the CPU, to try and measure the hybrid engine without a "
              "GPU: start Tandem with --accelerator emulated"));
  g += QStringLiteral("</table>");
  gpu_->setText(g);
}

QString SystemPage::findingsText() const {
  QStringList parts;
  for (QLabel* l : {findings_, processor_, memory_, gpu_, disk_, recommended_}) {
    QTextDocument doc;
    doc.setHtml(l->text());
    parts << doc.toPlainText();
  }
  return parts.join(QLatin1Char('\n'));
}

}  // namespace tandem::ui
