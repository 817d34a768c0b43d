#include "ui/repository_check.h"

#include <QtConcurrent/QtConcurrentRun>

#include "engine/log/log.h"

namespace tandem::ui {

RepositoryCheck::RepositoryCheck(QObject* parent) : QObject(parent) {
  qRegisterMetaType<ModelLookupPtr>();
}

RepositoryCheck::~RepositoryCheck() {
  if (stop_) stop_->store(true);
  for (QFutureWatcher<Answer>* w : watchers_) w->waitForFinished();
}

void RepositoryCheck::start(const QString& repo, const hub::HubConfig& hub) {
  cancel();
  auto stop = std::make_shared<std::atomic<bool>>(false);
  stop_ = stop;
  const quint64 generation = ++generation_;
  running_ = true;
  auto* watcher = new QFutureWatcher<Answer>(this);
  watchers_.append(watcher);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation, repo] {
    const Answer answer = watcher->result();
    watchers_.removeOne(watcher);
    watcher->deleteLater();
    if (generation != generation_) return;  // replaced or cancelled
    running_ = false;
    if (answer.lookup) {
      emit finished(repo, answer.lookup);
    } else {
      emit failed(repo, answer.message);
    }
  });
  const std::string name = repo.trimmed().toStdString();
  watcher->setFuture(QtConcurrent::run([hub, name, stop]() -> Answer {
    try {
      return {std::make_shared<const plan::ModelLookup>(
                  plan::lookup_repository(hub, name, [stop] { return stop->load(); })),
              {}};
    } catch (const std::exception& e) {
      return {nullptr, QString::fromUtf8(e.what())};
    }
  }));
}

void RepositoryCheck::size(const ModelLookupPtr& lookup, const hub::HubConfig& hub) {
  if (!lookup || lookup->gguf_quantizations.empty() || plan::gguf_sizes_read(*lookup)) return;
  cancel();
  auto stop = std::make_shared<std::atomic<bool>>(false);
  stop_ = stop;
  const quint64 generation = ++generation_;
  sizing_ = true;
  auto* watcher = new QFutureWatcher<Answer>(this);
  watchers_.append(watcher);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
    const Answer answer = watcher->result();
    watchers_.removeOne(watcher);
    watcher->deleteLater();
    if (generation != generation_) return;  // replaced or cancelled
    sizing_ = false;
    if (answer.lookup) emit sized(answer.lookup);
  });
  watcher->setFuture(QtConcurrent::run([hub, lookup, stop]() -> Answer {
    auto sized = std::make_shared<plan::ModelLookup>(*lookup);
    try {
      plan::read_gguf_sizes(hub, *sized, [stop] { return stop->load(); });
      return {sized, {}};
    } catch (const std::exception& e) {
      log::info("{} {}: {}; its parts stay sized by the files' bytes per parameter", sized->repo,
                sized->gguf_quantization, e.what());
      return {nullptr, QString::fromUtf8(e.what())};
    }
  }));
}

void RepositoryCheck::cancel() {
  if (stop_) stop_->store(true);
  stop_.reset();
  ++generation_;
  running_ = false;
  sizing_ = false;
}

}  // namespace tandem::ui
