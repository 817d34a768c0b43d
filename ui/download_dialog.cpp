#include "ui/download_dialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QVBoxLayout>

#include "engine/hub/hub_config.h"
#include "engine/hub/hub_error.h"
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
