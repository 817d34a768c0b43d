// Asks what to download: the repository, optionally a revision, include/exclude patterns
// a token for gated models and a mirror. Accepts only a repository name the Hub could have.
#pragma once

#include <QDialog>

#include <memory>

#include "engine/hub/hub_config.h"
#include "ui/downloads/list_model.h"

namespace tandem::hw {
struct HardwareReport;
}

class QLineEdit;
class QLabel;
class QListWidget;
class QPushButton;

namespace tandem::ui {

class DownloadDialog : public QDialog {
  Q_OBJECT
 public:
  // `modelsFolder`: the files go into its ORG/NAME subfolder.
  DownloadDialog(const QString& modelsFolder, QWidget* parent = nullptr);

  DownloadJobSpec spec() const;
  QString token() const;  // empty: keep the saved one
  // The mirror to download from; empty: HF_ENDPOINT, else huggingface.co.
  void setEndpoint(const QString& endpoint);
  QString endpoint() const;

  QLineEdit* repoEdit() const { return repo_; }
  QLineEdit* includeEdit() const { return include_; }
  QPushButton* startButton() const { return start_; }
  // Hugging Face search: the term is asked of the Hub off the UI thread; the matches are
  // listed, and choosing one fills the repository and shows its size and whether it fits.
  void search(const QString& term);
  QListWidget* results() const { return results_; }
  QString resultText() const;

 signals:
  void searchFinished();
  void checkFinished();

 private:
  void validate();
  hub::HubConfig hubConfig() const;
  void choose(const QString& repo);

  QLineEdit* search_ = nullptr;
  QListWidget* results_ = nullptr;
  QLabel* search_status_ = nullptr;
  QLabel* answer_ = nullptr;
  class RepositoryCheck* check_ = nullptr;
  std::shared_ptr<const hw::HardwareReport> hardware_;
  quint64 search_generation_ = 0;
  QString models_folder_;
  QLineEdit* repo_ = nullptr;
  QLineEdit* revision_ = nullptr;
  QLineEdit* include_ = nullptr;
  QLineEdit* exclude_ = nullptr;
  QLineEdit* token_ = nullptr;
  QLineEdit* endpoint_ = nullptr;
  QLabel* destination_ = nullptr;
  QLabel* problem_ = nullptr;
  QPushButton* start_ = nullptr;
};

// "*.safetensors, *.json  config.json" -> {"*.safetensors", "*.json", "config.json"}
QStringList splitPatterns(const QString& text);

}  // namespace tandem::ui
