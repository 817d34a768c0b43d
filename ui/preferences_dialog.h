// Preferences: the look (follow the desktop, light, dark), the sampling new chats start
// with, where models are kept, the CPU threads, and how to reach the Hub (token, mirror).
// Stored in QSettings, read where they apply: theme::apply, default_settings,
// MainWindow::modelsFolder and loadModel, DownloadQueue::hubConfig.
#pragma once

#include <QDialog>

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace tandem::ui {

class PreferencesDialog : public QDialog {
  Q_OBJECT
 public:
  explicit PreferencesDialog(QWidget* parent = nullptr);

  // Stores what the fields say (what OK does); false, with the problem shown, when a field
  // cannot be stored as it is (a models folder that cannot be created).
  bool save();
  QString problemText() const;

 private:
  void load();

  QComboBox* theme_;
  QDoubleSpinBox* temperature_;
  QDoubleSpinBox* top_p_;
  QSpinBox* top_k_;
  QDoubleSpinBox* min_p_;
  QSpinBox* max_tokens_;
  QLineEdit* models_;
  QSpinBox* threads_;
  QLineEdit* token_;
  QLineEdit* endpoint_;
  QLabel* problem_;
};

}  // namespace tandem::ui
