#include "ui/conversion_dialog.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>

#include "engine/convert/converter.h"
#include "engine/hw/disk_space.h"
#include "engine/hw/hardware_report.h"
#include "engine/model/demo_model.h"
#include "engine/model/gguf/model.h"
#include "engine/model/gguf/set.h"
#include "engine/plan/memory_planner.h"
#include "kernels/cpu/isa.h"
#include "ui/main_window.h"
#include "ui/theme.h"

namespace tandem::ui {
namespace {

QString bytes(double b) {
  return QString::fromStdString(hw::format_bytes(static_cast<std::uint64_t>(std::max(0.0, b))));
}

QString duration(double seconds) {
  if (seconds < 0 || seconds > 1e7) return QObject::tr("unknown");
  if (seconds < 1) return QObject::tr("under a second");
  const int s = static_cast<int>(seconds);
  return s >= 3600 ? QObject::tr("%1 h %2 min").arg(s / 3600).arg(s % 3600 / 60)
         : s >= 60 ? QObject::tr("%1 min %2 s").arg(s / 60).arg(s % 60)
                   : QObject::tr("%1 s").arg(s);
}

// The largest relative error a tensor is expected to have after each method (measured on
// the fixtures' random weights: INT8 0.7%, INT4 9%, BF16 0.2%; real weights with outliers
// reach a few times more).
double expected_error(const QString& method) {
  return method == QLatin1String("int4") || method == QLatin1String("int4-down8") ? 0.15
         : method == QLatin1String("bf16")                                        ? 0.005
                                           : 0.02;  // int8, and mxfp4's INT8 rest
}

bool is_gguf(const QString& path) {
  return model::is_gguf_path(path.trimmed().toStdString());
}

// The kernels this computer runs (those --cpu-variant forces, else the best it has).
kernels::CpuVariant cpu_variant() {
  try {
    return kernels::active_variant();
  } catch (const std::exception&) {
    return kernels::best_variant(kernels::detect_isa().usable);
  }
}

model::Method method_from(const QString& name) {
  return name == QLatin1String("int4")           ? model::Method::Int4
         : name == QLatin1String("int4-down8")   ? model::Method::Int4Down8
         : name == QLatin1String("int8-rotated") ? model::Method::Int8Rotated
         : name == QLatin1String("bf16")         ? model::Method::Bf16
         : name == QLatin1String("mxfp4")        ? model::Method::Mxfp4
                                                 : model::Method::Int8;
}

}  // namespace

ConversionDialog::ConversionDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Convert Weights"));
  resize(700, 560);
  auto* v = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("Tandem stores the experts that run on the CPU in a format made for its instructions. A "
         "converted copy loads in seconds instead of being packed at every start. The source is "
         "a downloaded model's folder or a GGUF file."),
      this);
  intro->setWordWrap(true);
  v->addWidget(intro);
  auto* form = new QFormLayout;
  source_ = new QLineEdit(this);
  source_->setAccessibleName(tr("Model folder or GGUF file"));
  auto* browse_source = new QPushButton(tr("Browse…"), this);
  auto* browse_menu = new QMenu(browse_source);
  QAction* browse_folder = browse_menu->addAction(tr("Model Folder…"));
  QAction* browse_gguf = browse_menu->addAction(tr("GGUF File…"));
  browse_source->setMenu(browse_menu);
  auto* source_row = new QHBoxLayout;
  source_row->addWidget(source_, 1);
  source_row->addWidget(browse_source);
  form->addRow(tr("Model"), source_row);
  advice_ = new QLabel(this);
  advice_->setWordWrap(true);
  advice_->setAccessibleName(tr("Whether converting pays on this computer"));
  advice_->setVisible(false);
  form->addRow(QString(), advice_);
  method_ = new QComboBox(this);
  // The 8-bit format the plan recommends for this CPU (plan::int8_format_for) is the one
  // offered first: rotated INT8 where AMX takes it in integer tiles.
  const bool rotated = plan::int8_format_for(cpu_variant()) == plan::WeightFormat::Int8Rotated;
  method_->addItem(
      rotated ? tr("INT8: near-lossless, fast") : tr("INT8: near-lossless, fast (recommended)"),
      QStringLiteral("int8"));
  method_->addItem(rotated ? tr("INT8 rotated: the same size, about as exact, prompts up to twice "
                                "as fast with this computer's AMX (recommended)")
                           : tr("INT8 rotated: the same size, prompts up to twice as fast with "
                                "AMX, which this computer lacks, about as exact"),
                   QStringLiteral("int8-rotated"));
  if (rotated) method_->setCurrentIndex(method_->findData(QStringLiteral("int8-rotated")));
  method_->addItem(tr("INT4 with 8-bit downs: the routed experts' down projections in INT8, "
                      "about 73% of the memory of INT8, closer to its accuracy than INT4"),
                   QStringLiteral("int4-down8"));
  method_->addItem(tr("INT4: about 60% of the memory of INT8, slightly less accurate"),
                   QStringLiteral("int4"));
  method_->addItem(tr("BF16: full precision, twice the memory of INT8"), QStringLiteral("bf16"));
  method_->addItem(tr("MXFP4: experts stored as MXFP4 (gpt-oss) kept exactly, the rest INT8"),
                   QStringLiteral("mxfp4"));
  form->addRow(tr("Method"), method_);
  dense_bf16_ = new QCheckBox(tr("Keep attention and the output head in BF16"), this);
  dense_bf16_->setToolTip(
      tr("The matrices every token reads stay at full precision while the experts take the "
         "method above: more accurate for models whose attention is sensitive (DeepSeek-V3, "
         "Kimi-K2), at the cost of memory and some decoding speed."));
  form->addRow(QString(), dense_bf16_);
  output_ = new QLineEdit(this);
  output_->setAccessibleName(tr("Output folder"));
  auto* browse_output = new QPushButton(tr("Browse…"), this);
  auto* output_row = new QHBoxLayout;
  output_row->addWidget(output_, 1);
  output_row->addWidget(browse_output);
  form->addRow(tr("Output folder"), output_row);
  estimate_ = new QLabel(this);
  estimate_->setWordWrap(true);
  form->addRow(tr("Estimate"), estimate_);
  v->addLayout(form);

  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  v->addWidget(progress_);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  v->addWidget(status_);
  verification_ = new QTreeWidget(this);
  verification_->setHeaderLabels({tr("Tensor"), tr("Relative error")});
  verification_->setRootIsDecorated(false);
  verification_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  verification_->setVisible(false);
  verdict_ = new QLabel(this);
  verdict_->setWordWrap(true);
  verdict_->setVisible(false);
  v->addWidget(verdict_);
  v->addWidget(verification_, 1);
  v->addStretch();  // takes the room while the table is hidden, none once it shows

  auto* buttons = new QDialogButtonBox(this);
  start_ = buttons->addButton(tr("Convert"), QDialogButtonBox::AcceptRole);
  start_->setObjectName(QStringLiteral("primary"));
  cancel_ = buttons->addButton(tr("Cancel"), QDialogButtonBox::RejectRole);
  // Beside the box, not in it: a button box shows its hidden buttons again when it is shown.
  load_ = new QPushButton(tr("Load Converted Model"), this);
  load_->setVisible(false);
  connect(load_, &QPushButton::clicked, this, [this] {
    emit loadRequested(output_->text());
    close();
  });
  auto* close = buttons->addButton(QDialogButtonBox::Close);
  auto* button_row = new QHBoxLayout;
  button_row->addWidget(load_);
  button_row->addWidget(buttons, 1);
  v->addLayout(button_row);
  cancel_->setEnabled(false);
  // The buttons act on the conversion; only Close closes the dialog.
  disconnect(buttons, nullptr, this, nullptr);
  connect(start_, &QPushButton::clicked, this, &ConversionDialog::start);
  connect(cancel_, &QPushButton::clicked, this, &ConversionDialog::cancel);
  connect(close, &QPushButton::clicked, this, &QDialog::close);

  connect(browse_folder, &QAction::triggered, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Model folder"), source_->text());
    if (!dir.isEmpty()) setSource(dir);
  });
  connect(browse_gguf, &QAction::triggered, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("GGUF file"), source_->text(),
                                                      tr("GGUF models (*.gguf)"));
    if (!file.isEmpty()) setSource(file);
  });
  connect(browse_output, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Output folder"), output_->text());
    if (!dir.isEmpty()) setOutput(dir);
  });
  // Typing re-checks the fields shortly after it pauses; a message about the old text goes.
  recheck_ = new QTimer(this);
  recheck_->setSingleShot(true);
  recheck_->setInterval(250);
  connect(recheck_, &QTimer::timeout, this, &ConversionDialog::updateEstimate);
  connect(source_, &QLineEdit::textEdited, this, [this] {
    // The output follows the source until it is chosen by hand.
    if (output_->text().isEmpty() || output_->text() == suggested_output_) {
      suggested_output_ = suggestOutput(source_->text());
      output_->setText(suggested_output_);
    }
    fieldsEdited();
  });
  connect(output_, &QLineEdit::textEdited, this, &ConversionDialog::fieldsEdited);
  connect(dense_bf16_, &QCheckBox::toggled, this, [this] { updateEstimate(); });
  connect(method_, &QComboBox::currentIndexChanged, this, [this] {
    dense_bf16_->setEnabled(!running_ &&
                            method_->currentData().toString() != QLatin1String("bf16"));
    if (!source_->text().isEmpty() &&
        (output_->text().isEmpty() || output_->text() == suggested_output_)) {
      suggested_output_ = suggestOutput(source_->text());
      setOutput(suggested_output_);
    }
    fieldsEdited();
  });
  updateEstimate();
}

void ConversionDialog::fieldsEdited() {
  if (running_) return;
  status_->clear();
  verdict_->setVisible(false);
  load_->setVisible(false);
  start_->setEnabled(false);  // until the check below says the fields can be converted
  recheck_->start();
}

QString ConversionDialog::problem() const {
  const QString source = source_->text().trimmed();
  const QString output = output_->text().trimmed();
  if (source.isEmpty()) return tr("Choose the folder of the model to convert, or its GGUF file.");
  const QFileInfo folder(source);
  if (is_gguf(source)) {
    if (!folder.isFile())
      return tr("%1 does not exist. Choose a GGUF file that is on this computer.").arg(source);
  } else if (!folder.isDir())
    return tr("%1 is not a folder. Choose the folder of a downloaded model.").arg(source);
  else if (!QFileInfo(source + QStringLiteral("/config.json")).isFile()) {
    return tr("%1 has no config.json, so it is not a model folder. Choose the folder that holds "
              "the model's config.json and .safetensors files.")
        .arg(source);
  }
  if (output.isEmpty()) return tr("Choose the folder the converted copy goes to.");
  if (QFileInfo(output).absoluteFilePath() == folder.absoluteFilePath())
    return tr("The converted copy needs a folder of its own, not the model's folder.");
  return {};
}

void ConversionDialog::showVerdict(const std::vector<std::pair<std::string, double>>& errors) {
  if (errors.empty()) return;
  const QString method = method_->currentData().toString();
  const double bound = expected_error(method);
  const auto worst =
      std::max_element(errors.begin(), errors.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  const auto beyond =
      std::count_if(errors.begin(), errors.end(), [&](const auto& e) { return e.second > bound; });
  const QString name = method == QLatin1String("int4-down8")     ? tr("INT4 with 8-bit downs")
                       : method == QLatin1String("int8-rotated") ? tr("INT8 rotated")
                                                                 : method.toUpper();
  const QString largest = tr("largest error %1% in %2")
                              .arg(100.0 * worst->second, 0, 'f', 2)
                              .arg(QString::fromStdString(worst->first));
  if (beyond == 0) {
    verdict_->setText(tr("✓ All %1 tensors are as close to the original as %2 should be (%3).")
                          .arg(errors.size())
                          .arg(name, largest));
  } else {
    verdict_->setText(tr("⚠ %1 of %2 tensors are further from the original than %3 usually is "
                         "(over %4%; %5). The model may still work: compare its replies with "
                         "the original's before relying on it, or try INT8.")
                          .arg(beyond)
                          .arg(errors.size())
                          .arg(name)
                          .arg(100.0 * bound, 0, 'f', 1)
                          .arg(largest));
  }
  verdict_->setVisible(true);
}

ConversionDialog::~ConversionDialog() {
  if (converter_) converter_->cancel();
  if (worker_.joinable()) worker_.join();
}

QString ConversionDialog::suggestOutput(const QString& source) const {
  if (source.trimmed().isEmpty()) return {};
  const QFileInfo info(QDir::cleanPath(source.trimmed()));
  // A GGUF file by its name without ".gguf", a split set's without its part number.
  QString base = info.fileName();
  if (is_gguf(source)) {
    const auto split = model::parse_gguf_split_name(info.absoluteFilePath().toStdString());
    base = split ? QFileInfo(QString::fromStdString(split->prefix)).fileName()
                 : info.completeBaseName();
  }
  const QString name = base + QStringLiteral("-tandem-") + method_->currentData().toString();
  // Beside the source where its folder can be written (a model the user downloaded); the
  // built-in demo and other read-only places (an AppImage's own files) go to the models folder.
  const QString demo = QString::fromStdString(model::demo_model_folder());
  const bool beside = QFileInfo(info.absolutePath()).isWritable() &&
                      QDir::cleanPath(info.absoluteFilePath()) != QDir::cleanPath(demo);
  return (beside ? info.absolutePath() : MainWindow::modelsFolder()) + QLatin1Char('/') + name;
}

void ConversionDialog::setSource(const QString& folder) {
  source_->setText(folder);
  suggested_output_ = suggestOutput(folder);
  setOutput(suggested_output_);
}

void ConversionDialog::setDenseBf16(bool on) {
  dense_bf16_->setChecked(on);
}

bool ConversionDialog::denseBf16() const {
  return dense_bf16_->isChecked() && method_->currentData().toString() != QLatin1String("bf16");
}

void ConversionDialog::setMethod(const QString& method) {
  const int i = method_->findData(method);
  if (i >= 0) method_->setCurrentIndex(i);
}

void ConversionDialog::setOutput(const QString& folder) {
  output_->setText(folder);
  updateEstimate();
}

QString ConversionDialog::source() const {
  return source_->text();
}
QString ConversionDialog::output() const {
  return output_->text();
}
QString ConversionDialog::statusText() const {
  return status_->text();
}
int ConversionDialog::verifiedTensors() const {
  return verification_->topLevelItemCount();
}
QString ConversionDialog::estimateText() const {
  return estimate_->text();
}
QString ConversionDialog::verdictText() const {
  return verdict_->isVisible() ? verdict_->text() : QString();
}
bool ConversionDialog::canStart() const {
  return start_->isEnabled();
}

void ConversionDialog::updateEstimate() {
  const int generation = ++estimate_generation_;
  if (const QString p = problem(); !p.isEmpty()) {
    estimate_->setText(p);
    advice_->setVisible(false);
    start_->setEnabled(false);
    return;
  }
  convert::ConvertOptions o;
  o.input = source_->text().trimmed().toStdString();
  o.output = output_->text().trimmed().toStdString();
  o.method = method_from(method_->currentData().toString());
  o.dense_bf16 = denseBf16();
  start_->setEnabled(false);  // until the estimate says the copy fits
  // Planning opens the whole model (a GGUF file's metadata may be megabytes): off the UI thread.
  QPointer<ConversionDialog> self(this);
  (void)QtConcurrent::run([self, o, generation] {
    QString text, advice;
    bool fits = false;
    try {
      const convert::ConvertEstimate e = convert::estimate_conversion(o);
      const hw::DiskSpace disk = hw::probe_disk_space(o.output);
      fits = disk.free_bytes >= e.output_bytes;
      text = tr("about %1 written in %2; %3 free on that disk%4")
                 .arg(bytes(static_cast<double>(e.output_bytes)),
                      e.seconds < 1 ? duration(e.seconds) : tr("about %1").arg(duration(e.seconds)),
                      bytes(static_cast<double>(disk.free_bytes)),
                      fits ? QString() : tr(" — not enough space"));
      advice = QString::fromStdString(e.advice);
    } catch (const std::exception& e) {
      text = QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, generation, text, advice, fits] {
          if (!self || generation != self->estimate_generation_) return;  // a newer one runs
          self->estimate_->setText(text);
          self->advice_->setText(advice);
          self->advice_->setVisible(!advice.isEmpty());
          self->start_->setEnabled(!self->running_ && fits);
        },
        Qt::QueuedConnection);
  });
}

QString ConversionDialog::adviceText() const {
  return advice_->isVisible() ? advice_->text() : QString();
}

void ConversionDialog::setRunning(bool running) {
  running_ = running;
  start_->setEnabled(!running);
  cancel_->setEnabled(running);
  source_->setEnabled(!running);
  method_->setEnabled(!running);
  dense_bf16_->setEnabled(!running && method_->currentData().toString() != QLatin1String("bf16"));
  output_->setEnabled(!running);
}

void ConversionDialog::start() {
  if (running_) return;
  if (const QString p = problem(); !p.isEmpty()) {
    status_->setText(p);
    return;
  }
  if (worker_.joinable()) worker_.join();
  convert::ConvertOptions o;
  o.input = source_->text().toStdString();
  o.output = output_->text().toStdString();
  o.method = method_from(method_->currentData().toString());
  o.dense_bf16 = denseBf16();
  o.verify = true;
  verification_->clear();
  verification_->setVisible(false);
  verdict_->setVisible(false);
  load_->setVisible(false);
  status_->setText(tr("Starting…"));
  try {
    converter_ = std::make_unique<convert::Converter>(o);
  } catch (const std::exception& e) {
    status_->setText(QString::fromUtf8(e.what()));
    return;
  }
  setRunning(true);
  QPointer<ConversionDialog> self(this);
  convert::Converter* converter = converter_.get();
  worker_ = std::thread([self, converter] {
    try {
      const convert::ConvertResult r = converter->run([self](const convert::ConvertProgress& p) {
        QMetaObject::invokeMethod(
            self.data(),
            [self, p] {
              if (self)
                self->onProgress(static_cast<double>(p.bytes_done),
                                 static_cast<double>(p.bytes_total), p.bytes_per_s, p.eta_s,
                                 p.layer, p.layers);
            },
            Qt::QueuedConnection);
      });
      QMetaObject::invokeMethod(
          self.data(),
          [self, r] {
            if (!self) return;
            // Largest error first, as a percentage.
            std::vector<convert::TensorCheck> sorted = r.verification;
            std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
              return a.relative_error > b.relative_error;
            });
            for (const convert::TensorCheck& c : sorted) {
              self->verification_->addTopLevelItem(new QTreeWidgetItem(
                  {QString::fromStdString(c.name),
                   QStringLiteral("%1%").arg(100.0 * c.relative_error, 0, 'f', 2)}));
            }
            self->verification_->setVisible(!r.verification.empty());
            std::vector<std::pair<std::string, double>> errors;
            for (const convert::TensorCheck& c : r.verification)
              errors.emplace_back(c.name, c.relative_error);
            self->showVerdict(errors);
            self->onDone(true, false,
                         tr("Done: the converted copy (%1) was written in %2%3, with at most %4 "
                            "of memory.")
                             .arg(bytes(static_cast<double>(r.bytes_written)), duration(r.seconds),
                                  r.resumed ? tr(", resuming earlier work") : QString(),
                                  bytes(static_cast<double>(r.peak_memory_bytes))));
            self->load_->setVisible(true);
          },
          Qt::QueuedConnection);
    } catch (const convert::ConvertCancelled&) {
      QMetaObject::invokeMethod(
          self.data(),
          [self] {
            if (self)
              self->onDone(
                  false, true,
                  tr("Cancelled. The finished layers are kept: Convert resumes from them."));
          },
          Qt::QueuedConnection);
    } catch (const std::exception& e) {
      const QString message = QString::fromUtf8(e.what());
      QMetaObject::invokeMethod(
          self.data(),
          [self, message] {
            if (self) self->onDone(false, false, message);
          },
          Qt::QueuedConnection);
    }
  });
}

void ConversionDialog::cancel() {
  if (!running_ || !converter_) return;
  converter_->cancel();
  status_->setText(tr("Stopping… the finished layers are kept, and Convert resumes from them."));
}

void ConversionDialog::onProgress(double done, double total, double bytes_per_s, double eta_s,
                                  int layer, int layers) {
  progress_->setValue(total > 0 ? static_cast<int>(1000.0 * done / total) : 0);
  progress_->setFormat(tr("%1 of %2 of the model read").arg(bytes(done), bytes(total)));
  status_->setText(tr("Layer %1 of %2 · %3/s · %4 left")
                       .arg(layer + 1)
                       .arg(layers)
                       .arg(bytes(bytes_per_s), duration(eta_s)));
}

void ConversionDialog::onDone(bool ok, bool cancelled, const QString& message) {
  cancelled_ = cancelled;
  if (worker_.joinable()) worker_.join();
  setRunning(false);
  status_->setText(message);
  if (ok) progress_->setValue(1000);
  updateEstimate();
  emit finished(ok, output_->text());
}

}  // namespace tandem::ui
