// The Downloads page: every download with its files, progress, speed, state and errors,
// the buttons to steer them, and the way to start a new one.
#pragma once

#include <QWidget>

class QTreeView;
class QLabel;
class QPushButton;
class QStackedWidget;

namespace tandem::ui {

class DownloadQueue;
class DownloadDelegate;

class DownloadsPage : public QWidget {
  Q_OBJECT
 public:
  DownloadsPage(DownloadQueue* queue, const QString& modelsFolder, QWidget* parent = nullptr);

  QTreeView* view() const { return view_; }
  DownloadDelegate* delegate() const { return delegate_; }
  QPushButton* newDownloadButton() const { return new_download_; }

 public slots:
  void askForDownload();

 private:
  void updateEmptyState();
  void showDetails();

  DownloadQueue* queue_;
  QString models_folder_;
  QTreeView* view_ = nullptr;
  DownloadDelegate* delegate_ = nullptr;
  QPushButton* new_download_ = nullptr;
  QStackedWidget* body_ = nullptr;
  QLabel* details_ = nullptr;
};

}  // namespace tandem::ui
