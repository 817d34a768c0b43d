// Asks about a Hugging Face repository off the UI thread (plan::lookup_repository: the
// catalog without the network, otherwise the Hub's config.json and file list) and hands the
// answer back with a signal. A newer check replaces one still running, whose answer is then
// dropped; the UI thread never waits on the network.
#pragma once

#include <QFutureWatcher>
#include <QList>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

#include "engine/hub/hub_config.h"
#include "engine/plan/model_lookup.h"

namespace tandem::ui {

using ModelLookupPtr = std::shared_ptr<const plan::ModelLookup>;

class RepositoryCheck : public QObject {
  Q_OBJECT
 public:
  explicit RepositoryCheck(QObject* parent = nullptr);
  // Stops what runs and waits for it: a stopped request ends within about 50 ms.
  ~RepositoryCheck() override;

  void start(const QString& repo, const hub::HubConfig& hub);
  void cancel();  // drops the answer of the check that runs, if any
  bool isRunning() const { return running_; }

 signals:
  void finished(const QString& repo, tandem::ui::ModelLookupPtr lookup);
  void failed(const QString& repo, const QString& message);  // a sentence for the user

 private:
  struct Answer {
    ModelLookupPtr lookup;
    QString message;
  };
  QList<QFutureWatcher<Answer>*> watchers_;  // this check's and stopped ones still finishing
  std::shared_ptr<std::atomic<bool>> stop_;  // the current check's
  quint64 generation_ = 0;
  bool running_ = false;
};

}  // namespace tandem::ui

Q_DECLARE_METATYPE(tandem::ui::ModelLookupPtr)
