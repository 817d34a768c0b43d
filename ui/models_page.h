// "Models": every model folder Tandem knows (the one loaded, the recent ones, the demo, the
// models folder's downloads and converted copies) with its family, format, size on disk and
// when it was last used; load, show in the file manager, or delete one.
#pragma once

#include <QDateTime>
#include <QStringList>
#include <QWidget>

class QLabel;
class QPushButton;
class QTreeWidget;

namespace tandem::ui {

struct ModelFolderInfo {
  QString folder;
  QString name;    // the folder's name, or "Built-in demo model"
  QString family;  // "Qwen3-MoE", ...; empty when config.json cannot be read
  QString format;  // "BF16", "FP8", "converted INT8", ...
  qint64 bytes = 0;
  QDateTime last_used;  // invalid: never loaded here
  bool demo = false;
};

// The model folders Tandem knows, `loaded` (may be empty) first.
QStringList known_model_folders(const QString& loaded);
// The built-in demo model's folder.
QString demo_folder();
ModelFolderInfo describe_model_folder(const QString& folder);
// Remembered as loaded now (the recent list and the last-used time).
void remember_model_use(const QString& folder);

class ModelsPage : public QWidget {
  Q_OBJECT
 public:
  explicit ModelsPage(QWidget* parent = nullptr);

  void setLoaded(const QString& folder);
  void refresh();
  // Reads the folders anew, off the UI thread (`refreshed` when shown). The rows shown, and
  // deleting one (off the UI thread; `deleted` when it is gone, then a refresh).
  QList<ModelFolderInfo> rows() const { return rows_; }
  void deleteFolder(const QString& folder);

 signals:
  void loadRequested(const QString& folder);
  // The rows were read anew (refresh runs off the UI thread).
  void refreshed();
  void deleted(const QString& folder, bool ok);

 private:
  QString selected() const;
  void showRows(const QList<ModelFolderInfo>& rows);
  void updateButtons();

  QTreeWidget* table_;
  QPushButton* load_;
  QPushButton* reveal_;
  QPushButton* delete_;
  QLabel* status_;
  QLabel* subtitle_;
  QString loaded_;
  // The row the page chose itself (the model in use), which follows the next model loaded;
  // a row the user chose stays chosen.
  QString chosen_by_page_;
  QList<ModelFolderInfo> rows_;
  quint64 generation_ = 0;  // of the newest refresh; older answers are dropped
};

}  // namespace tandem::ui
