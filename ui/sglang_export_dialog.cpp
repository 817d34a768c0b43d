#include "ui/sglang_export_dialog.h"

#include <QApplication>
#include <QClipboard>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFontDatabase>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QVBoxLayout>

#include "ui/theme.h"

namespace tandem::ui {

SglangExportDialog::SglangExportDialog(const plan::SglangExport& exported, QWidget* parent)
    : QDialog(parent) {
  setWindowTitle(tr("Run on SGLang with kt-kernel"));
  setMinimumSize(620, 420);
  auto* v = new QVBoxLayout(this);
  QString intro =
      tr("These commands run this model with this plan on SGLang and kt-kernel, the engine "
         "Tandem's expert placement comes from, under the same parameter names.");
  for (const std::string& note : exported.notes)
    intro += QStringLiteral("<br/>• ") + QString::fromStdString(note).toHtmlEscaped();
  auto* notes = new QLabel(intro, this);
  notes->setWordWrap(true);
  notes->setTextFormat(Qt::RichText);
  v->addWidget(notes);
  script_ = new QPlainTextEdit(this);
  script_->setReadOnly(true);
  script_->setAccessibleName(tr("SGLang commands"));
  script_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  script_->setLineWrapMode(QPlainTextEdit::NoWrap);
  script_->setPlainText(QString::fromStdString(plan::sglang_script(exported)));
  v->addWidget(script_, 1);
  problem_ = new QLabel(this);
  problem_->setWordWrap(true);
  theme::follow(problem_, [label = problem_] {
    label->setStyleSheet(QStringLiteral("color: %1;").arg(theme::colors().error));
  });
  problem_->setVisible(false);
  v->addWidget(problem_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  QPushButton* copy = buttons->addButton(tr("Copy"), QDialogButtonBox::ActionRole);
  QPushButton* save = buttons->addButton(tr("Save Script…"), QDialogButtonBox::ActionRole);
  connect(copy, &QPushButton::clicked, this,
          [this] { QApplication::clipboard()->setText(script()); });
  connect(save, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Save the SGLang commands"), QDir::homePath() + QStringLiteral("/run-sglang.sh"),
        tr("Shell scripts (*.sh)"));
    if (!path.isEmpty()) saveTo(path);
  });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  v->addWidget(buttons);
}

QString SglangExportDialog::script() const {
  return script_->toPlainText();
}

bool SglangExportDialog::saveTo(const QString& path) {
  QSaveFile file(path);
  const QByteArray bytes = script().toUtf8();
  if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit()) {
    problem_->setText(tr("The script could not be saved to %1 (%2); choose another place.")
                          .arg(path, file.errorString()));
    problem_->setVisible(true);
    return false;
  }
  QFile::setPermissions(path, QFile::permissions(path) | QFileDevice::ExeOwner |
                                  QFileDevice::ExeGroup | QFileDevice::ExeOther);
  problem_->setVisible(false);
  return true;
}

QString SglangExportDialog::problemText() const {
  return problem_->isHidden() ? QString() : problem_->text();
}

}  // namespace tandem::ui
