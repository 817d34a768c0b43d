// The setup wizard: welcome, hardware, model (catalog with a verdict per quantization on
// this machine, any Hugging Face repository checked against the Hub, a local folder, or the
// built-in demo), download, conversion, parameters
// (recommended values with their reasons and the memory plan as stacked bars), finish.
// It remembers its choices and can be re-run from the menu.
#pragma once

#include <QWizard>

#include <functional>

#include "engine/hw/disk_space.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/sglang_export.h"
#include "ui/probe_runner.h"
#include "ui/repository_check.h"

class QButtonGroup;
class QLabel;
class QLineEdit;
class QTreeView;
class QStandardItemModel;
class QComboBox;
class QSpinBox;
class QChartView;
class QPushButton;
class QProgressBar;

namespace tandem::ui {

class DownloadQueue;

// What the wizard decided; the main window loads the model with it.
struct SetupChoices {
  QString source;      // "demo", "catalog", "repository" or "folder"
  QString catalog_id;  // catalog, and a repository the catalog has
  QString repo;        // catalog, repository: where the files download from
  QString folder;      // where the model is (or will be, after the download)
  QString cpu_format;  // "int8", "int4", "int4-down8", "bf16", "mxfp4" or "native"
  int threads = 0;
  qint64 context = 0;
  // A GGUF repository's quantisation: its files (repository paths) to download, and the
  // first of them, the one Tandem opens; empty for a model folder.
  QString quantization;
  QStringList files;
  // What is loaded: the folder, or the GGUF file in it.
  QString modelPath() const {
    return files.isEmpty() ? folder : folder + QLatin1Char('/') + files.front();
  }
  // Whether the model's files are all on this computer.
  bool present() const;
};

class SetupWizard : public QWizard {
  Q_OBJECT
 public:
  enum PageId { Welcome, Hardware, Model, Download, Conversion, Parameters, Finish };

  // `queue` runs the downloads (may be null in tests: the download page then only reports).
  SetupWizard(HardwareReportPtr hardware, DownloadQueue* queue, QWidget* parent = nullptr);

  SetupChoices choices() const { return choices_; }
  SetupChoices& mutableChoices() { return choices_; }
  const plan::Plan& plan() const { return plan_; }
  // The CPU format the plan would choose by itself, whatever the format box says.
  plan::WeightFormat recommendedFormat() const { return recommended_format_; }
  // Whether the model planned for has routed experts (as of the last plan).
  bool modelHasExperts() const { return has_experts_; }
  void setHardware(HardwareReportPtr hardware);
  HardwareReportPtr hardware() const { return hardware_; }
  // The model's config as the planner sees it; null when it cannot be read.
  nlohmann::json selectedConfig() const;
  // The repository the model page checked (source "repository"); null before an answer.
  const plan::ModelLookup* repository() const { return repository_.get(); }
  ModelLookupPtr repositoryPtr() const { return repository_; }
  void setRepository(ModelLookupPtr lookup);
  void replan();
  // The SGLang + kt-kernel commands for the chosen model and the plan; throws
  // std::runtime_error with a sentence when it cannot be handed over.
  plan::SglangExport exportSglang() const;

  int nextId() const override;

  static bool completedBefore();
  // Closed without finishing at some start: not opened by itself again (Tools → Setup
  // Assistant still opens it).
  static bool dismissedBefore();
  static void markDismissed();
  static void saveChoices(const SetupChoices& choices);
  static SetupChoices savedChoices();
  // How the download page measures the free space where models go; tests give their own, so
  // that what is offered does not depend on the disk they run on. Empty: the real disk.
  using DiskProbe = std::function<hw::DiskSpace(const std::string& path)>;
  static void setDiskProbe(DiskProbe probe);

 signals:
  void hardwareChanged();
  void planChanged();

 private:
  HardwareReportPtr hardware_;
  DownloadQueue* queue_;
  plan::Plan plan_;
  plan::WeightFormat recommended_format_ = plan::WeightFormat::Int8;
  bool has_experts_ = false;
  SetupChoices choices_;
  ModelLookupPtr repository_;
};

}  // namespace tandem::ui
