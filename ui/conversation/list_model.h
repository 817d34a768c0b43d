// The conversation list as a Qt model: one row per conversation, newest first.
#pragma once

#include <QAbstractListModel>

#include "ui/conversation/store.h"

namespace tandem::ui {

class ConversationListModel : public QAbstractListModel {
  Q_OBJECT
 public:
  enum Role { IdRole = Qt::UserRole + 1, UpdatedRole };

  explicit ConversationListModel(ConversationStore& store, QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QHash<int, QByteArray> roleNames() const override;

  QModelIndex create(const QString& title);
  bool remove(int row);
  int rowOf(qint64 id) const;
  qint64 idAt(int row) const;
  // Moves a conversation to the top after new messages (its `updated` changed).
  void touch(qint64 id);
  void reload();

 private:
  ConversationStore& store_;
  QVector<ConversationInfo> rows_;
};

}  // namespace tandem::ui
