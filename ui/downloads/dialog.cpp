#include "ui/downloads/dialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QLocale>
#include <QPointer>
#include <QPushButton>
#include <QRegularExpression>
#include <QVBoxLayout>
#include <QtConcurrent>

#include "engine/hub/hub_config.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/model_search.h"
#include "engine/hw/hardware_report.h"
#include "engine/model/model_spec.h"
#include "engine/plan/memory_planner.h"
#include "ui/downloads/queue.h"
#include "ui/repository_check.h"
#include "ui/theme.h"

namespace tandem::ui {

QStringList splitPatterns(const QString& text) {
  return text.split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts);
}

DownloadDialog::DownloadDialog(const QString& modelsFolder, QWidget* parent)
    : QDialog(parent), models_folder_(modelsFolder) {
  setWindowTitle(tr("Download a Model"));
  setMinimumWidth(520);
  auto* layout = new QVBoxLayout(this);
  auto* intro =
      new QLabel(tr("Downloads from Hugging Face resume where they stopped and every file is "
                    "checked against the hash the Hub publishes."),
                 this);
  intro->setWordWrap(true);
  intro->setObjectName(QStringLiteral("pageSubtitle"));
  layout->addWidget(intro);

  // Find a repository by name on the Hub.
  auto* search_row = new QHBoxLayout;
  search_ = new QLineEdit(this);
  search_->setPlaceholderText(tr("Search Hugging Face, e.g. Qwen3 30B"));
  search_->setAccessibleName(tr("Search Hugging Face"));
  auto* search_button = new QPushButton(tr("Search"), this);
  search_row->addWidget(search_, 1);
  search_row->addWidget(search_button);
  layout->addLayout(search_row);
  search_status_ = new QLabel(this);
  search_status_->setWordWrap(true);
  search_status_->setObjectName(QStringLiteral("pageSubtitle"));
  layout->addWidget(search_status_);
  results_ = new QListWidget(this);
  results_->setAccessibleName(tr("Models found on Hugging Face"));
  results_->setMaximumHeight(160);
  results_->setVisible(false);
  layout->addWidget(results_);
  answer_ = new QLabel(this);
  answer_->setWordWrap(true);
  answer_->setVisible(false);
  layout->addWidget(answer_);
  check_ = new RepositoryCheck(this);
  connect(search_button, &QPushButton::clicked, this, [this] { search(search_->text()); });
  connect(search_, &QLineEdit::returnPressed, this, [this] { search(search_->text()); });
  connect(results_, &QListWidget::currentItemChanged, this, [this](QListWidgetItem* item) {
    if (item != nullptr) choose(item->data(Qt::UserRole).toString());
  });
  connect(check_, &RepositoryCheck::finished, this, [this](const QString& repo, ModelLookupPtr l) {
    if (repo != repo_->text().trimmed()) return;
    QString verdict;
    if (hardware_) {
      const plan::Plan p = plan::make_plan(*hardware_, l->shape, {});
      verdict = p.verdict == plan::Verdict::Fits ? tr("fits this computer")
                : p.verdict == plan::Verdict::FitsWithChanges
                    ? tr("fits this computer with changes")
                    : tr("does not fit this computer");
    }
    answer_->setText(tr("%1: a %2 model, %3 B parameters, %4 to download%5.")
                         .arg(repo, QString::fromStdString(
                                        model::architecture_display_name(l->shape.architecture)))
                         .arg(static_cast<double>(l->shape.total_params()) / 1e9, 0, 'f', 1)
                         .arg(QString::fromStdString(hw::format_bytes(l->download_bytes)))
                         .arg(verdict.isEmpty() ? QString() : QStringLiteral("; ") + verdict));
    answer_->setVisible(true);
    emit checkFinished();
  });
  connect(check_, &RepositoryCheck::failed, this, [this](const QString& repo, const QString& why) {
    if (repo != repo_->text().trimmed()) return;
    answer_->setText(why);
    answer_->setVisible(true);
    emit checkFinished();
  });

  auto* form = new QFormLayout;
  repo_ = new QLineEdit(this);
  repo_->setPlaceholderText(QStringLiteral("Qwen/Qwen3-30B-A3B"));
  revision_ = new QLineEdit(QStringLiteral("main"), this);
  include_ = new QLineEdit(this);
  include_->setPlaceholderText(tr("all files; for example *.safetensors *.json"));
  exclude_ = new QLineEdit(this);
  exclude_->setPlaceholderText(tr("none; for example *.bin original/*"));
  token_ = new QLineEdit(this);
  token_->setEchoMode(QLineEdit::Password);
  token_->setPlaceholderText(tr("only for gated models (hf_…); kept in Tandem's settings"));
  endpoint_ = new QLineEdit(this);
  const QByteArray environment_endpoint = qgetenv("HF_ENDPOINT");
  endpoint_->setPlaceholderText(
      environment_endpoint.isEmpty()
          ? tr("%1 (or a mirror)").arg(QString::fromUtf8(hub::kDefaultEndpoint))
          : tr("%1 (from HF_ENDPOINT)").arg(QString::fromUtf8(environment_endpoint)));
  destination_ = new QLabel(this);
  destination_->setWordWrap(true);
  destination_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  form->addRow(tr("Repository"), repo_);
  form->addRow(tr("Revision"), revision_);
  form->addRow(tr("Only files"), include_);
  form->addRow(tr("Skip files"), exclude_);
  form->addRow(tr("Access token"), token_);
  form->addRow(tr("Hub or mirror"), endpoint_);
  form->addRow(tr("Saved to"), destination_);
  layout->addLayout(form);

  problem_ = new QLabel(this);
  problem_->setWordWrap(true);
  problem_->setStyleSheet(QStringLiteral("color: %1").arg(theme::colors().error));
  layout->addWidget(problem_);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
  start_ = buttons->addButton(tr("Download"), QDialogButtonBox::AcceptRole);
  start_->setObjectName(QStringLiteral("primary"));
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(repo_, &QLineEdit::textChanged, this, &DownloadDialog::validate);
  connect(revision_, &QLineEdit::textChanged, this, &DownloadDialog::validate);
  validate();
}

void DownloadDialog::validate() {
  const QString repo = repo_->text().trimmed();
  QString problem;
  if (!repo.isEmpty()) {
    try {
      hub::validate_repo_id(repo.toStdString());
    } catch (const hub::HubError& e) {
      problem = QString::fromStdString(e.what());
    }
  }
  if (revision_->text().trimmed().isEmpty())
    problem = tr("Give a revision: main, a tag or a commit.");
  problem_->setText(problem);
  problem_->setVisible(!problem.isEmpty());
  start_->setEnabled(!repo.isEmpty() && problem.isEmpty());
  destination_->setText(repo.isEmpty() ? models_folder_ : spec().destination);
}

hub::HubConfig DownloadDialog::hubConfig() const {
  hub::HubConfig hub = DownloadQueue::hubConfig();
  if (!endpoint().isEmpty()) hub.endpoint = endpoint().toStdString();
  if (!token().isEmpty()) hub.token = token().toStdString();
  return hub;
}

void DownloadDialog::search(const QString& term) {
  const QString query = term.trimmed();
  if (query.isEmpty()) {
    search_status_->setText(tr("Type part of a model's name to search for."));
    return;
  }
  search_status_->setText(tr("Searching Hugging Face for “%1”…").arg(query));
  const quint64 generation = ++search_generation_;
  const hub::HubConfig hub = hubConfig();
  const bool need_hardware = hardware_ == nullptr;
  QPointer<DownloadDialog> self(this);
  // The Hub, and this computer's memory for the verdicts, off the UI thread.
  (void)QtConcurrent::run([self, generation, hub, query, need_hardware] {
    std::vector<hub::ModelSearchHit> hits;
    QString error;
    try {
      hub::HubConfig quick = hub;
      quick.retry.max_attempts = std::min(quick.retry.max_attempts, 2);
      quick.warn_on_retry = false;
      hits = hub::search_models(quick, query.toStdString(), 20);
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    std::shared_ptr<const hw::HardwareReport> report;
    if (need_hardware) report = std::make_shared<hw::HardwareReport>(hw::probe_hardware({}));
    QMetaObject::invokeMethod(
        qApp,
        [self, generation, hits, error, report, query] {
          if (!self || generation != self->search_generation_) return;
          if (report) self->hardware_ = report;
          self->results_->clear();
          for (const hub::ModelSearchHit& h : hits) {
            auto* item = new QListWidgetItem(tr("%1 · %2 downloads")
                                                 .arg(QString::fromStdString(h.repo),
                                                      QLocale().toString(qlonglong(h.downloads))),
                                             self->results_);
            item->setData(Qt::UserRole, QString::fromStdString(h.repo));
          }
          self->results_->setVisible(!hits.empty());
          self->search_status_->setText(
              !error.isEmpty() ? error
              : hits.empty()   ? tr("Nothing on Hugging Face matches “%1”.").arg(query)
                               : (hits.size() == 1 ? tr("1 model found")
                                                   : tr("%1 models found").arg(hits.size())) +
                                   tr("; choose one to see its size and whether it fits."));
          emit self->searchFinished();
        },
        Qt::QueuedConnection);
  });
}

void DownloadDialog::choose(const QString& repo) {
  repo_->setText(repo);
  answer_->setText(tr("Asking about %1…").arg(repo));
  answer_->setVisible(true);
  check_->start(repo, hubConfig());
}

QString DownloadDialog::resultText() const {
  return answer_->isHidden() ? QString() : answer_->text();
}

DownloadJobSpec DownloadDialog::spec() const {
  DownloadJobSpec s;
  s.repo = repo_->text().trimmed();
  s.revision = revision_->text().trimmed();
  s.include = splitPatterns(include_->text());
  s.exclude = splitPatterns(exclude_->text());
  s.destination = models_folder_ + QLatin1Char('/') + s.repo;
  return s;
}

QString DownloadDialog::token() const {
  return token_->text().trimmed();
}

void DownloadDialog::setEndpoint(const QString& endpoint) {
  endpoint_->setText(endpoint);
}

QString DownloadDialog::endpoint() const {
  return endpoint_->text().trimmed();
}

}  // namespace tandem::ui
