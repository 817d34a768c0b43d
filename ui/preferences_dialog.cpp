#include "ui/preferences_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QThread>
#include <QVBoxLayout>

#include "ui/conversation/store.h"
#include "ui/desktop_integration.h"
#include "ui/downloads/queue.h"
#include "ui/main_window.h"
#include "ui/secret_store.h"
#include "ui/theme.h"

namespace tandem::ui {

PreferencesDialog::PreferencesDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Preferences"));
  setMinimumWidth(580);
  auto* v = new QVBoxLayout(this);
  // Three tabs, so the dialog fits a 1024×640 screen.
  auto* tabs = new QTabWidget(this);
  auto* general = new QWidget(tabs);
  auto* folders = new QWidget(tabs);
  auto* connections = new QWidget(tabs);
  auto* general_v = new QVBoxLayout(general);
  auto* folders_v = new QVBoxLayout(folders);
  auto* connections_v = new QVBoxLayout(connections);
  tabs->addTab(general, tr("General"));
  tabs->addTab(folders, tr("Folders and engine"));
  tabs->addTab(connections, tr("Server and Hub"));
  v->addWidget(tabs);

  auto* look = new QGroupBox(tr("Appearance"), general);
  auto* look_form = new QFormLayout(look);
  theme_ = new QComboBox(look);
  theme_->addItem(tr("Follow the desktop"), QStringLiteral("system"));
  theme_->addItem(tr("Light"), QStringLiteral("light"));
  theme_->addItem(tr("Dark"), QStringLiteral("dark"));
  theme_->setAccessibleName(tr("Theme"));
  look_form->addRow(tr("Theme"), theme_);
  general_v->addWidget(look);

  auto* chat = new QGroupBox(tr("New chats start with"), general);
  auto* chat_form = new QFormLayout(chat);
  temperature_ = new QDoubleSpinBox(chat);
  temperature_->setRange(0.0, 2.0);
  temperature_->setSingleStep(0.05);
  top_p_ = new QDoubleSpinBox(chat);
  top_p_->setObjectName(QStringLiteral("topP"));
  // The sampler's range, as the server and the command line take it.
  top_p_->setRange(0.0, 1.0);
  top_p_->setSingleStep(0.05);
  top_p_->setToolTip(
      tr("Picks among the most likely tokens that add up to this share; 1 is off, "
         "0 keeps only the most likely"));
  top_k_ = new QSpinBox(chat);
  top_k_->setRange(0, 1000);
  top_k_->setSpecialValueText(tr("off"));
  min_p_ = new QDoubleSpinBox(chat);
  min_p_->setRange(0.0, 1.0);
  min_p_->setSingleStep(0.01);
  max_tokens_ = new QSpinBox(chat);
  max_tokens_->setRange(16, 32768);
  max_tokens_->setSingleStep(256);
  chat_form->addRow(tr("Temperature"), temperature_);
  chat_form->addRow(tr("Top-p"), top_p_);
  chat_form->addRow(tr("Top-k"), top_k_);
  chat_form->addRow(tr("Min-p"), min_p_);
  chat_form->addRow(tr("Longest reply (tokens)"), max_tokens_);
  general_v->addWidget(chat);
  auto* desktop = new QGroupBox(tr("Desktop"), general);
  auto* desktop_v = new QVBoxLayout(desktop);
  menu_entry_ = new QCheckBox(tr("Show Tandem in the applications menu"), desktop);
  const bool from_image = !desktop_integration::appimage_path().isEmpty();
  menu_entry_->setEnabled(from_image || desktop_integration::installed());
  menu_entry_->setToolTip(
      menu_entry_->isEnabled()
          ? tr("A menu entry and icon that start this AppImage (%1).")
                .arg(desktop_integration::entry_path())
          : tr("Tandem was not started from its AppImage; a package install has the system's own "
               "menu entry."));
  desktop_v->addWidget(menu_entry_);
  general_v->addWidget(desktop);
  general_v->addStretch(1);

  auto* engine = new QGroupBox(tr("Models and the engine"), folders);
  auto* engine_form = new QFormLayout(engine);
  models_ = new QLineEdit(engine);
  models_->setAccessibleName(tr("Models folder"));
  auto* browse = new QPushButton(tr("Browse…"), engine);
  browse->setAccessibleName(tr("Browse for the models folder"));
  auto* models_row = new QHBoxLayout;
  models_row->addWidget(models_, 1);
  models_row->addWidget(browse);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Models folder"), models_->text());
    if (!dir.isEmpty()) models_->setText(dir);
  });
  engine_form->addRow(tr("Models folder (downloads go here)"), models_row);
  conversations_ = new QLineEdit(engine);
  conversations_->setAccessibleName(tr("Conversations folder"));
  auto* browse_conversations = new QPushButton(tr("Browse…"), engine);
  browse_conversations->setAccessibleName(tr("Browse for the conversations folder"));
  auto* conversations_row = new QHBoxLayout;
  conversations_row->addWidget(conversations_, 1);
  conversations_row->addWidget(browse_conversations);
  connect(browse_conversations, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Conversations folder"), conversations_->text());
    if (!dir.isEmpty()) conversations_->setText(dir);
  });
  engine_form->addRow(tr("Conversations are kept in"), conversations_row);
  threads_ = new QSpinBox(engine);
  threads_->setRange(0, 4096);
  threads_->setSpecialValueText(tr("as planned for this computer"));
  threads_->setObjectName(QStringLiteral("threads"));
  threads_->setAccessibleName(tr("CPU threads"));
  engine_form->addRow(tr("CPU threads"), threads_);
  // More threads than the CPU runs at once take turns, which runs slower: said as the number
  // is chosen, as the command line says it.
  threads_note_ = new QLabel(engine);
  threads_note_->setObjectName(QStringLiteral("threadsNote"));
  threads_note_->setWordWrap(true);
  threads_note_->setForegroundRole(QPalette::PlaceholderText);
  threads_note_->hide();
  engine_form->addRow(QString(), threads_note_);
  connect(threads_, &QSpinBox::valueChanged, this, [this](int n) {
    const int hardware = QThread::idealThreadCount();
    threads_note_->setVisible(n > hardware);
    if (n > hardware)
      threads_note_->setText(
          tr("This CPU runs %1 threads at once; %2 take turns, which runs slower. \"As planned "
             "for this computer\" takes one per physical core.")
              .arg(hardware)
              .arg(n));
  });
  kv_cache_ = new QComboBox(engine);
  kv_cache_->setObjectName(QStringLiteral("kvCache"));
  kv_cache_->setAccessibleName(tr("KV cache"));
  kv_cache_->addItem(tr("As planned for the model (recommended)"), QStringLiteral("plan"));
  kv_cache_->addItem(tr("BF16: half of fp32's memory"), QStringLiteral("bf16"));
  kv_cache_->addItem(tr("8-bit: 0.54 of BF16's memory"), QStringLiteral("int8"));
  kv_cache_->addItem(tr("fp32: the most exact, twice BF16's memory"), QStringLiteral("f32"));
  kv_cache_->setToolTip(
      tr("How the CPU keeps the keys and values of the conversation where it runs attention. "
         "The setup assistant's plan picks BF16, or 8-bit where memory is short or it chose "
         "speed. 8-bit takes 0.54 of BF16's memory and is a little less exact; with AVX-512 it "
         "also decodes long conversations faster. A GPU keeps its own. Applies to the next "
         "model loaded."));
  engine_form->addRow(tr("KV cache"), kv_cache_);
  folders_v->addWidget(engine);
  folders_v->addStretch(1);

  auto* serving = new QGroupBox(tr("Local server (OpenAI API)"), connections);
  auto* serving_form = new QFormLayout(serving);
  server_port_ = new QSpinBox(serving);
  server_port_->setRange(1, 65535);
  server_port_->setAccessibleName(tr("Server port"));
  server_network_ = new QCheckBox(tr("Let other computers on the network use it"), serving);
  server_key_ = new QLineEdit(serving);
  server_key_->setEchoMode(QLineEdit::Password);
  server_key_->setPlaceholderText(tr("clients send it as a Bearer token; needed for the network"));
  server_key_->setAccessibleName(tr("Server API key"));
  server_origins_ = new QLineEdit(serving);
  server_origins_->setPlaceholderText(tr("none (e.g. http://localhost:3000, or * for any)"));
  server_origins_->setAccessibleName(tr("Web pages allowed to call the server"));
  serving_form->addRow(tr("Port"), server_port_);
  serving_form->addRow(QString(), server_network_);
  serving_form->addRow(tr("API key"), server_key_);
  serving_form->addRow(tr("Web pages allowed"), server_origins_);
  connections_v->addWidget(serving);

  auto* hub = new QGroupBox(tr("Hugging Face"), connections);
  auto* hub_form = new QFormLayout(hub);
  token_ = new QLineEdit(hub);
  token_->setEchoMode(QLineEdit::Password);
  token_->setPlaceholderText(tr("hf_… (for gated and private models; HF_TOKEN otherwise)"));
  token_->setAccessibleName(tr("Hugging Face token"));
  endpoint_ = new QLineEdit(hub);
  endpoint_->setPlaceholderText(tr("https://huggingface.co (or a mirror; HF_ENDPOINT otherwise)"));
  endpoint_->setAccessibleName(tr("Hub address"));
  hub_form->addRow(tr("Token"), token_);
  hub_form->addRow(tr("Hub or mirror"), endpoint_);
  connections_v->addWidget(hub);
  secrets_note_ = new QLabel(connections);
  secrets_note_->setWordWrap(true);
  secrets_note_->setForegroundRole(QPalette::PlaceholderText);
  connections_v->addWidget(secrets_note_);
  connections_v->addStretch(1);

  problem_ = new QLabel(this);
  problem_->setWordWrap(true);
  problem_->setStyleSheet(QStringLiteral("color: %1;").arg(theme::colors().error));
  problem_->setVisible(false);
  v->addWidget(problem_);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  connect(buttons, &QDialogButtonBox::accepted, this, [this] {
    if (save()) accept();
  });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  v->addWidget(buttons);
  load();
}

void PreferencesDialog::load() {
  QSettings s;
  const int t = theme_->findData(s.value(QStringLiteral("ui/theme"), QStringLiteral("system")));
  theme_->setCurrentIndex(t >= 0 ? t : 0);
  const ConversationSettings c = default_settings();
  temperature_->setValue(c.temperature);
  top_p_->setValue(c.top_p);
  top_k_->setValue(c.top_k);
  min_p_->setValue(c.min_p);
  max_tokens_->setValue(c.max_tokens);
  models_->setText(MainWindow::modelsFolder());
  shown_conversations_ = ConversationStore::defaultFolder();
  conversations_->setText(shown_conversations_);
  threads_->setValue(s.value(QStringLiteral("engine/threads"), 0).toInt());
  const int kv = kv_cache_->findData(s.value(QStringLiteral("engine/kvCache"), "plan").toString());
  kv_cache_->setCurrentIndex(kv >= 0 ? kv : 0);
  menu_entry_->setChecked(desktop_integration::installed());
  server_port_->setValue(s.value(QStringLiteral("server/port"), 8080).toInt());
  server_network_->setChecked(s.value(QStringLiteral("server/network"), false).toBool());
  server_key_->setText(
      secrets::read(QStringLiteral("server-api-key"), QStringLiteral("server/apiKey")));
  server_origins_->setText(s.value(QStringLiteral("server/origins")).toString());
  token_->setText(secrets::read(QLatin1String(DownloadQueue::kTokenSecret),
                                QLatin1String(DownloadQueue::kTokenKey)));
  endpoint_->setText(s.value(QLatin1String(DownloadQueue::kEndpointKey)).toString());
  secrets_note_->setText(
      secrets::in_keyring()
          ? tr("The token and the API key are kept in the desktop's keyring.")
          : tr("The token and the API key are kept in %1, readable by you only (this session "
               "has no desktop keyring).")
                .arg(QDir::toNativeSeparators(
                    QFileInfo(secrets::path(QStringLiteral("hub-token"))).absolutePath())));
}

bool PreferencesDialog::save() {
  const QString models = models_->text().trimmed();
  if (models.isEmpty() || !QDir().mkpath(models)) {
    problem_->setText(tr("The models folder %1 cannot be created; choose another one.")
                          .arg(models.isEmpty() ? tr("(empty)") : models));
    problem_->setVisible(true);
    return false;
  }
  if (server_network_->isChecked() && server_key_->text().trimmed().isEmpty()) {
    problem_->setText(
        tr("Other computers can use the server only with an API key: enter one, or "
           "keep the server to this computer."));
    problem_->setVisible(true);
    return false;
  }
  const QString conversations = conversations_->text().trimmed();
  const auto same_folder = [](const QString& a, const QString& b) {
    return QDir::cleanPath(QFileInfo(a).absoluteFilePath()) ==
           QDir::cleanPath(QFileInfo(b).absoluteFilePath());
  };
  const bool move = !same_folder(conversations, shown_conversations_);
  if (conversations.isEmpty()) {
    problem_->setText(tr("Choose a folder for the conversations."));
    problem_->setVisible(true);
    return false;
  }
  const QString endpoint = endpoint_->text().trimmed();
  if (!endpoint.isEmpty() && !endpoint.startsWith(QLatin1String("https://")) &&
      !endpoint.startsWith(QLatin1String("http://"))) {
    problem_->setText(
        tr("The Hub's address must start with https:// (or http:// for a mirror on this "
           "network)."));
    problem_->setVisible(true);
    return false;
  }
  if (move) {
    if (store_ != nullptr && replying_) {
      problem_->setText(
          tr("A reply is being written: stop it or let it finish, then move the conversations."));
      problem_->setVisible(true);
      return false;
    }
    if (store_ != nullptr && !store_->moveTo(conversations)) {
      problem_->setText(store_->error());
      problem_->setVisible(true);
      return false;
    }
    if (store_ == nullptr && !QDir().mkpath(conversations)) {
      problem_->setText(
          tr("The folder %1 cannot be created; choose another one.").arg(conversations));
      problem_->setVisible(true);
      return false;
    }
    moved_ = store_ != nullptr;
  }
  if (menu_entry_->isChecked() != desktop_integration::installed()) {
    const QString image = desktop_integration::appimage_path();
    const QString problem = !menu_entry_->isChecked() ? desktop_integration::remove()
                            : image.isEmpty()
                                ? tr("The menu entry starts Tandem's AppImage; start Tandem from "
                                     "it to add the entry.")
                                : desktop_integration::install(image);
    if (!problem.isEmpty()) {
      problem_->setText(problem);
      problem_->setVisible(true);
      return false;
    }
    desktop_integration::set_asked();
  }
  // Secrets go to files only the user can read, not to the settings file.
  QString secret_problem;
  if (!secrets::write(QStringLiteral("server-api-key"), server_key_->text().trimmed(),
                      &secret_problem) ||
      !secrets::write(QLatin1String(DownloadQueue::kTokenSecret), token_->text().trimmed(),
                      &secret_problem)) {
    problem_->setText(secret_problem);
    problem_->setVisible(true);
    return false;
  }
  QSettings s;
  if (move) {
    s.setValue(QStringLiteral("paths/data"), conversations);
    shown_conversations_ = conversations;
  }
  s.setValue(QStringLiteral("ui/theme"), theme_->currentData());
  s.setValue(QStringLiteral("chat/temperature"), temperature_->value());
  s.setValue(QStringLiteral("chat/topP"), top_p_->value());
  s.setValue(QStringLiteral("chat/topK"), top_k_->value());
  s.setValue(QStringLiteral("chat/minP"), min_p_->value());
  s.setValue(QStringLiteral("chat/maxTokens"), max_tokens_->value());
  s.setValue(QStringLiteral("paths/models"), models);
  s.setValue(QStringLiteral("engine/threads"), threads_->value());
  s.setValue(QStringLiteral("engine/kvCache"), kv_cache_->currentData());
  s.setValue(QStringLiteral("server/port"), server_port_->value());
  s.setValue(QStringLiteral("server/network"), server_network_->isChecked());

  s.setValue(QStringLiteral("server/origins"), server_origins_->text().trimmed());

  s.setValue(QLatin1String(DownloadQueue::kEndpointKey), endpoint);
  problem_->setVisible(false);
  return true;
}

void PreferencesDialog::setConversationStore(ConversationStore* store, bool replying) {
  store_ = store;
  replying_ = replying;
  if (store != nullptr) {
    shown_conversations_ = QFileInfo(store->path()).absolutePath();
    conversations_->setText(shown_conversations_);
  }
}

QString PreferencesDialog::problemText() const {
  return problem_->isHidden() ? QString() : problem_->text();
}

}  // namespace tandem::ui
