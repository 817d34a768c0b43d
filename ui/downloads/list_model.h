// The downloads the user sees: one row per download (a repository), with a child row per
// file. Progress, speed, state and errors are model data, so views only paint them.
#pragma once

#include <QAbstractItemModel>
#include <QStringList>
#include <QVector>
#include <optional>

#include "engine/hub/downloader.h"
#include "engine/hub/hub_config.h"

namespace tandem::ui {

// What to download and where; what the queue persists across restarts.
struct DownloadJobSpec {
  QString repo;
  QString revision = QStringLiteral("main");
  QStringList include;
  QStringList exclude;
  QString destination;
};

enum class DownloadJobState { Queued, Listing, Downloading, Paused, Done, Failed, Cancelled };
QString downloadJobStateName(DownloadJobState state);
std::optional<DownloadJobState> downloadJobStateFromName(const QString& name);

class DownloadListModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  enum Column {
    NameColumn,
    SizeColumn,
    ProgressColumn,
    SpeedColumn,
    StateColumn,
    ActionsColumn,
    ColumnCount
  };
  enum Role {
    ProgressRole = Qt::UserRole + 1,  // double 0..1; -1 while the size is unknown
    BytesDoneRole,                    // qulonglong
    BytesTotalRole,                   // qulonglong
    SpeedRole,                        // double, bytes per second
    StateRole,       // int: DownloadJobState for downloads, hub::FileState for files
    ErrorRole,       // QString, empty when none
    IsDownloadRole,  // bool: a download's row (not a file's)
    DownloadIdRole,  // qulonglong: the download a row belongs to
    ActionsRole,     // QStringList: "pause", "resume", "cancel", "retry", "remove"
  };

  explicit DownloadListModel(QObject* parent = nullptr);

  // Called by the DownloadQueue on the UI thread.
  void addDownload(quint64 id, const DownloadJobSpec& spec, DownloadJobState state,
                   const QString& message = {});
  void setState(quint64 id, DownloadJobState state, const QString& message = {});
  // A request of the download failed and is retried: the row says so in its state column
  // (what is wrong, the attempt) and carries the sentence; cleared by progress or a new state.
  void setRetrying(quint64 id, const hub::RetryNotice& notice);
  void setProgress(quint64 id, const hub::DownloadProgress& progress);
  void removeDownload(quint64 id);

  int rowOf(quint64 id) const;  // -1 when absent
  QModelIndex indexOf(quint64 id, int column = NameColumn) const;
  DownloadJobState state(quint64 id) const;
  QString message(quint64 id) const;
  DownloadJobSpec spec(quint64 id) const;
  QList<quint64> ids() const;

  static QStringList actionsFor(DownloadJobState state);

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  QHash<int, QByteArray> roleNames() const override;

 private:
  struct FileRow {
    QString path;
    quint64 size = 0;
    quint64 done = 0;
    double speed = 0;
    hub::FileState state = hub::FileState::Queued;
    QString error;
  };
  struct DownloadRow {
    quint64 id = 0;
    DownloadJobSpec spec;
    DownloadJobState state = DownloadJobState::Queued;
    QString message;
    quint64 done = 0;
    quint64 total = 0;
    double speed = 0;
    std::optional<double> eta_s;
    QVector<FileRow> files;
    std::optional<hub::RetryNotice> retry;
  };
  QVariant downloadData(const DownloadRow& d, int column, int role) const;
  QVariant fileData(const DownloadRow& d, const FileRow& f, int column, int role) const;
  void rowChanged(int row);

  QVector<DownloadRow> downloads_;
};

}  // namespace tandem::ui
