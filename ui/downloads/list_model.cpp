#include "ui/downloads/list_model.h"

#include <QLocale>

#include "engine/hw/hardware_report.h"

namespace tandem::ui {
namespace {

QString bytesText(quint64 bytes) {
  return QString::fromStdString(hw::format_bytes(bytes));
}

QString speedText(double bytes_per_s) {
  return bytes_per_s > 0 ? bytesText(static_cast<quint64>(bytes_per_s)) + QStringLiteral("/s")
                         : QString();
}

QString etaText(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
  if (s >= 60) return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60);
  return QStringLiteral("%1 s").arg(s);
}

double fraction(quint64 done, quint64 total) {
  return total == 0 ? -1.0 : static_cast<double>(done) / static_cast<double>(total);
}

QString fileStateText(hub::FileState state) {
  switch (state) {
    case hub::FileState::Queued:
      return QObject::tr("Queued");
    case hub::FileState::Downloading:
      return QObject::tr("Downloading");
    case hub::FileState::Verifying:
      return QObject::tr("Verifying");
    case hub::FileState::Waiting:
      return QObject::tr("Retrying soon");
    case hub::FileState::Paused:
      return QObject::tr("Paused");
    case hub::FileState::Done:
      return QObject::tr("Verified");
    case hub::FileState::Failed:
      return QObject::tr("Failed");
    case hub::FileState::Cancelled:
      return QObject::tr("Stopped");
  }
  return {};
}

// A retry in a few words, for the state column: what is wrong, and that Tandem tries again.
QString retryText(const hub::RetryNotice& n) {
  QString what;
  switch (n.kind) {
    case hub::HubErrorKind::Network:
      what = QObject::tr("No connection to the Hub");
      break;
    case hub::HubErrorKind::Stalled:
      what = QObject::tr("The connection stalled");
      break;
    case hub::HubErrorKind::RateLimited:
      what = QObject::tr("The Hub is limiting requests");
      break;
    case hub::HubErrorKind::ServerError:
      what = QObject::tr("The Hub has trouble");
      break;
    default:
      what = QObject::tr("A request failed");
      break;
  }
  return QObject::tr("%1 · retrying in %2 s (attempt %3 of %4) ⚠")
      .arg(what)
      .arg(std::max<qint64>(1, (n.wait_ms + 999) / 1000))
      .arg(n.attempt + 1)
      .arg(n.max_attempts);
}

QString jobStateText(DownloadJobState state) {
  switch (state) {
    case DownloadJobState::Queued:
      return QObject::tr("Not started");
    case DownloadJobState::Listing:
      return QObject::tr("Checking files and space…");
    case DownloadJobState::Downloading:
      return QObject::tr("Downloading");
    case DownloadJobState::Paused:
      return QObject::tr("Paused");
    case DownloadJobState::Done:
      return QObject::tr("Done");
    case DownloadJobState::Failed:
      return QObject::tr("Failed");
    case DownloadJobState::Cancelled:
      return QObject::tr("Cancelled");
  }
  return {};
}

}  // namespace

QString downloadJobStateName(DownloadJobState state) {
  switch (state) {
    case DownloadJobState::Queued:
      return QStringLiteral("queued");
    case DownloadJobState::Listing:
      return QStringLiteral("listing");
    case DownloadJobState::Downloading:
      return QStringLiteral("downloading");
    case DownloadJobState::Paused:
      return QStringLiteral("paused");
    case DownloadJobState::Done:
      return QStringLiteral("done");
    case DownloadJobState::Failed:
      return QStringLiteral("failed");
    case DownloadJobState::Cancelled:
      return QStringLiteral("cancelled");
  }
  return {};
}

std::optional<DownloadJobState> downloadJobStateFromName(const QString& name) {
  for (auto s : {DownloadJobState::Queued, DownloadJobState::Listing, DownloadJobState::Downloading,
                 DownloadJobState::Paused, DownloadJobState::Done, DownloadJobState::Failed,
                 DownloadJobState::Cancelled}) {
    if (downloadJobStateName(s) == name) return s;
  }
  return std::nullopt;
}

QStringList DownloadListModel::actionsFor(DownloadJobState state) {
  switch (state) {
    case DownloadJobState::Listing:
    case DownloadJobState::Downloading:
      return {QStringLiteral("pause"), QStringLiteral("cancel")};
    case DownloadJobState::Paused:
      return {QStringLiteral("resume"), QStringLiteral("cancel")};
    case DownloadJobState::Queued:
      return {QStringLiteral("resume"), QStringLiteral("remove")};
    case DownloadJobState::Failed:
    case DownloadJobState::Cancelled:
      return {QStringLiteral("retry"), QStringLiteral("remove")};
    case DownloadJobState::Done:
      return {QStringLiteral("remove")};
  }
  return {};
}

DownloadListModel::DownloadListModel(QObject* parent) : QAbstractItemModel(parent) {}

void DownloadListModel::addDownload(quint64 id, const DownloadJobSpec& spec, DownloadJobState state,
                                    const QString& message) {
  Q_ASSERT(id != 0 && rowOf(id) < 0);
  const int row = static_cast<int>(downloads_.size());
  beginInsertRows({}, row, row);
  DownloadRow d;
  d.id = id;
  d.spec = spec;
  d.state = state;
  d.message = message;
  downloads_.push_back(std::move(d));
  endInsertRows();
}

void DownloadListModel::setState(quint64 id, DownloadJobState state, const QString& message) {
  const int row = rowOf(id);
  if (row < 0) return;
  DownloadRow& d = downloads_[row];
  d.state = state;
  d.message = message;
  d.retry.reset();
  if (state != DownloadJobState::Downloading) {
    d.speed = 0;
    d.eta_s.reset();
  }
  rowChanged(row);
}

void DownloadListModel::setRetrying(quint64 id, const hub::RetryNotice& notice) {
  const int row = rowOf(id);
  if (row < 0) return;
  downloads_[row].retry = notice;
  rowChanged(row);
}

void DownloadListModel::setProgress(quint64 id, const hub::DownloadProgress& progress) {
  const int row = rowOf(id);
  if (row < 0) return;
  DownloadRow& d = downloads_[row];
  if (progress.bytes_done > d.done) d.retry.reset();  // bytes flow again
  d.done = progress.bytes_done;
  d.total = progress.bytes_total;
  d.speed = progress.bytes_per_s;
  d.eta_s = progress.eta_s;
  const QModelIndex parent = index(row, 0);
  const int old_count = static_cast<int>(d.files.size());
  const int new_count = static_cast<int>(progress.files.size());
  if (new_count > old_count) {
    beginInsertRows(parent, old_count, new_count - 1);
    d.files.resize(new_count);
    endInsertRows();
  } else if (new_count < old_count) {
    beginRemoveRows(parent, new_count, old_count - 1);
    d.files.resize(new_count);
    endRemoveRows();
  }
  for (int i = 0; i < new_count; ++i) {
    const auto& p = progress.files[static_cast<std::size_t>(i)];
    FileRow& f = d.files[i];
    f.path = QString::fromStdString(p.path);
    f.size = p.size;
    f.done = p.bytes_done;
    f.speed = p.bytes_per_s;
    f.state = p.state;
    f.error = QString::fromStdString(p.error);
  }
  rowChanged(row);
  if (new_count > 0)
    emit dataChanged(index(0, 0, parent), index(new_count - 1, ColumnCount - 1, parent));
}

void DownloadListModel::removeDownload(quint64 id) {
  const int row = rowOf(id);
  if (row < 0) return;
  beginRemoveRows({}, row, row);
  downloads_.removeAt(row);
  endRemoveRows();
}

int DownloadListModel::rowOf(quint64 id) const {
  for (int i = 0; i < downloads_.size(); ++i) {
    if (downloads_[i].id == id) return i;
  }
  return -1;
}

QModelIndex DownloadListModel::indexOf(quint64 id, int column) const {
  const int row = rowOf(id);
  return row < 0 ? QModelIndex() : index(row, column);
}

DownloadJobState DownloadListModel::state(quint64 id) const {
  const int row = rowOf(id);
  return row < 0 ? DownloadJobState::Cancelled : downloads_[row].state;
}

QString DownloadListModel::message(quint64 id) const {
  const int row = rowOf(id);
  return row < 0 ? QString() : downloads_[row].message;
}

DownloadJobSpec DownloadListModel::spec(quint64 id) const {
  const int row = rowOf(id);
  return row < 0 ? DownloadJobSpec{} : downloads_[row].spec;
}

QList<quint64> DownloadListModel::ids() const {
  QList<quint64> out;
  for (const auto& d : downloads_) out << d.id;
  return out;
}

void DownloadListModel::rowChanged(int row) {
  emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
}

// A download's row has internal id 0; a file's row carries the id of its download.
QModelIndex DownloadListModel::index(int row, int column, const QModelIndex& parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount) return {};
  if (!parent.isValid()) {
    return row < downloads_.size() ? createIndex(row, column, quintptr(0)) : QModelIndex();
  }
  if (parent.internalId() != 0 || parent.row() >= downloads_.size()) return {};
  const DownloadRow& d = downloads_[parent.row()];
  return row < d.files.size() ? createIndex(row, column, quintptr(d.id)) : QModelIndex();
}

QModelIndex DownloadListModel::parent(const QModelIndex& child) const {
  if (!child.isValid() || child.internalId() == 0) return {};
  const int row = rowOf(child.internalId());
  return row < 0 ? QModelIndex() : createIndex(row, 0, quintptr(0));
}

int DownloadListModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid()) return static_cast<int>(downloads_.size());
  if (parent.internalId() != 0 || parent.column() != 0) return 0;
  return static_cast<int>(downloads_[parent.row()].files.size());
}

int DownloadListModel::columnCount(const QModelIndex&) const {
  return ColumnCount;
}

QVariant DownloadListModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  if (index.internalId() == 0) return downloadData(downloads_[index.row()], index.column(), role);
  const int row = rowOf(index.internalId());
  if (row < 0) return {};
  const DownloadRow& d = downloads_[row];
  return fileData(d, d.files[index.row()], index.column(), role);
}

QVariant DownloadListModel::downloadData(const DownloadRow& d, int column, int role) const {
  switch (role) {
    case ProgressRole:
      return d.state == DownloadJobState::Done ? 1.0 : fraction(d.done, d.total);
    case BytesDoneRole:
      return d.done;
    case BytesTotalRole:
      return d.total;
    case SpeedRole:
      return d.speed;
    case StateRole:
      return static_cast<int>(d.state);
    case ErrorRole:
      if (d.retry) return QString::fromStdString(d.retry->message);
      return d.state == DownloadJobState::Failed ? d.message : QString();
    case IsDownloadRole:
      return true;
    case DownloadIdRole:
      return d.id;
    case ActionsRole:
      return actionsFor(d.state);
    case Qt::ToolTipRole:
      if (d.retry) return QString::fromStdString(d.retry->message);
      return d.message.isEmpty() ? QVariant() : QVariant(d.message);
    case Qt::DisplayRole:
      break;
    default:
      return {};
  }
  if (column == StateColumn && d.retry) return retryText(*d.retry);
  switch (column) {
    case NameColumn:
      return d.spec.revision == QLatin1String("main")
                 ? d.spec.repo
                 : QStringLiteral("%1 @ %2").arg(d.spec.repo, d.spec.revision);
    case SizeColumn:
      return d.total > 0 ? bytesText(d.total) : QString();
    case ProgressColumn:
      return d.total > 0 ? QStringLiteral("%1 of %2").arg(bytesText(d.done), bytesText(d.total))
                         : QString();
    case SpeedColumn:
      if (d.state != DownloadJobState::Downloading || d.speed <= 0) return QString();
      return d.eta_s ? tr("%1 · %2 left").arg(speedText(d.speed), etaText(*d.eta_s))
                     : speedText(d.speed);
    case StateColumn:  // the message itself is ErrorRole, the tooltip and the page's detail line
      // A message next to a download that goes on is a warning (the memory verdict).
      return !d.message.isEmpty() &&
                     (d.state == DownloadJobState::Downloading || d.state == DownloadJobState::Done)
                 ? jobStateText(d.state) + QStringLiteral(" ⚠")
                 : jobStateText(d.state);
    default:
      return {};
  }
}

QVariant DownloadListModel::fileData(const DownloadRow& d, const FileRow& f, int column,
                                     int role) const {
  switch (role) {
    case ProgressRole:
      return fraction(f.done, f.size) < 0 ? 1.0 : fraction(f.done, f.size);
    case BytesDoneRole:
      return f.done;
    case BytesTotalRole:
      return f.size;
    case SpeedRole:
      return f.speed;
    case StateRole:
      return static_cast<int>(f.state);
    case ErrorRole:
      return f.state == hub::FileState::Failed ? f.error : QString();
    case IsDownloadRole:
      return false;
    case DownloadIdRole:
      return d.id;
    case ActionsRole:
      return QStringList();
    case Qt::ToolTipRole:
      return f.error.isEmpty() ? QVariant() : QVariant(f.error);
    case Qt::DisplayRole:
      break;
    default:
      return {};
  }
  switch (column) {
    case NameColumn:
      return f.path;
    case SizeColumn:
      return bytesText(f.size);
    case ProgressColumn:
      return QStringLiteral("%1 of %2").arg(bytesText(f.done), bytesText(f.size));
    case SpeedColumn:
      return f.state == hub::FileState::Downloading ? speedText(f.speed) : QString();
    case StateColumn:
      return fileStateText(f.state);
    default:
      return {};
  }
}

QVariant DownloadListModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case NameColumn:
      return tr("Name");
    case SizeColumn:
      return tr("Size");
    case ProgressColumn:
      return tr("Progress");
    case SpeedColumn:
      return tr("Speed");
    case StateColumn:
      return tr("State");
    case ActionsColumn:
      return QString();
  }
  return {};
}

QHash<int, QByteArray> DownloadListModel::roleNames() const {
  QHash<int, QByteArray> names = QAbstractItemModel::roleNames();
  names[ProgressRole] = "progress";
  names[BytesDoneRole] = "bytesDone";
  names[BytesTotalRole] = "bytesTotal";
  names[SpeedRole] = "speed";
  names[StateRole] = "state";
  names[ErrorRole] = "error";
  names[IsDownloadRole] = "isDownload";
  names[DownloadIdRole] = "downloadId";
  names[ActionsRole] = "actions";
  return names;
}

}  // namespace tandem::ui
