#include "ui/downloads/queue.h"

#include "ui/secret_store.h"

#include <QSettings>
#include <atomic>
#include <mutex>
#include <thread>

#include "engine/hub/download_plan.h"
#include "engine/hub/downloader.h"
#include "engine/hub/hub_error.h"
#include "engine/log/log.h"

namespace tandem::ui {
namespace {

constexpr auto kJobsKey = "downloads/jobs";

std::vector<std::string> toStd(const QStringList& list) {
  std::vector<std::string> out;
  for (const auto& s : list) out.push_back(s.toStdString());
  return out;
}

}  // namespace

// One download: its thread, and what the UI thread uses to steer it.
struct DownloadQueue::Job {
  std::thread thread;
  std::mutex mutex;                       // guards downloader
  hub::Downloader* downloader = nullptr;  // set while the transfer phase runs
  std::atomic<bool> cancelled{false};
  std::atomic<bool> paused{false};
  std::atomic<bool> finished{
      false};  // the thread has nothing left to do (it may still need joining)
};

DownloadQueue::DownloadQueue(QObject* parent)
    : QObject(parent), model_(new DownloadListModel(this)) {}

DownloadQueue::~DownloadQueue() {
  for (auto& [id, job] : jobs_) stopAndJoin(*job);
}

void DownloadQueue::stopAndJoin(Job& job) {
  job.cancelled = true;
  {
    std::lock_guard lock(job.mutex);
    if (job.downloader) job.downloader->cancel();
  }
  if (job.thread.joinable()) job.thread.join();
}

quint64 DownloadQueue::start(const DownloadJobSpec& spec) {
  const quint64 id = next_id_++;
  model_->addDownload(id, spec, DownloadJobState::Listing);
  run(id);
  save();
  return id;
}

hub::HubConfig DownloadQueue::hubConfig() {
  QSettings settings;
  return hub::hub_config_from(
      settings.value(kEndpointKey).toString().toStdString(),
      secrets::read(QLatin1String(kTokenSecret), QLatin1String(kTokenKey)).toStdString());
}

void DownloadQueue::run(quint64 id) {
  auto& slot = jobs_[id];
  if (slot) stopAndJoin(*slot);  // a finished earlier run of the same download
  slot = std::make_unique<Job>();
  Job* job = slot.get();
  model_->setState(id, DownloadJobState::Listing);

  const DownloadJobSpec spec = model_->spec(id);
  const hub::HubConfig hub = hubConfig();
  hub::DownloadRequest request;
  request.repo = spec.repo.toStdString();
  request.revision = spec.revision.toStdString();
  request.filter.include = toStd(spec.include);
  request.filter.exclude = toStd(spec.exclude);
  request.destination = spec.destination.toStdString();
  const hub::MemoryVerdictSource memory = memory_verdict_;

  job->thread = std::thread([this, id, job, hub, request, memory] {
    // Everything that reaches the UI goes through queued calls on this object; Qt drops
    // them if the queue is gone, and the queue joins this thread before it goes.
    auto post = [this](auto fn) {
      QMetaObject::invokeMethod(this, std::move(fn), Qt::QueuedConnection);
    };
    struct MarkFinished {
      Job* job;
      ~MarkFinished() { job->finished = true; }
    } mark_finished{job};
    try {
      // Retries while listing (offline, the Hub down) are shown at once on the row.
      hub::HubConfig listing = hub;
      listing.on_retry = [this, id, post](const hub::RetryNotice& n) {
        post([this, id, n] { model_->setRetrying(id, n); });
      };
      const hub::DownloadPlan plan =
          hub::plan_download(listing, request, [job] { return job->cancelled.load(); });
      const hub::Preflight preflight = hub::run_preflight(plan, memory);
      if (!preflight.may_start()) {
        const QString message = QString::fromStdString(preflight.space.message);
        post([this, id, message] { onFinished(id, DownloadJobState::Failed, message); });
        return;
      }
      QString warning;
      if (preflight.memory && !preflight.memory->fits)
        warning = QString::fromStdString(preflight.memory->message);
      hub::DownloadOptions options;
      options.hub = hub;
      options.hub.on_retry = [this, id, post](const hub::RetryNotice& n) {
        post([this, id, n] { model_->setRetrying(id, n); });
      };
      options.on_progress = [this, id, post, job](const hub::DownloadProgress& p) {
        const DownloadJobState state =
            job->paused ? DownloadJobState::Paused : DownloadJobState::Downloading;
        post([this, id, p, state] {
          if (model_->state(id) == DownloadJobState::Listing ||
              model_->state(id) == DownloadJobState::Downloading ||
              model_->state(id) == DownloadJobState::Paused) {
            model_->setState(id, state, model_->message(id));
          }
          model_->setProgress(id, p);
        });
      };
      hub::Downloader downloader(plan, options);
      {
        std::lock_guard lock(job->mutex);
        job->downloader = &downloader;
        if (job->paused) downloader.pause();
        if (job->cancelled) downloader.cancel();
      }
      post([this, id, warning] { model_->setState(id, DownloadJobState::Downloading, warning); });
      const hub::DownloadResult result = downloader.run();
      {
        std::lock_guard lock(job->mutex);
        job->downloader = nullptr;
      }
      const DownloadJobState state =
          result.outcome == hub::DownloadOutcome::Completed   ? DownloadJobState::Done
          : result.outcome == hub::DownloadOutcome::Cancelled ? DownloadJobState::Cancelled
                                                              : DownloadJobState::Failed;
      const QString message =
          state == DownloadJobState::Done ? warning : QString::fromStdString(result.message);
      post([this, id, state, message] { onFinished(id, state, message); });
    } catch (const hub::HubError& e) {
      const DownloadJobState state = e.kind() == hub::HubErrorKind::Cancelled
                                         ? DownloadJobState::Cancelled
                                         : DownloadJobState::Failed;
      const QString message = QString::fromStdString(e.what());
      post([this, id, state, message] { onFinished(id, state, message); });
    } catch (const std::exception& e) {
      const QString message = QString::fromStdString(e.what());
      post([this, id, message] { onFinished(id, DownloadJobState::Failed, message); });
    }
  });
}

void DownloadQueue::onFinished(quint64 id, DownloadJobState state, const QString& message) {
  model_->setState(id, state, message);
  if (state == DownloadJobState::Failed)
    log::warn("download of {} failed: {}", model_->spec(id).repo.toStdString(),
              message.toStdString());
  save();
  emit finished(id, state == DownloadJobState::Done);
}

void DownloadQueue::pause(quint64 id) {
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second->paused = true;
  {
    std::lock_guard lock(it->second->mutex);
    if (it->second->downloader) it->second->downloader->pause();
  }
  if (model_->state(id) == DownloadJobState::Downloading ||
      model_->state(id) == DownloadJobState::Listing) {
    model_->setState(id, DownloadJobState::Paused);
  }
  save();
}

void DownloadQueue::resume(quint64 id) {
  const auto it = jobs_.find(id);
  const DownloadJobState state = model_->state(id);
  if (state != DownloadJobState::Queued && state != DownloadJobState::Paused) return;
  if (it != jobs_.end() && !it->second->finished) {
    Job& job = *it->second;
    job.paused = false;
    std::lock_guard lock(job.mutex);
    if (job.downloader) job.downloader->resume();
    model_->setState(id,
                     job.downloader ? DownloadJobState::Downloading : DownloadJobState::Listing);
  } else {
    // Not running (restored from an earlier session): start it, resuming its .part files.
    run(id);
  }
  save();
}

void DownloadQueue::cancel(quint64 id) {
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    model_->setState(id, DownloadJobState::Cancelled);
    save();
    return;
  }
  it->second->cancelled = true;
  std::lock_guard lock(it->second->mutex);
  if (it->second->downloader) it->second->downloader->cancel();
}

void DownloadQueue::retry(quint64 id) {
  const DownloadJobState state = model_->state(id);
  if (state != DownloadJobState::Failed && state != DownloadJobState::Cancelled) return;
  run(id);
  save();
}

void DownloadQueue::remove(quint64 id) {
  const DownloadJobState state = model_->state(id);
  if (state == DownloadJobState::Listing || state == DownloadJobState::Downloading) return;
  const auto it = jobs_.find(id);
  if (it != jobs_.end()) {
    stopAndJoin(*it->second);
    jobs_.erase(it);
  }
  model_->removeDownload(id);
  save();
}

void DownloadQueue::trigger(quint64 id, const QString& action) {
  if (action == QLatin1String("pause")) pause(id);
  if (action == QLatin1String("resume")) resume(id);
  if (action == QLatin1String("cancel")) cancel(id);
  if (action == QLatin1String("retry")) retry(id);
  if (action == QLatin1String("remove")) remove(id);
}

void DownloadQueue::setMemoryVerdictSource(hub::MemoryVerdictSource source) {
  memory_verdict_ = std::move(source);
}

void DownloadQueue::save() const {
  QSettings settings;
  settings.beginWriteArray(kJobsKey);
  int i = 0;
  for (const quint64 id : model_->ids()) {
    settings.setArrayIndex(i++);
    const DownloadJobSpec spec = model_->spec(id);
    settings.setValue("repo", spec.repo);
    settings.setValue("revision", spec.revision);
    settings.setValue("include", spec.include);
    settings.setValue("exclude", spec.exclude);
    settings.setValue("destination", spec.destination);
    settings.setValue("state", downloadJobStateName(model_->state(id)));
    settings.setValue("message", model_->message(id));
  }
  settings.endArray();
}

void DownloadQueue::restore() {
  QSettings settings;
  const int count = settings.beginReadArray(kJobsKey);
  struct Saved {
    DownloadJobSpec spec;
    DownloadJobState state;
    QString message;
  };
  std::vector<Saved> saved;
  for (int i = 0; i < count; ++i) {
    settings.setArrayIndex(i);
    Saved s;
    s.spec.repo = settings.value("repo").toString();
    s.spec.revision = settings.value("revision", QStringLiteral("main")).toString();
    s.spec.include = settings.value("include").toStringList();
    s.spec.exclude = settings.value("exclude").toStringList();
    s.spec.destination = settings.value("destination").toString();
    s.state = downloadJobStateFromName(settings.value("state").toString())
                  .value_or(DownloadJobState::Queued);
    s.message = settings.value("message").toString();
    if (!s.spec.repo.isEmpty() && !s.spec.destination.isEmpty()) saved.push_back(std::move(s));
  }
  settings.endArray();
  for (const auto& s : saved) {
    const quint64 id = next_id_++;
    // A download that was running when the app closed resumes; one the user paused stays
    // paused (not started) until they resume it.
    const bool running =
        s.state == DownloadJobState::Listing || s.state == DownloadJobState::Downloading;
    const DownloadJobState shown =
        s.state == DownloadJobState::Paused ? DownloadJobState::Queued : s.state;
    model_->addDownload(id, s.spec, running ? DownloadJobState::Listing : shown,
                        running ? QString() : s.message);
    if (running) run(id);
  }
}

}  // namespace tandem::ui
