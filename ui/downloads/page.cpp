#include "ui/downloads/page.h"

#include "ui/secret_store.h"

#include <QDialog>
#include <QFrame>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QStackedWidget>
#include <QStyle>
#include <QTreeView>
#include <QVBoxLayout>

#include "ui/downloads/delegate.h"
#include "ui/downloads/dialog.h"
#include "ui/downloads/list_model.h"
#include "ui/downloads/queue.h"
#include "ui/theme.h"

namespace tandem::ui {

DownloadsPage::DownloadsPage(DownloadQueue* queue, const QString& modelsFolder, QWidget* parent)
    : QWidget(parent), queue_(queue), models_folder_(modelsFolder) {
  setObjectName(QStringLiteral("downloadsPage"));
  setAttribute(Qt::WA_StyledBackground);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 22, 28, 22);
  layout->setSpacing(16);

  auto* header = new QHBoxLayout;
  auto* titles = new QVBoxLayout;
  auto* title = new QLabel(tr("Downloads"), this);
  title->setObjectName(QStringLiteral("pageTitle"));
  auto* subtitle =
      new QLabel(tr("Models from Hugging Face, saved in %1. Downloads resume where they stopped, "
                    "also after a restart, and every file is verified.")
                     .arg(models_folder_),
                 this);
  subtitle->setObjectName(QStringLiteral("pageSubtitle"));
  subtitle->setWordWrap(true);
  titles->addWidget(title);
  titles->addWidget(subtitle);
  header->addLayout(titles, 1);
  new_download_ = new QPushButton(tr("Download a Model…"), this);
  new_download_->setObjectName(QStringLiteral("primary"));
  header->addWidget(new_download_, 0, Qt::AlignTop);
  layout->addLayout(header);

  body_ = new QStackedWidget(this);
  layout->addWidget(body_, 1);

  auto* empty = new QWidget(body_);
  auto* empty_layout = new QVBoxLayout(empty);
  empty_layout->addStretch(2);
  auto* empty_title = new QLabel(tr("No downloads yet"), empty);
  empty_title->setObjectName(QStringLiteral("emptyTitle"));
  empty_title->setAlignment(Qt::AlignCenter);
  auto* empty_text =
      new QLabel(tr("Give a model's name on Hugging Face, such as Qwen/Qwen3-30B-A3B, and Tandem "
                    "fetches its files here.\nGated models need their licence accepted on the "
                    "model page and an access token."),
                 empty);
  empty_text->setObjectName(QStringLiteral("emptyText"));
  empty_text->setAlignment(Qt::AlignCenter);
  empty_text->setWordWrap(true);
  empty_layout->addWidget(empty_title);
  empty_layout->addSpacing(6);
  empty_layout->addWidget(empty_text);
  empty_layout->addStretch(3);
  body_->addWidget(empty);

  auto* card = new QFrame(body_);
  card->setObjectName(QStringLiteral("card"));
  auto* card_layout = new QVBoxLayout(card);
  card_layout->setContentsMargins(1, 1, 1, 8);
  view_ = new QTreeView(card);
  view_->setObjectName(QStringLiteral("downloadsView"));
  view_->setFrameShape(QFrame::NoFrame);
  view_->setModel(queue_->model());
  delegate_ = new DownloadDelegate(view_);
  view_->setItemDelegate(delegate_);
  view_->setUniformRowHeights(true);
  view_->setTextElideMode(Qt::ElideMiddle);  // shards differ at the end of their names
  view_->setAlternatingRowColors(true);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  QHeaderView* columns = view_->header();
  columns->setStretchLastSection(false);
  columns->setSectionResizeMode(DownloadListModel::NameColumn, QHeaderView::Stretch);
  columns->setSectionResizeMode(DownloadListModel::SizeColumn, QHeaderView::ResizeToContents);
  columns->setSectionResizeMode(DownloadListModel::ProgressColumn, QHeaderView::Fixed);
  columns->resizeSection(DownloadListModel::ProgressColumn, 175);
  columns->setSectionResizeMode(DownloadListModel::SpeedColumn, QHeaderView::Fixed);
  columns->resizeSection(DownloadListModel::SpeedColumn, 105);
  columns->setSectionResizeMode(DownloadListModel::StateColumn, QHeaderView::Fixed);
  columns->resizeSection(DownloadListModel::StateColumn, 120);
  columns->setSectionResizeMode(DownloadListModel::ActionsColumn, QHeaderView::Fixed);
  columns->resizeSection(DownloadListModel::ActionsColumn, 140);
  card_layout->addWidget(view_, 1);
  details_ = new QLabel(card);
  details_->setObjectName(QStringLiteral("downloadDetails"));
  details_->setWordWrap(true);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  details_->setContentsMargins(12, 4, 12, 0);
  card_layout->addWidget(details_);
  body_->addWidget(card);

  auto* model = queue_->model();
  connect(model, &QAbstractItemModel::rowsInserted, this,
          [this](const QModelIndex& parent, int first, int last) {
            if (!parent.isValid()) {
              view_->expand(queue_->model()->index(last, 0));
              view_->setCurrentIndex(queue_->model()->index(first, 0));
            } else {
              view_->expand(parent);
            }
            updateEmptyState();
          });
  connect(model, &QAbstractItemModel::rowsRemoved, this, &DownloadsPage::updateEmptyState);
  connect(model, &QAbstractItemModel::dataChanged, this, &DownloadsPage::showDetails);
  connect(view_->selectionModel(), &QItemSelectionModel::currentChanged, this,
          &DownloadsPage::showDetails);
  connect(delegate_, &DownloadDelegate::actionTriggered, queue_, &DownloadQueue::trigger);
  connect(new_download_, &QPushButton::clicked, this, &DownloadsPage::askForDownload);
  for (int row = 0; row < model->rowCount(); ++row) view_->expand(model->index(row, 0));
  updateEmptyState();
  theme::follow(this, [this] { showDetails(); });
}

void DownloadsPage::updateEmptyState() {
  body_->setCurrentIndex(queue_->model()->rowCount() == 0 ? 0 : 1);
  showDetails();
}

void DownloadsPage::showDetails() {
  QModelIndex current = view_->currentIndex();
  if (!current.isValid() && queue_->model()->rowCount() > 0) current = queue_->model()->index(0, 0);
  QString text;
  if (current.isValid()) {
    const QModelIndex row = current.siblingAtColumn(DownloadListModel::NameColumn);
    const QString error = row.data(DownloadListModel::ErrorRole).toString();
    const QString tip = row.data(Qt::ToolTipRole).toString();
    text = !error.isEmpty() ? error : tip;
    details_->setStyleSheet(
        QStringLiteral("color: %1")
            .arg(error.isEmpty() ? theme::colors().muted_text : theme::colors().error));
    if (text.isEmpty() && row.parent().isValid())
      text = row.parent().data(Qt::ToolTipRole).toString();
  }
  details_->setText(text);
  details_->setVisible(!text.isEmpty());
}

void DownloadsPage::askForDownload() {
  QSettings settings;
  DownloadDialog dialog(models_folder_, this);
  dialog.setEndpoint(settings.value(DownloadQueue::kEndpointKey).toString());
  if (dialog.exec() != QDialog::Accepted) return;
  if (!dialog.token().isEmpty())
    secrets::write(QLatin1String(DownloadQueue::kTokenSecret), dialog.token());
  if (dialog.endpoint().isEmpty()) {
    settings.remove(DownloadQueue::kEndpointKey);
  } else {
    settings.setValue(DownloadQueue::kEndpointKey, dialog.endpoint());
  }
  queue_->start(dialog.spec());
}

}  // namespace tandem::ui
