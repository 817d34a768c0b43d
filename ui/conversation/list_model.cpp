#include "ui/conversation/list_model.h"

#include <QLocale>

namespace tandem::ui {

ConversationListModel::ConversationListModel(ConversationStore& store, QObject* parent)
    : QAbstractListModel(parent), store_(store) {
  rows_ = store_.conversations();
}

int ConversationListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : rows_.size();
}

QVariant ConversationListModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const ConversationInfo& c = rows_[index.row()];
  switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
      return c.title;
    case Qt::ToolTipRole:
      return tr("%1\nLast message %2")
          .arg(c.title, QLocale().toString(c.updated, QLocale::ShortFormat));
    case IdRole:
      return c.id;
    case UpdatedRole:
      return c.updated;
    default:
      return {};
  }
}

bool ConversationListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !checkIndex(index, CheckIndexOption::IndexIsValid)) return false;
  const QString title = value.toString().trimmed();
  if (title.isEmpty() || !store_.renameConversation(rows_[index.row()].id, title)) return false;
  rows_[index.row()].title = title;
  emit dataChanged(index, index, {Qt::DisplayRole, Qt::EditRole, Qt::ToolTipRole});
  return true;
}

Qt::ItemFlags ConversationListModel::flags(const QModelIndex& index) const {
  return QAbstractListModel::flags(index) |
         (index.isValid() ? Qt::ItemIsEditable : Qt::NoItemFlags);
}

QHash<int, QByteArray> ConversationListModel::roleNames() const {
  auto names = QAbstractListModel::roleNames();
  names[IdRole] = "conversationId";
  names[UpdatedRole] = "updated";
  return names;
}

QModelIndex ConversationListModel::create(const QString& title) {
  const qint64 id = store_.createConversation(title);
  if (id == 0) return {};
  beginInsertRows({}, 0, 0);
  rows_.prepend({id, title, QDateTime::currentDateTime()});
  endInsertRows();
  return index(0);
}

bool ConversationListModel::remove(int row) {
  if (row < 0 || row >= rows_.size() || !store_.deleteConversation(rows_[row].id)) return false;
  beginRemoveRows({}, row, row);
  rows_.removeAt(row);
  endRemoveRows();
  return true;
}

int ConversationListModel::rowOf(qint64 id) const {
  for (int i = 0; i < rows_.size(); ++i) {
    if (rows_[i].id == id) return i;
  }
  return -1;
}

qint64 ConversationListModel::idAt(int row) const {
  return row >= 0 && row < rows_.size() ? rows_[row].id : 0;
}

void ConversationListModel::touch(qint64 id) {
  const int row = rowOf(id);
  if (row < 0) return;
  rows_[row].updated = QDateTime::currentDateTime();
  if (row > 0) {
    beginMoveRows({}, row, row, {}, 0);
    rows_.move(row, 0);
    endMoveRows();
  }
  emit dataChanged(index(0), index(0), {UpdatedRole, Qt::ToolTipRole});
}

void ConversationListModel::reload() {
  beginResetModel();
  rows_ = store_.conversations();
  endResetModel();
}

}  // namespace tandem::ui
