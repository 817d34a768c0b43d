// The weight-conversion dialog: choose the source (a model folder or a GGUF file), the method
// and the output folder; see the estimated size and time and the free disk, and for a GGUF
// file whether converting pays on this CPU; follow progress (bytes/s, ETA, current
// layer); cancel and resume; read the verification summary at the end. The converter runs
// on a worker thread.
#pragma once

#include <QDialog>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTimer;
class QTreeWidget;

namespace tandem::convert {
class Converter;
}

namespace tandem::ui {

class ConversionDialog : public QDialog {
  Q_OBJECT
 public:
  explicit ConversionDialog(QWidget* parent = nullptr);
  ~ConversionDialog() override;  // cancels a running conversion and waits for it

  void setSource(const QString& folder);
  // "int8", "int8-rotated", "int4-down8", "int4", "bf16" or "mxfp4"
  void setMethod(const QString& method);
  void setOutput(const QString& folder);
  // Attention, shared experts, dense layers and the output head in BF16 beside INT8 or INT4
  // experts (convert::ConvertOptions::dense_bf16).
  void setDenseBf16(bool on);
  bool denseBf16() const;
  QString source() const;
  QString output() const;
  bool isRunning() const { return running_; }
  bool wasCancelled() const { return cancelled_; }
  QString statusText() const;
  QString estimateText() const;
  // For a GGUF source, whether converting pays on this computer; empty otherwise.
  QString adviceText() const;
  // The verification's verdict over all tensors, after a conversion.
  QString verdictText() const;
  int verifiedTensors() const;
  bool canStart() const;

 public slots:
  void start();
  void cancel();

 signals:
  void finished(bool ok, const QString& output);
  // "Load Converted Model" was pressed: the window loads `folder`.
  void loadRequested(const QString& folder);

 private:
  // Where the converted copy of `source` goes unless the user chooses.
  QString suggestOutput(const QString& source) const;
  void updateEstimate();
  // What keeps the fields from being converted, in the window's words; empty when nothing.
  QString problem() const;
  void fieldsEdited();
  void showVerdict(const std::vector<std::pair<std::string, double>>& errors);
  void onProgress(double done, double total, double bytes_per_s, double eta_s, int layer,
                  int layers);
  void onDone(bool ok, bool cancelled, const QString& message);
  void setRunning(bool running);

  QLineEdit* source_;
  QComboBox* method_;
  QCheckBox* dense_bf16_;
  QLineEdit* output_;
  QLabel* estimate_;
  QLabel* advice_;
  int estimate_generation_ = 0;  // the estimate being made; older ones are dropped
  QLabel* status_;
  QProgressBar* progress_;
  QTreeWidget* verification_;
  QLabel* verdict_;
  QPushButton* load_;
  QTimer* recheck_;
  QString suggested_output_;  // the output folder last suggested from the source
  QPushButton* start_;
  QPushButton* cancel_;
  std::unique_ptr<convert::Converter> converter_;
  std::thread worker_;
  bool running_ = false;
  bool cancelled_ = false;
};

}  // namespace tandem::ui
