#include "ui/setup_wizard.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QButtonGroup>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QLegend>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTreeView>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QWizardPage>
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>

#include "engine/hub/hub_config.h"
#include "engine/hub/repo_metadata.h"
#include "engine/model/demo_model.h"
#include "engine/model/model_error.h"
#include "engine/model/model_spec.h"
#include "engine/plan/catalog.h"
#include "engine/plan/model_lookup.h"
#include "engine/plan/quantization_choice.h"
#include "engine/schedule/routing_stats.h"
#include "ui/downloads/queue.h"
#include "ui/main_window.h"
#include "ui/sglang_export_dialog.h"
#include "ui/theme.h"

namespace tandem::ui {
namespace {

SetupWizard::DiskProbe& disk_probe() {
  static SetupWizard::DiskProbe probe;
  return probe;
}

hw::DiskSpace probe_models_disk() {
  const std::string folder = MainWindow::modelsFolder().toStdString();
  return disk_probe() ? disk_probe()(folder) : hw::probe_disk_space(folder);
}

QString q(const std::string& s) {
  return QString::fromStdString(s);
}
QString gib(std::uint64_t b) {
  return QStringLiteral("%1 GiB").arg(static_cast<double>(b) / (1ull << 30), 0, 'f', 1);
}

QLabel* paragraph(const QString& text, QWidget* parent) {
  auto* l = new QLabel(text, parent);
  l->setWordWrap(true);
  return l;
}

// A CPU format as the pages name it: "INT8", "INT8 rotated", "INT4", "INT4 (8-bit downs)".
QString format_title(plan::WeightFormat f) {
  if (f == plan::WeightFormat::Int4Down8) return SetupWizard::tr("INT4 (8-bit downs)");
  if (f == plan::WeightFormat::Int8Rotated) return SetupWizard::tr("INT8 rotated");
  return q(std::string(plan::format_name(f))).toUpper();
}

// The verdict per CPU format the planner picks on this machine, at its three qualities ("INT8
// fits · INT4 fits"): a plan whose only change was a smaller format than the quality wished
// says that format fits (INT4 for INT8 is "INT4 fits", not "INT4 fits with changes" beside
// "INT4 fits"); other changes (a shorter context, the KV cache in 8 bits) say "with changes".
// Coloured by the best, which setup can reach by the format it chooses.
struct Verdicts {
  QString text;
  QColor color;
};
Verdicts verdicts_for(const hw::HardwareReport& hw, const plan::ModelShape& shape) {
  // Per format, in the order the qualities pick them, the best any plan gives it: 0 fits,
  // 1 fits with changes (2, does not fit, names no format).
  QList<QPair<QString, int>> formats;
  int best = 2;
  for (plan::Quality quality :
       {plan::Quality::Quality, plan::Quality::Balanced, plan::Quality::Speed}) {
    const plan::Plan p = plan::make_plan(hw, shape, {8192, quality, {}});
    const bool other_changes = static_cast<int>(p.changes.size()) > p.cpu_format_changes;
    const int level = p.verdict == plan::Verdict::DoesNotFit ? 2 : other_changes ? 1 : 0;
    best = std::min(best, level);
    if (level == 2) continue;
    const QString fmt = format_title(p.cpu_format);
    auto seen = std::find_if(formats.begin(), formats.end(),
                             [&](const QPair<QString, int>& f) { return f.first == fmt; });
    if (seen == formats.end())
      formats.append({fmt, level});
    else
      seen->second = std::min(seen->second, level);
  }
  QStringList text;
  for (const auto& [fmt, level] : formats)
    text << (level == 0 ? SetupWizard::tr("%1 fits") : SetupWizard::tr("%1 fits with changes"))
                .arg(fmt);
  return {text.isEmpty() ? SetupWizard::tr("does not fit") : text.join(QStringLiteral(" · ")),
          QColor(best == 0   ? theme::colors().good
                 : best == 1 ? theme::colors().warning
                             : theme::colors().error)};
}

// What the model's files take: listed by the Hub, or estimated from the parameters.
QString download_size(const plan::ModelLookup& l) {
  const QString format = q(l.stored.name).toUpper();
  if (l.download_bytes_listed) {
    const QString files = l.download_files == 1 ? SetupWizard::tr("1 file")
                                                : SetupWizard::tr("%1 files").arg(l.download_files);
    return SetupWizard::tr("%1 to download (%2, %3)").arg(gib(l.download_bytes), format, files);
  }
  return SetupWizard::tr("about %1 to download (%2)").arg(gib(l.download_bytes), format);
}

// The folder's config.json; null with `why` (a sentence) when it is missing or not JSON.
nlohmann::json read_config(const QString& folder, QString* why = nullptr) {
  std::ifstream in((folder + QStringLiteral("/config.json")).toStdString());
  if (!in) {
    if (why)
      *why = QObject::tr("%1 has no config.json; choose the folder that holds the model's files.")
                 .arg(folder);
    return nullptr;
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    if (why) {
      *why = QObject::tr(
                 "The config.json in %1 is not valid JSON (at byte %2): the file is "
                 "damaged or was cut short; download the model again.")
                 .arg(folder)
                 .arg(e.byte);
    }
    return nullptr;
  }
}

// A plan parameter in plain words; the seeds' name (kt-method, cpuinfer, ...) goes beside it.
QString plain_name(const std::string& name) {
  static const std::map<std::string, const char*> names = {
      {"kt-method", QT_TRANSLATE_NOOP("SetupWizard", "How the CPU computes its experts")},
      {"cpuinfer", QT_TRANSLATE_NOOP("SetupWizard", "CPU threads")},
      {"threadpool-count", QT_TRANSLATE_NOOP("SetupWizard", "Groups of CPU threads")},
      {"num-gpu-experts", QT_TRANSLATE_NOOP("SetupWizard", "Experts per layer on the GPU")},
      {"max-deferred-experts-per-token",
       QT_TRANSLATE_NOOP("SetupWizard", "CPU experts per token left for the next layer")},
      {"gpu-prefill-token-threshold",
       QT_TRANSLATE_NOOP("SetupWizard", "Prompts long enough to run on the GPU layer by layer")},
      {"expert-placement-strategy",
       QT_TRANSLATE_NOOP("SetupWizard", "Which experts go on the GPU")},
      {"enable-dynamic-expert-update",
       QT_TRANSLATE_NOOP("SetupWizard", "Move experts that turn busy onto the GPU")},
      {"expert-stats", QT_TRANSLATE_NOOP("SetupWizard", "Routing statistics read")},
      {"context-length", QT_TRANSLATE_NOOP("SetupWizard", "Context length (tokens)")},
      {"kv-cache", QT_TRANSLATE_NOOP("SetupWizard", "How the CPU keeps the KV cache")},
      {"prefill-chunk", QT_TRANSLATE_NOOP("SetupWizard", "Prompt tokens computed per pass")},
      {"accelerator", QT_TRANSLATE_NOOP("SetupWizard", "Accelerator")},
  };
  const auto it = names.find(name);
  return it == names.end() ? q(name) : SetupWizard::tr(it->second);
}

std::optional<plan::WeightFormat> format_from(const QString& name) {
  if (name == QLatin1String("int8")) return plan::WeightFormat::Int8;
  if (name == QLatin1String("int8-rotated")) return plan::WeightFormat::Int8Rotated;
  if (name == QLatin1String("int4")) return plan::WeightFormat::Int4;
  if (name == QLatin1String("int4-down8")) return plan::WeightFormat::Int4Down8;
  if (name == QLatin1String("bf16")) return plan::WeightFormat::Bf16;
  if (name == QLatin1String("mxfp4")) return plan::WeightFormat::Mxfp4;
  return std::nullopt;  // "native" or none: the plan's own choice
}

// A CPU format the format box names (its data), as the pages write it.
QString choice_title(const QString& name) {
  const std::optional<plan::WeightFormat> f = format_from(name);
  return f ? format_title(*f) : name.toUpper();
}

QString catalog_folder(const plan::CatalogEntry& e) {
  return MainWindow::modelsFolder() + QLatin1Char('/') + q(e.repo);
}

// ---------------------------------------------------------------------------------------

class WelcomePage : public QWizardPage {
 public:
  explicit WelcomePage(QWidget* parent) : QWizardPage(parent) {
    setTitle(tr("Welcome to Tandem"));
    setSubTitle(
        tr("Run large mixture-of-experts models on this computer, with the GPU and the CPU working "
           "together."));
    auto* v = new QVBoxLayout(this);
    v->addWidget(paragraph(tr("This assistant checks what your computer can do, helps you pick a "
                              "model that fits, downloads "
                              "it, and chooses the settings that make it run fast. Every choice "
                              "comes with its reason, and "
                              "you can change any of them later from Tools → Setup Assistant."),
                           this));
    v->addWidget(paragraph(tr("Nothing is downloaded unless you ask for it. The built-in demo "
                              "model works right away, even "
                              "without a network connection."),
                           this));
    v->addStretch(1);
  }
};

class HardwarePage : public QWizardPage {
 public:
  HardwarePage(SetupWizard* wizard, QWidget* parent) : QWizardPage(parent), wizard_(wizard) {
    setTitle(tr("Your computer"));
    setSubTitle(tr("What Tandem found, and what it means for running models."));
    auto* v = new QVBoxLayout(this);
    text_ = paragraph(QString(), this);
    text_->setTextFormat(Qt::RichText);
    v->addWidget(text_);
    v->addStretch(1);
    connect(wizard_, &SetupWizard::hardwareChanged, this, [this] { refresh(); });
    refresh();
  }
  void initializePage() override { refresh(); }
  bool isComplete() const override { return wizard_->hardware() != nullptr; }

 private:
  void refresh() {
    const HardwareReportPtr hw = wizard_->hardware();
    if (!hw) {
      text_->setText(tr("Detecting processor, memory, graphics and disk…"));
    } else {
      QString html = QStringLiteral("<table cellpadding='3'>");
      for (const hw::Finding& f : hw->findings) {
        const char* color = f.level == hw::FindingLevel::Good      ? theme::colors().good
                            : f.level == hw::FindingLevel::Warning ? theme::colors().warning
                                                                   : theme::colors().accent;
        html += QStringLiteral(
                    "<tr><td style='color:%1'>●</td><td><b>%2</b><br/><span "
                    "style='color:%3'>%4</span></td></tr>")
                    .arg(color, q(f.headline).toHtmlEscaped(), theme::colors().muted_text,
                         q(f.detail).toHtmlEscaped());
      }
      text_->setText(html + QStringLiteral("</table>"));
    }
    emit completeChanged();
  }
  SetupWizard* wizard_;
  QLabel* text_;
};

class ModelPage : public QWizardPage {
 public:
  ModelPage(SetupWizard* wizard, QWidget* parent) : QWizardPage(parent), wizard_(wizard) {
    setTitle(tr("Choose a model"));
    setSubTitle(
        tr("The verdict says whether each model fits in this computer's memory, with Tandem's "
           "recommended settings."));
    auto* v = new QVBoxLayout(this);
    group_ = new QButtonGroup(this);
    demo_ = new QRadioButton(tr("Try the built-in demo model (small, works offline)"), this);
    catalog_ = new QRadioButton(tr("A model from the catalog:"), this);
    folder_ = new QRadioButton(tr("A model folder on this computer:"), this);
    repository_ = new QRadioButton(tr("Or a Hugging Face repository:"), this);
    group_->addButton(demo_, 0);
    group_->addButton(catalog_, 1);
    group_->addButton(folder_, 2);
    group_->addButton(repository_, 3);
    v->addWidget(demo_);
    v->addWidget(catalog_);
    list_ = new QStandardItemModel(0, 3, this);
    list_->setHorizontalHeaderLabels({tr("Model"), tr("Download"), tr("On this computer")});
    view_ = new QTreeView(this);
    view_->setAccessibleName(tr("Models in the catalog"));
    view_->setModel(list_);
    view_->setRootIsDecorated(false);
    view_->setAlternatingRowColors(true);
    view_->setSelectionBehavior(QAbstractItemView::SelectRows);
    view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    view_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    view_->setMinimumHeight(180);
    v->addWidget(view_, 1);
    // The catalog model's GGUF release: one download per quantisation, checked like any
    // repository.
    gguf_ = new QPushButton(this);
    gguf_->setObjectName(QStringLiteral("catalogGguf"));
    gguf_->setVisible(false);
    v->addWidget(gguf_, 0, Qt::AlignLeft);
    v->addWidget(repository_);
    auto* repo_row = new QHBoxLayout;
    repo_ = new QLineEdit(this);
    repo_->setAccessibleName(tr("Hugging Face repository"));
    repo_->setObjectName(QStringLiteral("repository"));
    repo_->setPlaceholderText(tr("owner/name, for example mistralai/Mixtral-8x7B-Instruct-v0.1"));
    check_ = new QPushButton(tr("Check"), this);
    check_->setObjectName(QStringLiteral("checkRepository"));
    check_->setEnabled(false);
    repo_row->addWidget(repo_, 1);
    repo_row->addWidget(check_);
    v->addLayout(repo_row);
    answer_ = paragraph(QString(), this);
    answer_->setObjectName(QStringLiteral("repositoryAnswer"));
    answer_->setTextFormat(Qt::RichText);
    v->addWidget(answer_);
    auto* quant_row = new QHBoxLayout;
    quant_label_ = new QLabel(tr("Quantisation:"), this);
    quant_ = new QComboBox(this);
    quant_->setObjectName(QStringLiteral("quantization"));
    quant_->setAccessibleName(tr("GGUF quantisation to download"));
    quant_label_->setBuddy(quant_);
    quant_row->addWidget(quant_label_);
    quant_row->addWidget(quant_, 1);
    v->addLayout(quant_row);
    quant_label_->setVisible(false);
    quant_->setVisible(false);
    checker_ = new RepositoryCheck(this);
    v->addWidget(folder_);
    auto* row = new QHBoxLayout;
    path_ = new QLineEdit(this);
    path_->setAccessibleName(tr("Model folder"));
    path_->setObjectName(QStringLiteral("folder"));
    path_->setPlaceholderText(
        tr("A folder with config.json, the tokenizer and .safetensors files"));
    auto* browse = new QPushButton(tr("Browse…"), this);
    row->addWidget(path_, 1);
    row->addWidget(browse);
    v->addLayout(row);
    problem_ = paragraph(QString(), this);
    problem_->setObjectName(QStringLiteral("problem"));
    problem_->setStyleSheet(QStringLiteral("color: %1;").arg(theme::colors().warning));
    v->addWidget(problem_);

    connect(browse, &QPushButton::clicked, this, [this] {
      const QString dir =
          QFileDialog::getExistingDirectory(this, tr("Model folder"), path_->text());
      if (!dir.isEmpty()) {
        path_->setText(dir);
        folder_->setChecked(true);
      }
    });
    connect(group_, &QButtonGroup::idClicked, this, [this] { update_choice(); });
    connect(path_, &QLineEdit::textChanged, this, [this] {
      if (!path_->text().isEmpty()) folder_->setChecked(true);
      update_choice();
    });
    connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this] {
      catalog_->setChecked(true);
      show_gguf_release();
      update_choice();
    });
    connect(gguf_, &QPushButton::clicked, this, [this] {
      const plan::CatalogEntry* e = current_entry();
      if (e == nullptr || e->gguf_repo.empty()) return;
      repo_->setText(q(e->gguf_repo));
      check_repository();
    });
    connect(quant_, &QComboBox::currentIndexChanged, this, [this](int index) {
      const plan::ModelLookup* l = wizard_->repository();
      if (filling_ || l == nullptr || index < 0) return;
      auto chosen = std::make_shared<plan::ModelLookup>(*l);
      plan::choose_gguf_quantization(*chosen, quant_->itemData(index).toString().toStdString());
      wizard_->setRepository(chosen);
      checker_->size(chosen, DownloadQueue::hubConfig());
      show_answer();
      update_choice();
    });
    connect(repo_, &QLineEdit::textChanged, this, [this] {
      const QString repo = repo_->text().trimmed();
      if (!repo.isEmpty()) repository_->setChecked(true);
      check_->setEnabled(!repo.isEmpty());
      if (repo != asked_) {
        // The answer on the page is about another name now.
        checker_->cancel();
        asked_.clear();
        failure_.clear();
        answer_->clear();
        wizard_->setRepository(nullptr);
        fill_quantizations();
      }
      update_choice();
    });
    connect(repo_, &QLineEdit::returnPressed, this, [this] { check_repository(); });
    connect(check_, &QPushButton::clicked, this, [this] { check_repository(); });
    connect(checker_, &RepositoryCheck::finished, this,
            [this](const QString& repo, ModelLookupPtr lookup) {
              if (repo != asked_) return;
              wizard_->setRepository(choose_quantization(std::move(lookup)));
              checker_->size(wizard_->repositoryPtr(), DownloadQueue::hubConfig());
              fill_quantizations();
              show_answer();
              update_choice();
            });
    // The chosen quantisation sized from its files' headers: every verdict planned again with
    // those sizes, the choice kept (it may be the user's), unless another was chosen meanwhile.
    connect(checker_, &RepositoryCheck::sized, this, [this](ModelLookupPtr lookup) {
      const plan::ModelLookup* l = wizard_->repository();
      if (l == nullptr || l->repo != lookup->repo ||
          l->gguf_quantization != lookup->gguf_quantization)
        return;
      auto kept = std::make_shared<plan::ModelLookup>(*choose_quantization(lookup));
      plan::choose_gguf_quantization(*kept, lookup->gguf_quantization);
      wizard_->setRepository(kept);
      fill_quantizations();
      show_answer();
      update_choice();
    });
    connect(checker_, &RepositoryCheck::failed, this,
            [this](const QString& repo, const QString& message) {
              if (repo != asked_) return;
              failure_ = message;
              answer_->clear();
              update_choice();
            });
    connect(wizard_, &SetupWizard::hardwareChanged, this, [this] {
      fill();
      if (const plan::ModelLookup* l = wizard_->repository(); l && !l->gguf_quantizations.empty()) {
        wizard_->setRepository(choose_quantization(std::make_shared<const plan::ModelLookup>(*l)));
        fill_quantizations();
      }
      show_answer();
    });
    fill();
  }

  void initializePage() override {
    const SetupChoices& c = wizard_->choices();
    if (c.source == QLatin1String("folder")) {
      path_->setText(c.folder);
      folder_->setChecked(true);
    } else if (c.source == QLatin1String("repository")) {
      // Filled in, not asked: nothing goes to the network until the user presses Check.
      if (repo_->text().trimmed() != c.repo) repo_->setText(c.repo);
      repository_->setChecked(true);
    } else if (c.source == QLatin1String("catalog")) {
      for (int r = 0; r < list_->rowCount(); ++r) {
        if (list_->item(r, 0)->data(Qt::UserRole).toString() == c.catalog_id)
          view_->setCurrentIndex(list_->index(r, 0));
      }
      catalog_->setChecked(true);
    } else {
      demo_->setChecked(true);
    }
    update_choice();
  }

  bool isComplete() const override {
    return problem_->text().isEmpty() && group_->checkedId() >= 0;
  }

 private:
  const plan::CatalogEntry* current_entry() const {
    const QModelIndex i = view_->currentIndex();
    if (!i.isValid()) return nullptr;
    return plan::find_catalog_entry(
        list_->item(i.row(), 0)->data(Qt::UserRole).toString().toStdString());
  }

  void show_gguf_release() {
    const plan::CatalogEntry* e = current_entry();
    const bool has = e != nullptr && !e->gguf_repo.empty();
    gguf_->setVisible(has);
    if (has) {
      gguf_->setText(
          tr("Its GGUF Files Instead (%1): Check the Quantisations").arg(q(e->gguf_repo)));
      gguf_->setToolTip(
          tr("One download per quantisation, run as stored; Tandem lists them and "
             "picks the largest that fits."));
    }
  }

  // A GGUF repository's quantisation for this computer: the largest whose plan fits.
  ModelLookupPtr choose_quantization(ModelLookupPtr lookup) {
    verdicts_.clear();
    const HardwareReportPtr hw = wizard_->hardware();
    if (!lookup || lookup->gguf_quantizations.empty() || !hw) return lookup;
    auto chosen = std::make_shared<plan::ModelLookup>(*lookup);
    plan::PlanWishes wishes;
    const qint64 context = wizard_->choices().context;
    wishes.context_tokens = context > 0 ? context : 8192;
    wishes.context_asked = context > 0;
    plan::Plan plan;
    verdicts_ = plan::choose_gguf_by_plan(*hw, *chosen, wishes, plan);
    return chosen;
  }

  void fill_quantizations() {
    const plan::ModelLookup* l = wizard_->repository();
    const bool gguf = l != nullptr && !l->gguf_quantizations.empty();
    quant_label_->setVisible(gguf);
    quant_->setVisible(gguf);
    filling_ = true;
    quant_->clear();
    if (gguf) {
      for (const hub::GgufQuantization& g : l->gguf_quantizations) {
        QString verdict;
        for (const plan::QuantizationVerdict& v : verdicts_) {
          if (v.name != g.name) continue;
          verdict = v.verdict == plan::Verdict::Fits              ? tr("fits")
                    : v.verdict == plan::Verdict::FitsWithChanges ? tr("fits with changes")
                                                                  : tr("does not fit");
        }
        const QString size = gib(g.bytes);
        quant_->addItem(verdict.isEmpty() ? tr("%1, %2").arg(q(g.name), size)
                                          : tr("%1, %2: %3").arg(q(g.name), size, verdict),
                        q(g.name));
        if (g.name == l->gguf_quantization) quant_->setCurrentIndex(quant_->count() - 1);
      }
    }
    filling_ = false;
  }

  void check_repository() {
    const QString repo = repo_->text().trimmed();
    repository_->setChecked(true);
    failure_.clear();
    wizard_->setRepository(nullptr);
    if (!plan::looks_like_repo_id(repo.toStdString())) {
      checker_->cancel();
      asked_.clear();
      answer_->clear();
      failure_ = tr("\"%1\" is not a repository name; write it as owner/name, as its address "
                    "on Hugging Face does (for example mistralai/Mixtral-8x7B-Instruct-v0.1).")
                     .arg(repo);
    } else {
      const hub::HubConfig hub = DownloadQueue::hubConfig();
      asked_ = repo;
      answer_->setText(tr("Asking about %1 (the catalog, then %2)…").arg(repo, q(hub.endpoint)));
      checker_->start(repo, hub);
    }
    update_choice();
  }

  // The checked repository's verdict on this machine, as the catalog shows its models'.
  void show_answer() {
    const plan::ModelLookup* l = wizard_->repository();
    if (l == nullptr) return;
    const HardwareReportPtr hw = wizard_->hardware();
    const QString from = l->origin == plan::ModelOrigin::Catalog
                             ? tr("from Tandem's catalog")
                             : tr("from %1").arg(q(l->endpoint));
    Verdicts v{tr("checking this computer…"), QColor(theme::colors().muted_text)};
    if (!l->cannot_run.empty()) {
      v = {tr("planned: Tandem cannot run this architecture yet"),
           QColor(theme::colors().muted_text)};
    } else if (!l->gguf_quantizations.empty()) {
      // A GGUF quantisation runs as stored: its own verdict, not one per CPU format.
      for (const plan::QuantizationVerdict& qv : verdicts_) {
        if (qv.name != l->gguf_quantization) continue;
        const bool fits = qv.verdict == plan::Verdict::Fits;
        const bool changes = qv.verdict == plan::Verdict::FitsWithChanges;
        v = {fits      ? tr("%1 fits, run as stored").arg(q(qv.name))
             : changes ? tr("%1 fits with changes, run as stored").arg(q(qv.name))
                       : tr("%1 does not fit").arg(q(qv.name)),
             QColor(fits      ? theme::colors().good
                    : changes ? theme::colors().warning
                              : theme::colors().error)};
      }
    } else if (hw) {
      v = verdicts_for(*hw, l->shape);
    }
    answer_->setText(
        tr("<b>%1</b> (%2): %3, %4 B parameters, %5 B active per token; %6.<br/>On this computer: "
           "<span style='color:%7'>%8</span>")
            .arg(q(l->repo).toHtmlEscaped(), from.toHtmlEscaped(),
                 tr("a %1 model").arg(q(model::architecture_display_name(l->shape.architecture))))
            .arg(static_cast<double>(l->shape.total_params()) / 1e9, 0, 'f', 1)
            .arg(static_cast<double>(l->shape.active_params_per_token()) / 1e9, 0, 'f', 1)
            .arg(download_size(*l).toHtmlEscaped(), v.color.name(), v.text.toHtmlEscaped()));
  }

  void fill() {
    list_->removeRows(0, list_->rowCount());
    const HardwareReportPtr hw = wizard_->hardware();
    for (const plan::CatalogEntry& e : plan::catalog()) {
      if (e.builtin || e.config.is_null()) continue;
      const plan::ModelLookup entry = plan::lookup_catalog_entry(e);
      auto* name = new QStandardItem(q(e.name));
      name->setData(q(e.id), Qt::UserRole);
      name->setToolTip(q(e.description));
      auto* download = new QStandardItem(
          tr("%1 (%2)").arg(gib(entry.download_bytes), q(entry.stored.name).toUpper()));
      QString verdict = tr("checking…");
      QColor color(theme::colors().muted_text);
      if (!entry.cannot_run.empty()) {
        verdict = tr("planned: Tandem cannot run this architecture yet");
        name->setEnabled(false);
      } else if (hw) {
        const Verdicts v = verdicts_for(*hw, entry.shape);
        verdict = v.text;
        color = v.color;
      }
      auto* fits = new QStandardItem(verdict);
      fits->setForeground(color);
      list_->appendRow({name, download, fits});
    }
    view_->resizeColumnToContents(1);
  }

  void update_choice() {
    SetupChoices& c = wizard_->mutableChoices();
    problem_->clear();
    c.repo.clear();
    c.quantization.clear();
    c.files.clear();
    switch (group_->checkedId()) {
      case 0:
        c.source = QStringLiteral("demo");
        c.folder = q(model::demo_model_folder());
        if (c.folder.isEmpty())
          problem_->setText(tr("The built-in demo model is missing from this installation."));
        break;
      case 1: {
        c.source = QStringLiteral("catalog");
        const QModelIndex i = view_->currentIndex();
        const QString id =
            i.isValid() ? list_->item(i.row(), 0)->data(Qt::UserRole).toString() : QString();
        const plan::CatalogEntry* e = plan::find_catalog_entry(id.toStdString());
        if (e == nullptr) {
          problem_->setText(tr("Pick a model from the list."));
        } else if (!plan::lookup_catalog_entry(*e).cannot_run.empty()) {
          problem_->setText(
              tr("%1 can be planned but not run yet; pick another model.").arg(q(e->name)));
        } else {
          c.catalog_id = id;
          c.repo = q(e->repo);
          c.folder = catalog_folder(*e);
        }
        break;
      }
      case 3: {
        c.source = QStringLiteral("repository");
        const plan::ModelLookup* l = wizard_->repository();
        const QString repo = repo_->text().trimmed();
        if (!failure_.isEmpty()) {
          problem_->setText(failure_);
        } else if (checker_->isRunning()) {
          problem_->setText(tr("Waiting for the answer about %1.").arg(asked_));
        } else if (repo.isEmpty()) {
          problem_->setText(tr("Type a repository as owner/name, then press Check."));
        } else if (l == nullptr) {
          problem_->setText(tr("Press Check to see whether %1 fits on this computer.").arg(repo));
        } else if (!l->cannot_run.empty()) {
          problem_->setText(
              tr("%1 can be planned but Tandem cannot run it yet: %2").arg(repo, q(l->cannot_run)));
        } else {
          c.catalog_id = l->catalog_entry ? q(l->catalog_entry->id) : QString();
          c.repo = q(l->repo);
          c.folder = MainWindow::modelsFolder() + QLatin1Char('/') + c.repo;
          if (const hub::GgufQuantization* g = l->chosen_gguf()) {
            c.quantization = q(g->name);
            for (const std::string& f : g->files) c.files << q(f);
          }
        }
        break;
      }
      case 2: {
        c.source = QStringLiteral("folder");
        c.folder = path_->text().trimmed();
        QString why;
        const nlohmann::json config = read_config(c.folder, &why);
        if (c.folder.isEmpty()) {
          problem_->setText(tr("Choose the model's folder."));
        } else if (config.is_null()) {
          problem_->setText(why);
        } else {
          try {
            model::parse_model_spec(config, "config.json");
          } catch (const std::exception& e) {
            problem_->setText(QString::fromUtf8(e.what()));
          }
        }
        break;
      }
      default:
        problem_->setText(tr("Choose where the model comes from."));
    }
    wizard_->replan();
    emit completeChanged();
  }

  SetupWizard* wizard_;
  QButtonGroup* group_;
  QRadioButton *demo_, *catalog_, *folder_, *repository_;
  QStandardItemModel* list_;
  QTreeView* view_;
  QLineEdit* path_;
  QLineEdit* repo_;
  QPushButton* check_;
  QLabel* answer_;     // the checked repository's verdict, or what is being asked
  QPushButton* gguf_;  // the selected catalog model's GGUF release
  QLabel* quant_label_;
  QComboBox* quant_;  // a GGUF repository's quantisations
  std::vector<plan::QuantizationVerdict> verdicts_;
  bool filling_ = false;
  RepositoryCheck* checker_;
  QString asked_;    // the repository the answer on the page is (or will be) about
  QString failure_;  // why the check failed, in a sentence
  QLabel* problem_;
};

class DownloadPage : public QWizardPage {
 public:
  DownloadPage(SetupWizard* wizard, DownloadQueue* queue, QWidget* parent)
      : QWizardPage(parent), wizard_(wizard), queue_(queue) {
    setTitle(tr("Download"));
    setSubTitle(
        tr("The model's files come from Hugging Face. Downloads resume where they stopped, and "
           "every file is checked."));
    auto* v = new QVBoxLayout(this);
    status_ = paragraph(QString(), this);
    v->addWidget(status_);
    start_ = new QPushButton(tr("Download now"), this);
    start_->setObjectName(QStringLiteral("primary"));
    v->addWidget(start_, 0, Qt::AlignLeft);
    check_again_ = new QPushButton(tr("Check the Space Again"), this);
    check_again_->setVisible(false);
    v->addWidget(check_again_, 0, Qt::AlignLeft);
    connect(check_again_, &QPushButton::clicked, this, [this] { refresh(); });
    v->addStretch(1);
    connect(start_, &QPushButton::clicked, this, [this] {
      const QString repo = wizard_->choices().repo;
      if (repo.isEmpty() || queue_ == nullptr) return;
      DownloadJobSpec spec;
      spec.repo = repo;
      if (!wizard_->choices().files.isEmpty()) {
        spec.include = wizard_->choices().files;  // one GGUF quantisation, exactly its files
      } else {
        for (const std::string& pattern : hub::model_files_filter().include)
          spec.include << q(pattern);
      }
      spec.destination = wizard_->choices().folder;
      job_ = queue_->start(spec);
      started_ = true;
      refresh();
    });
    if (queue_ != nullptr) {
      connect(queue_, &DownloadQueue::finished, this, [this](quint64 id, bool ok) {
        if (id != job_) return;
        finished_ = ok;
        refresh();
      });
    }
  }
  void initializePage() override {
    started_ = false;
    finished_ = false;
    refresh();
  }
  bool isComplete() const override { return present() || started_; }

 private:
  bool present() const { return wizard_->choices().present(); }
  void refresh() {
    const SetupChoices& c = wizard_->choices();
    const QString repo = c.repo;
    if (finished_) {
      status_->setText(tr("%1 has been downloaded to %2.").arg(repo, c.folder));
      start_->hide();
    } else if (present()) {
      status_->setText(tr("%1 is already on this computer in %2.").arg(repo, c.folder));
      start_->hide();
    } else if (started_) {
      status_->setText(
          tr("Downloading %1 into %2. It goes on in the background: you can finish the assistant "
             "now and "
             "follow it on the Downloads page; the model loads once its files are complete.")
              .arg(repo, c.folder));
      start_->hide();
    } else {
      // The Hub's listing when the repository was checked, otherwise the catalog's estimate.
      QString size;
      std::uint64_t needed = 0;
      if (c.source == QLatin1String("repository") && wizard_->repository() != nullptr) {
        size = download_size(*wizard_->repository());
        needed = wizard_->repository()->download_bytes;
      } else if (const plan::CatalogEntry* e = plan::find_catalog_entry(c.catalog_id.toStdString());
                 e != nullptr && !e->config.is_null()) {
        const plan::ModelLookup l = plan::lookup_catalog_entry(*e);
        size = download_size(l);
        needed = l.download_bytes;
      }
      const hw::DiskSpace disk = probe_models_disk();
      if (needed > 0 && disk.error.empty() && needed > disk.free_bytes) {
        // Not offered: it would stop part-way with the disk full.
        status_->setText(
            tr("%1: %2, but only %3 are free in %4. Free some space there (or go "
               "back and choose a smaller model), then check again.")
                .arg(repo, size, q(hw::format_bytes(disk.free_bytes)), MainWindow::modelsFolder()));
        start_->setVisible(false);
        check_again_->setVisible(true);
      } else {
        const QString what =
            c.files.isEmpty()
                ? tr("Only the safetensors weights, the configuration and the tokenizer are "
                     "fetched.")
                : tr("Only the %1 GGUF files are fetched (the tokenizer and chat template are "
                     "inside them).")
                      .arg(c.quantization);
        status_->setText(tr("%1: %2. %3 are free in %4. %5")
                             .arg(repo, size, q(hw::format_bytes(disk.free_bytes)),
                                  MainWindow::modelsFolder(), what));
        start_->setVisible(queue_ != nullptr);
        check_again_->setVisible(false);
      }
    }
    emit completeChanged();
  }
  SetupWizard* wizard_;
  DownloadQueue* queue_;
  QLabel* status_;
  QPushButton* start_;
  QPushButton* check_again_;
  quint64 job_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

class ConversionPage : public QWizardPage {
 public:
  ConversionPage(SetupWizard* wizard, QWidget* parent) : QWizardPage(parent), wizard_(wizard) {
    setTitle(tr("Weights on the CPU"));
    setSubTitle(
        tr("The experts that run on the CPU are stored in a format made for its instructions."));
    auto* form = new QFormLayout(this);
    method_ = new QComboBox(this);
    method_->addItem(tr("INT8: near-lossless, fast"), QStringLiteral("int8"));
    method_->addItem(tr("INT8 rotated: the same size, prompts up to twice as fast with AMX, about "
                        "as exact"),
                     QStringLiteral("int8-rotated"));
    method_->addItem(tr("INT4: about 60% of the memory of INT8, slightly less accurate"),
                     QStringLiteral("int4"));
    method_->addItem(tr("BF16: full precision, twice the memory"), QStringLiteral("bf16"));
    method_->addItem(tr("As stored in the files (slowest, for checking)"),
                     QStringLiteral("native"));
    form->addRow(tr("Format"), method_);
    reason_ = paragraph(QString(), this);
    form->addRow(QString(), reason_);
    form->addRow(
        QString(),
        paragraph(
            tr("Tandem converts the weights when it loads the model, so there is nothing to wait "
               "for here. For a large model, Tools → Convert Weights saves a converted copy that "
               "loads in seconds."),
            this));
    connect(method_, &QComboBox::currentIndexChanged, this, [this] {
      wizard_->mutableChoices().cpu_format = method_->currentData().toString();
      wizard_->replan();
      showReason();
    });
  }
  void initializePage() override {
    const plan::Plan& p = wizard_->plan();
    const QString recommended =
        q(std::string(plan::format_name(wizard_->recommendedFormat()))).toLower();
    recommended_ = recommended;
    // A GGUF file's blocks are computed on as stored, and that is the recommendation; for a
    // safetensors model the stored form is the slow reference.
    const int native = method_->findData(QStringLiteral("native"));
    method_->setItemText(native, recommended == QLatin1String("native")
                                     ? tr("As stored in the GGUF files: no conversion, native "
                                          "kernels for their block formats")
                                     : tr("As stored in the files (slowest, for checking)"));
    // MXFP4 is offered for the models whose experts are stored so (gpt-oss) and only there.
    const int mxfp4 = method_->findData(QStringLiteral("mxfp4"));
    if (p.cpu_format == plan::WeightFormat::Mxfp4 && mxfp4 < 0) {
      method_->insertItem(0, tr("MXFP4: the model's own 4-bit experts, kept exactly"),
                          QStringLiteral("mxfp4"));
    } else if (p.cpu_format != plan::WeightFormat::Mxfp4 && mxfp4 >= 0) {
      method_->removeItem(mxfp4);
    }
    // INT4 with INT8 downs differs from INT4 only for routed experts (a model without them
    // keeps its FFNs' downs in INT8 either way), so it is offered for such models alone.
    const int down8 = method_->findData(QStringLiteral("int4-down8"));
    if (wizard_->modelHasExperts() && down8 < 0) {
      method_->insertItem(method_->findData(QStringLiteral("int4")),
                          tr("INT4 with 8-bit down projections: about 73% of the memory of INT8, "
                             "closer to its accuracy than INT4"),
                          QStringLiteral("int4-down8"));
    } else if (!wizard_->modelHasExperts() && down8 >= 0) {
      method_->removeItem(down8);
    }
    // Beside it, INT4 says what it gives up: on real weights the experts' 4-bit downs cost
    // twice its divergence (docs/benchmarks.md, "INT4 with 8-bit downs for routed experts").
    method_->setItemText(method_->findData(QStringLiteral("int4")),
                         wizard_->modelHasExperts()
                             ? tr("INT4: about 60% of the memory of INT8, the least accurate "
                                  "(the experts' down projections at 4 bits too)")
                             : tr("INT4: about 60% of the memory of INT8, slightly less accurate"));
    // An earlier choice stands only for the model it was made for.
    const QString saved = wizard_->choices().cpu_format;
    const bool same_model = wizard_->choices().folder == SetupWizard::savedChoices().folder;
    const int index = method_->findData(!saved.isEmpty() && same_model ? saved : recommended);
    method_->setCurrentIndex(index >= 0 ? index : 0);
    wizard_->mutableChoices().cpu_format = method_->currentData().toString();
    wizard_->replan();
    showReason();
  }

  void showReason() {
    QString why;
    for (const plan::Parameter& x : wizard_->plan().parameters)
      if (x.name == "kt-method") why = q(x.reason);
    const QString chosen = method_->currentData().toString();
    QString text =
        tr("Recommended for this computer and model: %1.").arg(choice_title(recommended_));
    if (chosen == recommended_) {
      text += QLatin1Char(' ') + tr("Kernels: %1.").arg(why);
    } else {
      text += QLatin1Char(' ') +
              tr("You chose %1 instead; the settings and memory plan that follow are for it.")
                  .arg(chosen == QLatin1String("native") ? tr("the stored format")
                                                         : choice_title(chosen));
    }
    reason_->setText(text);
  }

 private:
  SetupWizard* wizard_;
  QComboBox* method_;
  QLabel* reason_;
  QString recommended_;
};

class ParametersPage : public QWizardPage {
 public:
  ParametersPage(SetupWizard* wizard, QWidget* parent) : QWizardPage(parent), wizard_(wizard) {
    setTitle(tr("Settings"));
    setSubTitle(
        tr("Tandem's recommendations for this computer and model. Each comes with its reason; "
           "change any you like."));
    auto* v = new QVBoxLayout(this);
    verdict_ = paragraph(QString(), this);
    v->addWidget(verdict_);
    auto* form = new QFormLayout;
    threads_ = new QSpinBox(this);
    threads_->setRange(1, 4096);
    context_ = new QSpinBox(this);
    context_->setRange(256, kContextMax);
    context_->setSingleStep(1024);
    form->addRow(tr("CPU threads"), threads_);
    form->addRow(tr("Context length (tokens)"), context_);
    v->addLayout(form);
    params_ = new QTreeWidget(this);
    params_->setAccessibleName(tr("Recommended settings"));
    params_->setColumnCount(3);
    params_->setHeaderLabels({tr("Setting"), tr("Value"), tr("Why")});
    params_->setRootIsDecorated(false);
    params_->setWordWrap(true);
    params_->header()->setSectionResizeMode(2, QHeaderView::Stretch);
    params_->setMinimumHeight(150);
    v->addWidget(params_, 1);
    auto* handover = new QHBoxLayout;
    auto* sglang = new QPushButton(tr("Run on SGLang Instead…"), this);
    sglang->setObjectName(QStringLiteral("exportSglang"));
    sglang->setToolTip(
        tr("The SGLang + kt-kernel commands for this model and these settings: the better "
           "choice for several GPUs or several users at once."));
    export_problem_ = paragraph(QString(), this);
    handover->addWidget(sglang);
    handover->addWidget(export_problem_, 1);
    v->addLayout(handover);
    connect(sglang, &QPushButton::clicked, this, [this] {
      try {
        export_problem_->clear();
        auto* dialog = new SglangExportDialog(wizard_->exportSglang(), this);
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        dialog->open();
      } catch (const std::exception& e) {
        export_problem_->setText(QString::fromUtf8(e.what()));
      }
    });
    chart_ = new QChart;
    if (theme::scheme() == theme::Scheme::Dark) chart_->setTheme(QChart::ChartThemeDark);
    chart_->setTitle(tr("Memory plan"));
    chart_->legend()->setAlignment(Qt::AlignRight);
    chart_->setMargins(QMargins(2, 2, 2, 2));
    // The categories are listed under the chart, wrapped to its width: the chart's own
    // legend cut them off.
    chart_->legend()->hide();
    auto* view = new QChartView(chart_, this);
    view->setRenderHint(QPainter::Antialiasing);
    view->setMinimumHeight(150);
    v->addWidget(view);
    legend_ = paragraph(QString(), this);
    legend_->setTextFormat(Qt::RichText);
    v->addWidget(legend_);
    connect(threads_, &QSpinBox::valueChanged, this,
            [this](int n) { wizard_->mutableChoices().threads = n; });
    connect(context_, &QSpinBox::valueChanged, this, [this](int n) {
      if (n == wizard_->mutableChoices().context) return;
      wizard_->mutableChoices().context = n;
      wizard_->replan();
      show_plan();
    });
  }
  void initializePage() override {
    SetupChoices& c = wizard_->mutableChoices();
    const plan::Plan& p = wizard_->plan();
    for (const plan::Parameter& x : p.parameters) {
      if (x.name == "cpuinfer" && c.threads <= 0) c.threads = std::stoi(x.value);
    }
    if (c.threads <= 0 && wizard_->hardware())
      c.threads = wizard_->hardware()->recommendation.cpu_threads.value;
    if (c.context <= 0) c.context = p.context_tokens > 0 ? p.context_tokens : 4096;
    threads_->setValue(c.threads);
    context_->setValue(static_cast<int>(c.context));
    show_plan();
  }
  QString chartCategories() const {
    QStringList names;
    for (QAbstractSeries* s : chart_->series()) {
      for (QBarSet* set : static_cast<QHorizontalStackedBarSeries*>(s)->barSets())
        names << set->label();
    }
    return names.join(QStringLiteral(", "));
  }

 private:
  void show_plan() {
    const plan::Plan& p = wizard_->plan();
    // No more than the positions the model takes (a larger value already set comes down,
    // and plans again).
    context_->setMaximum(
        p.max_positions > 0 ? static_cast<int>(std::min<std::int64_t>(p.max_positions, kContextMax))
                            : kContextMax);
    // The planner's reason reads on after "Verdict: " on the command line; here it heads the
    // page, so it starts with a capital.
    QString reason = q(p.verdict_reason);
    if (!reason.isEmpty()) reason[0] = reason[0].toUpper();
    verdict_->setText(QStringLiteral("<b>%1</b>").arg(reason.toHtmlEscaped()));
    params_->clear();
    for (const plan::Parameter& x : p.parameters) {
      // Plain words first; the name the seeds and `tandem recommend` use as the detail.
      auto* item = new QTreeWidgetItem({plain_name(x.name), q(x.value), q(x.reason)});
      item->setToolTip(
          0, tr("%1 (%2 in tandem recommend and kt-kernel)").arg(plain_name(x.name), q(x.name)));
      item->setData(0, Qt::UserRole, q(x.name));
      item->setToolTip(2, q(x.reason));
      params_->addTopLevelItem(item);
    }
    params_->resizeColumnToContents(0);
    params_->resizeColumnToContents(1);
    chart_->removeAllSeries();
    for (QAbstractAxis* a : chart_->axes()) chart_->removeAxis(a);
    auto* series = new QHorizontalStackedBarSeries(chart_);
    // One bar per memory, one segment per category (in GiB).
    QStringList categories;
    std::map<std::string, std::pair<double, double>> values;  // category -> (RAM, VRAM)
    for (const plan::MemoryLine& l : p.ram)
      values[l.category].first = static_cast<double>(l.bytes) / (1ull << 30);
    for (const plan::MemoryLine& l : p.vram)
      values[l.category].second = static_cast<double>(l.bytes) / (1ull << 30);
    for (const auto& [name, v] : values) {
      auto* set = new QBarSet(q(name));
      *set << v.first << v.second;
      series->append(set);
    }
    chart_->addSeries(series);
    QStringList entries;
    for (QBarSet* set : series->barSets()) {
      const double total = set->at(0) + set->at(1);
      entries << QStringLiteral("<span style='color:%1'>■</span>&nbsp;%2&nbsp;%3")
                     .arg(set->color().name(), set->label().toHtmlEscaped(),
                          total < 0.05 ? tr("under 0.1 GiB")
                                       : tr("%1 GiB").arg(total, 0, 'f', total < 10 ? 1 : 0));
    }
    legend_->setText(entries.join(QStringLiteral(" &nbsp; ")));
    auto* axis = new QBarCategoryAxis(chart_);
    axis->append({tr("RAM (%1 available)").arg(gib(p.ram_budget)),
                  p.uses_gpu ? tr("VRAM (%1 free)").arg(gib(p.vram_budget)) : tr("VRAM (no GPU)")});
    auto* value = new QValueAxis(chart_);
    value->setTitleText(tr("GiB"));
    const double largest =
        std::max(static_cast<double>(p.ram_total()), static_cast<double>(p.vram_total())) /
        (1ull << 30);
    value->setLabelFormat(largest < 10 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
    chart_->addAxis(axis, Qt::AlignLeft);
    chart_->addAxis(value, Qt::AlignBottom);
    series->attachAxis(axis);
    series->attachAxis(value);
  }

  SetupWizard* wizard_;
  QLabel* verdict_;
  QLabel* export_problem_;
  QSpinBox* threads_;
  QSpinBox* context_;
  static constexpr int kContextMax = 1 << 20;
  QTreeWidget* params_;
  QChart* chart_;
  QLabel* legend_;
};

class FinishPage : public QWizardPage {
 public:
  FinishPage(SetupWizard* wizard, QWidget* parent) : QWizardPage(parent), wizard_(wizard) {
    setTitle(tr("Ready"));
    auto* v = new QVBoxLayout(this);
    summary_ = paragraph(QString(), this);
    v->addWidget(summary_);
    v->addStretch(1);
  }
  void initializePage() override {
    const SetupChoices& c = wizard_->choices();
    const plan::Plan& p = wizard_->plan();
    // The same figures as the settings page: the plan's, with the user's threads and context.
    QString method;
    for (const plan::Parameter& x : p.parameters)
      if (x.name == "kt-method") method = q(x.value);
    const QString format =
        c.cpu_format == QLatin1String("native") ? tr("the stored") : format_title(p.cpu_format);
    QString gpu = tr("everything on the CPU");
    if (p.uses_gpu) {
      gpu = tr("attention and %1 experts per layer on %2")
                .arg(p.gpu_experts_per_layer)
                .arg(q(p.gpu_name));
    }
    // A model from the catalog or a repository whose files are not all here yet loads when its
    // download completes.
    const bool downloads =
        c.source == QLatin1String("catalog") || c.source == QLatin1String("repository");
    summary_->setText(
        tr("Tandem will load %1 with %2 weights on the CPU%3, %4 threads and a "
           "context of %5 tokens, %6%8; then it opens the chat.%7\n\nYou can run "
           "this assistant again from Tools → Setup Assistant.")
            .arg(c.source == QLatin1String("demo") ? tr("the built-in demo model")
                 : c.files.isEmpty()
                     ? QFileInfo(c.folder).fileName()
                     : tr("%1 (%2)").arg(QFileInfo(c.folder).fileName(), c.quantization),
                 format, method.isEmpty() ? QString() : tr(" (kernels: %1)").arg(method))
            .arg(c.threads)
            .arg(c.context)
            .arg(gpu,
                 p.verdict == plan::Verdict::DoesNotFit
                     ? tr("\n\nThe memory plan says it does not fit: %1").arg(q(p.verdict_reason))
                     : QString())
            .arg(!downloads || c.present()
                     ? QString()
                     : tr(", once its files are downloaded (the Downloads page shows how far "
                          "they are)")));
  }

 private:
  SetupWizard* wizard_;
  QLabel* summary_;
};

}  // namespace

SetupWizard::SetupWizard(HardwareReportPtr hardware, DownloadQueue* queue, QWidget* parent)
    : QWizard(parent), hardware_(std::move(hardware)), queue_(queue) {
  setWindowTitle(tr("Tandem Setup Assistant"));
  setWizardStyle(QWizard::ModernStyle);
  setOption(QWizard::NoBackButtonOnStartPage);
  resize(820, 640);
  choices_ = savedChoices();
  setPage(Welcome, new WelcomePage(this));
  setPage(Hardware, new HardwarePage(this, this));
  setPage(Model, new ModelPage(this, this));
  setPage(Download, new DownloadPage(this, queue_, this));
  setPage(Conversion, new ConversionPage(this, this));
  setPage(Parameters, new ParametersPage(this, this));
  setPage(Finish, new FinishPage(this, this));
  setStartId(Welcome);
  replan();
}

void SetupWizard::setHardware(HardwareReportPtr hardware) {
  hardware_ = std::move(hardware);
  replan();
  emit hardwareChanged();
}

void SetupWizard::setRepository(ModelLookupPtr lookup) {
  repository_ = std::move(lookup);
  replan();
}

nlohmann::json SetupWizard::selectedConfig() const {
  if (choices_.source == QLatin1String("repository"))
    return repository_ ? repository_->config : nlohmann::json(nullptr);
  if (choices_.source == QLatin1String("catalog")) {
    const plan::CatalogEntry* e = plan::find_catalog_entry(choices_.catalog_id.toStdString());
    return e ? e->config : nlohmann::json(nullptr);
  }
  return read_config(choices_.folder);
}

void SetupWizard::replan() {
  const nlohmann::json config = selectedConfig();
  if (!hardware_ || config.is_null()) return;
  try {
    plan::PlanWishes wishes;
    wishes.context_tokens = choices_.context > 0 ? choices_.context : 8192;
    wishes.context_asked = choices_.context > 0;
    const QString stats =
        choices_.folder + QLatin1Char('/') + QLatin1String(schedule::kExpertStatsName);
    if (QFileInfo::exists(stats)) wishes.expert_stats = stats.toStdString();
    if (choices_.source == QLatin1String("demo")) {
      wishes.context_tokens = choices_.context > 0 ? choices_.context : 2048;
    }
    // A checked repository's shape carries its stored sizes (a GGUF quantisation's).
    const plan::ModelShape shape = choices_.source == QLatin1String("repository") && repository_
                                       ? repository_->shape
                                       : plan::model_shape_from_config(config, "config.json");
    const plan::Plan own = plan::make_plan(*hardware_, shape, wishes);
    recommended_format_ = own.cpu_format;
    has_experts_ = shape.experts > 0 && shape.moe_layers > 0;
    // The format box's choice, when it differs, is what the settings are planned for.
    wishes.cpu_format = format_from(choices_.cpu_format);
    plan_ = wishes.cpu_format && *wishes.cpu_format != own.cpu_format
                ? plan::make_plan(*hardware_, shape, wishes)
                : own;
    emit planChanged();
  } catch (const std::exception&) {
    plan_ = {};
  }
}

plan::SglangExport SetupWizard::exportSglang() const {
  if (selectedConfig().is_null() || !hardware_)
    throw std::runtime_error("Choose a model first: the commands are written for it.");
  // The model as the planner knows it (its stored format included), found where the
  // wizard puts it.
  plan::ModelLookup model;
  if (choices_.source == QLatin1String("catalog")) {
    const plan::CatalogEntry* e = plan::find_catalog_entry(choices_.catalog_id.toStdString());
    if (e == nullptr)
      throw std::runtime_error("Choose a model first: the commands are written for it.");
    model = plan::lookup_catalog_entry(*e);
  } else if (choices_.source == QLatin1String("repository") && repository_) {
    model = *repository_;
  } else {
    model = plan::lookup_model(hub::hub_config_from("", ""), choices_.folder.toStdString());
  }
  model.origin = plan::ModelOrigin::Folder;
  model.path = choices_.folder.toStdString();
  plan::SglangInputs in;
  in.gpus = 0;
  for (const hw::GpuDevice& d : hardware_->gpus.devices) in.gpus += d.usable ? 1 : 0;
  in.gpus = std::max(1, in.gpus);
  return plan::export_sglang(model, plan_, in);
}

int SetupWizard::nextId() const {
  switch (currentId()) {
    case Model:
      return choices_.source == QLatin1String("catalog") ||
                     choices_.source == QLatin1String("repository")
                 ? Download
                 : Conversion;
    default:
      return QWizard::nextId();
  }
}

bool SetupWizard::completedBefore() {
  return QSettings().value(QStringLiteral("wizard/completed"), false).toBool();
}

bool SetupWizard::dismissedBefore() {
  return QSettings().value(QStringLiteral("wizard/dismissed"), false).toBool();
}

void SetupWizard::markDismissed() {
  QSettings().setValue(QStringLiteral("wizard/dismissed"), true);
}

void SetupWizard::saveChoices(const SetupChoices& c) {
  QSettings s;
  s.setValue(QStringLiteral("wizard/completed"), true);
  s.setValue(QStringLiteral("wizard/source"), c.source);
  s.setValue(QStringLiteral("wizard/catalogId"), c.catalog_id);
  s.setValue(QStringLiteral("wizard/repo"), c.repo);
  s.setValue(QStringLiteral("wizard/folder"), c.folder);
  s.setValue(QStringLiteral("wizard/cpuFormat"), c.cpu_format);
  s.setValue(QStringLiteral("wizard/threads"), c.threads);
  s.setValue(QStringLiteral("wizard/context"), c.context);
  s.setValue(QStringLiteral("wizard/quantization"), c.quantization);
  s.setValue(QStringLiteral("wizard/files"), c.files);
}

void SetupWizard::setDiskProbe(DiskProbe probe) {
  disk_probe() = std::move(probe);
}

SetupChoices SetupWizard::savedChoices() {
  QSettings s;
  SetupChoices c;
  c.source = s.value(QStringLiteral("wizard/source"), QStringLiteral("demo")).toString();
  c.catalog_id = s.value(QStringLiteral("wizard/catalogId")).toString();
  c.repo = s.value(QStringLiteral("wizard/repo")).toString();
  c.folder = s.value(QStringLiteral("wizard/folder")).toString();
  c.cpu_format = s.value(QStringLiteral("wizard/cpuFormat")).toString();
  c.threads = s.value(QStringLiteral("wizard/threads"), 0).toInt();
  c.context = s.value(QStringLiteral("wizard/context"), 0).toLongLong();
  c.quantization = s.value(QStringLiteral("wizard/quantization")).toString();
  c.files = s.value(QStringLiteral("wizard/files")).toStringList();
  return c;
}

bool SetupChoices::present() const {
  if (!files.isEmpty()) {
    for (const QString& f : files)
      if (!QFileInfo::exists(folder + QLatin1Char('/') + f)) return false;
    return true;
  }
  return QFileInfo::exists(folder + QStringLiteral("/config.json")) &&
         !QDir(folder).entryList({QStringLiteral("*.safetensors")}, QDir::Files).isEmpty();
}

}  // namespace tandem::ui
