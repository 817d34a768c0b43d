#include "ui/models_page.h"

#include <QDesktopServices>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPointer>
#include <QPushButton>
#include <QSettings>
#include <QTreeWidget>
#include <QUrl>
#include <QVBoxLayout>
#include <QtConcurrent>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/hw/hardware_report.h"
#include "engine/model/demo_model.h"
#include "engine/model/gguf/model.h"
#include "engine/model/gguf/set.h"
#include "engine/model/manifest.h"
#include "engine/model/model_spec.h"
#include "ui/main_window.h"
#include "ui/theme.h"

namespace tandem::ui {
namespace {

// A model folder (config.json), or a GGUF file (a single one or a split set's first part).
bool is_model_folder(const QString& f) {
  if (f.isEmpty()) return false;
  if (model::is_gguf_path(f.toStdString()))
    return QFileInfo(f).isFile() && model::is_listed_gguf(f.toStdString());
  return QFileInfo(f + QStringLiteral("/config.json")).isFile();
}

// The GGUF models directly in `folder`; a converted folder's base.gguf is part of that
// folder's model, not one of its own.
void add_gguf_files(const QDir& folder, const std::function<void(const QString&)>& add) {
  const std::string base = model::converted_gguf(folder.path().toStdString());
  for (const QString& name :
       folder.entryList({QStringLiteral("*.gguf")}, QDir::Files, QDir::Name)) {
    const QString path = folder.filePath(name);
    if (!base.empty() && QFileInfo(path) == QFileInfo(QString::fromStdString(base))) continue;
    add(path);
  }
}

nlohmann::json read_json(const QString& path) {
  std::ifstream in(path.toStdString());
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

QString demo_folder() {
  return QString::fromStdString(model::demo_model_folder());
}

QStringList known_model_folders(const QString& loaded) {
  QStringList folders;
  const auto add = [&](const QString& f) {
    if (is_model_folder(f) && !folders.contains(f)) folders << f;
  };
  add(loaded);
  for (const QString& f : QSettings().value(QStringLiteral("model/recent")).toStringList()) add(f);
  add(demo_folder());
  // Downloaded models: ORG/NAME folders of the models folder, and converted copies beside.
  const QDir models(MainWindow::modelsFolder());
  // GGUF files there too, or in the models folder itself.
  add_gguf_files(models, add);
  for (const QString& org : models.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
    add(models.filePath(org));
    const QDir sub(models.filePath(org));
    add_gguf_files(sub, add);
    for (const QString& name : sub.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
      add(sub.filePath(name));
      const QDir repo(sub.filePath(name));
      add_gguf_files(repo, add);
      // Converted copies of a repository's GGUF files are made beside them.
      for (const QString& copy : repo.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        if (QFileInfo::exists(repo.filePath(copy) + QLatin1Char('/') +
                              QString::fromLatin1(model::kManifestName)))
          add(repo.filePath(copy));
      }
    }
  }
  return folders;
}

ModelFolderInfo describe_model_folder(const QString& folder) {
  ModelFolderInfo m;
  m.folder = folder;
  m.demo = folder == demo_folder();
  if (model::is_gguf_path(folder.toStdString())) {
    // A GGUF file: its name without the split part's suffix, what its metadata says.
    m.name = QFileInfo(folder).fileName();
    if (const auto split = model::parse_gguf_split_name(folder.toStdString()))
      m.name =
          QFileInfo(QString::fromStdString(split->prefix)).fileName() + QStringLiteral(".gguf");
    try {
      const model::GgufSummary g = model::summarize_gguf(folder.toStdString());
      m.family = QString::fromStdString(g.family);
      m.format = QObject::tr("GGUF %1").arg(QString::fromStdString(g.format));
      m.bytes = static_cast<qint64>(g.bytes);
    } catch (const std::exception& e) {
      m.format = QObject::tr("unreadable GGUF");
      m.bytes = QFileInfo(folder).size();
    }
    m.last_used = QSettings().value(QStringLiteral("model/lastUsed/") + folder).toDateTime();
    return m;
  }
  m.name = m.demo ? QObject::tr("Built-in demo model") : QFileInfo(folder).fileName();
  const nlohmann::json config = read_json(folder + QStringLiteral("/config.json"));
  if (config.is_object() && config.contains("architectures") &&
      config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    m.family = QString::fromStdString(
        model::architecture_display_name(config["architectures"][0].get<std::string>()));
  }
  const nlohmann::json manifest = read_json(folder + QStringLiteral("/tandem-manifest.json"));
  if (manifest.is_object() && manifest.contains("method") && manifest["method"].is_string()) {
    m.format = QObject::tr("converted %1")
                   .arg(QString::fromStdString(manifest["method"].get<std::string>()).toUpper());
  } else if (config.is_object() && config.contains("quantization_config") &&
             config["quantization_config"].is_object()) {
    const std::string method = config["quantization_config"].value("quant_method", std::string());
    m.format = method == "mxfp4"                                   ? QStringLiteral("MXFP4")
               : method == "fp8" || method == "compressed-tensors" ? QStringLiteral("FP8")
                                                                   : QString::fromStdString(method);
  } else if (config.is_object()) {
    const std::string dtype = config.value("torch_dtype", config.value("dtype", std::string()));
    m.format = dtype == "bfloat16"  ? QStringLiteral("BF16")
               : dtype == "float16" ? QStringLiteral("F16")
               : dtype == "float32" ? QStringLiteral("F32")
                                    : QString::fromStdString(dtype);
  }
  QDirIterator files(folder, QDir::Files, QDirIterator::Subdirectories);
  while (files.hasNext()) {
    files.next();
    m.bytes += files.fileInfo().size();
  }
  m.last_used = QSettings().value(QStringLiteral("model/lastUsed/") + folder).toDateTime();
  return m;
}

void remember_model_use(const QString& folder) {
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("model/recent")).toStringList();
  recent.removeAll(folder);
  recent.prepend(folder);
  while (recent.size() > 8) recent.removeLast();
  settings.setValue(QStringLiteral("model/recent"), recent);
  settings.setValue(QStringLiteral("model/lastUsed/") + folder, QDateTime::currentDateTime());
}

ModelsPage::ModelsPage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("modelsPage"));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(28, 22, 28, 22);
  auto* title = new QLabel(tr("Models"), this);
  title->setObjectName(QStringLiteral("pageTitle"));
  v->addWidget(title);
  subtitle_ = new QLabel(this);
  subtitle_->setObjectName(QStringLiteral("pageSubtitle"));
  subtitle_->setWordWrap(true);
  v->addWidget(subtitle_);
  table_ = new QTreeWidget(this);
  table_->setAccessibleName(tr("Models on this computer"));
  table_->setRootIsDecorated(false);
  table_->setHeaderLabels({tr("Model"), tr("Family"), tr("Format"), tr("Size"), tr("Last used")});
  table_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  v->addWidget(table_, 1);
  auto* buttons = new QHBoxLayout;
  load_ = new QPushButton(tr("Load"), this);
  load_->setObjectName(QStringLiteral("primary"));
  reveal_ = new QPushButton(tr("Show in File Manager"), this);
  delete_ = new QPushButton(tr("Delete…"), this);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  buttons->addWidget(load_);
  buttons->addWidget(reveal_);
  buttons->addWidget(delete_);
  buttons->addWidget(status_, 1);
  v->addLayout(buttons);
  connect(table_, &QTreeWidget::itemSelectionChanged, this, &ModelsPage::updateButtons);
  connect(table_, &QTreeWidget::itemDoubleClicked, this, [this] {
    if (!selected().isEmpty()) emit loadRequested(selected());
  });
  connect(load_, &QPushButton::clicked, this, [this] { emit loadRequested(selected()); });
  connect(reveal_, &QPushButton::clicked, this, [this] {
    // A GGUF file is shown by its folder.
    const QFileInfo info(selected());
    QDesktopServices::openUrl(
        QUrl::fromLocalFile(info.isFile() ? info.absolutePath() : selected()));
  });
  connect(delete_, &QPushButton::clicked, this, [this] {
    const QString folder = selected();
    if (QMessageBox::question(this, tr("Delete model"),
                              tr("Delete %1 and its files from this computer? This cannot be "
                                 "undone.")
                                  .arg(folder)) == QMessageBox::Yes)
      deleteFolder(folder);
  });
}

void ModelsPage::setLoaded(const QString& folder) {
  loaded_ = folder;
  updateButtons();
  if (isVisible()) refresh();  // otherwise when the page is shown
}

void ModelsPage::refresh() {
  // The folder may have changed in Preferences since the page was made.
  subtitle_->setText(tr("The models on this computer: downloaded, converted, GGUF files, and "
                        "the built-in demo. Downloads and converted copies go to %1.")
                         .arg(MainWindow::modelsFolder()));
  // Listing folders and adding up gigabytes of files is disk work: off the UI thread.
  const quint64 generation = ++generation_;
  const QString loaded = loaded_;
  QPointer<ModelsPage> self(this);
  (void)QtConcurrent::run([self, generation, loaded] {
    QList<ModelFolderInfo> rows;
    for (const QString& folder : known_model_folders(loaded)) rows << describe_model_folder(folder);
    QMetaObject::invokeMethod(
        qApp,
        [self, generation, rows] {
          if (self && generation == self->generation_) self->showRows(rows);
        },
        Qt::QueuedConnection);
  });
}

void ModelsPage::showRows(const QList<ModelFolderInfo>& rows) {
  const QString chosen = selected();
  const bool by_user = !chosen.isEmpty() && chosen != chosen_by_page_;
  // With nothing in use yet the page chooses the first row itself, so that the view does not
  // (it would on focus, and that would pass for the user's choice).
  const QString page_choice = !loaded_.isEmpty() ? loaded_
                              : !rows.isEmpty()  ? rows.front().folder
                                                 : QString();
  const QString keep = by_user ? chosen : page_choice;
  chosen_by_page_ = by_user ? QString() : page_choice;
  rows_ = rows;
  table_->clear();
  for (const ModelFolderInfo& m : rows_) {
    auto* item = new QTreeWidgetItem(
        {m.name + (m.folder == loaded_ ? tr(" (loaded)") : QString()), m.family, m.format,
         QString::fromStdString(hw::format_bytes(static_cast<std::uint64_t>(m.bytes))),
         m.last_used.isValid() ? QLocale().toString(m.last_used, QLocale::ShortFormat)
                               : tr("never here")});
    item->setData(0, Qt::UserRole, m.folder);
    item->setToolTip(0, m.folder);
    table_->addTopLevelItem(item);
    // The row the user chose stays chosen; else the model in use is (not the first row).
    if (m.folder == keep) table_->setCurrentItem(item);
  }
  for (int c = 1; c < 5; ++c) table_->resizeColumnToContents(c);
  updateButtons();
  emit refreshed();
}

QString ModelsPage::selected() const {
  const QTreeWidgetItem* item = table_->currentItem();
  return item != nullptr ? item->data(0, Qt::UserRole).toString() : QString();
}

void ModelsPage::updateButtons() {
  const QString folder = selected();
  load_->setEnabled(!folder.isEmpty() && folder != loaded_);
  reveal_->setEnabled(!folder.isEmpty());
  // The demo ships with Tandem, and the model in use stays until another is loaded.
  const bool demo = folder == demo_folder();
  delete_->setEnabled(!folder.isEmpty() && !demo && folder != loaded_);
  delete_->setToolTip(demo ? tr("The built-in demo model is part of Tandem.")
                      : folder == loaded_ && !folder.isEmpty() ? tr("Load another model first.")
                                                               : QString());
}

void ModelsPage::deleteFolder(const QString& folder) {
  if (folder.isEmpty() || folder == loaded_ || folder == demo_folder()) return;
  status_->setText(tr("Deleting %1…").arg(QFileInfo(folder).fileName()));
  delete_->setEnabled(false);
  // A model is many gigabytes: removed off the UI thread.
  QPointer<ModelsPage> self(this);
  (void)QtConcurrent::run([self, folder] {
    bool ok = true;
    if (model::is_gguf_path(folder.toStdString())) {
      // A GGUF model is its file, or every part of its split set.
      QStringList parts{folder};
      try {
        parts.clear();
        for (const std::string& p : model::summarize_gguf(folder.toStdString()).parts)
          parts << QString::fromStdString(p);
      } catch (const std::exception&) {
      }
      for (const QString& p : parts) ok = QFile::remove(p) && ok;
    } else {
      ok = QDir(folder).removeRecursively();
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, folder, ok] {
          if (!self) return;
          QSettings settings;
          QStringList recent = settings.value(QStringLiteral("model/recent")).toStringList();
          recent.removeAll(folder);
          settings.setValue(QStringLiteral("model/recent"), recent);
          settings.remove(QStringLiteral("model/lastUsed/") + folder);
          self->status_->setText(ok ? tr("%1 was deleted.").arg(QFileInfo(folder).fileName())
                                    : tr("%1 could not be deleted completely; check its "
                                         "permissions in the file manager.")
                                          .arg(folder));
          self->refresh();
          emit self->deleted(folder, ok);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace tandem::ui
