// "Run on SGLang": the SGLang + kt-kernel commands for the model and the plan (plan/
// sglang_export.h), with what differs and when SGLang is the better choice; copy them or
// save them as a script.
#pragma once

#include <QDialog>

#include "engine/plan/sglang_export.h"

class QLabel;
class QPlainTextEdit;

namespace tandem::ui {

class SglangExportDialog : public QDialog {
  Q_OBJECT
 public:
  SglangExportDialog(const plan::SglangExport& exported, QWidget* parent = nullptr);

  QString script() const;
  // Writes the script whole (renamed into place) and makes it executable; false, with the
  // reason shown, when it cannot.
  bool saveTo(const QString& path);
  QString problemText() const;

 private:
  QPlainTextEdit* script_;
  QLabel* problem_;
};

}  // namespace tandem::ui
