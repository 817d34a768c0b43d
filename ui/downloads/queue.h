// Runs the user's downloads off the UI thread and remembers them across restarts.
// Each download runs as an engine job (hub::Downloader) on a thread this queue owns and
// joins; progress comes back to the UI thread as queued calls and lands in the model.
#pragma once

#include <QObject>
#include <map>
#include <memory>

#include "engine/hub/hub_config.h"
#include "engine/hub/preflight.h"
#include "ui/downloads/list_model.h"

namespace tandem::ui {

class DownloadQueue : public QObject {
  Q_OBJECT
 public:
  explicit DownloadQueue(QObject* parent = nullptr);
  ~DownloadQueue() override;  // cancels what runs (the .part files stay) and waits

  DownloadListModel* model() const { return model_; }

  quint64 start(const DownloadJobSpec& spec);
  void pause(quint64 id);
  void resume(quint64 id);  // also starts a download restored as not started
  void cancel(quint64 id);
  void retry(quint64 id);
  void remove(quint64 id);  // forgets a download that is not running; its files stay
  // The action names of DownloadListModel::ActionsRole.
  void trigger(quint64 id, const QString& action);

  // Shows the saved downloads and resumes those that were running when the app closed.
  void restore();

  // The planner's memory verdict, once it can give one; shown as a warning.
  void setMemoryVerdictSource(hub::MemoryVerdictSource source);

  // Where the settings keep the mirror and the token (empty: HF_ENDPOINT, HF_TOKEN).
  static constexpr const char* kEndpointKey = "hub/endpoint";
  static constexpr const char* kTokenKey = "hub/token";     // where settings kept it before
  static constexpr const char* kTokenSecret = "hub-token";  // ui/secret_store.h
  // The Hub those settings name, falling back to HF_ENDPOINT and HF_TOKEN.
  static hub::HubConfig hubConfig();

 signals:
  void finished(quint64 id, bool ok);

 private:
  struct Job;
  void run(quint64 id);
  void stopAndJoin(Job& job);
  void onFinished(quint64 id, DownloadJobState state, const QString& message);
  void save() const;

  DownloadListModel* model_;
  std::map<quint64, std::unique_ptr<Job>> jobs_;
  quint64 next_id_ = 1;
  hub::MemoryVerdictSource memory_verdict_;
};

}  // namespace tandem::ui
