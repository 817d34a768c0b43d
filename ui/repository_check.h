// Asks about a Hugging Face repository off the UI thread (plan::lookup_repository: the
// catalog without the network, otherwise the Hub's config.json and file list), and sizes a
// GGUF quantisation from its files' headers, and hands the answers back with signals. A newer check
// replaces one still running, whose answer is then dropped; the UI thread never waits on the
// network.
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
  void cancel();  // drops the answer of the check that runs, if any (and of any sizing)
  bool isRunning() const { return running_; }
  // A GGUF repository's chosen quantisation sized from its files' headers
  // (plan::read_gguf_sizes), unless it is already: emits sized() with the lookup that has
  // them. A failure leaves the estimate from the file sizes (logged, nothing emitted).
  void size(const ModelLookupPtr& lookup, const hub::HubConfig& hub);
  bool isSizing() const { return sizing_; }

 signals:
  void finished(const QString& repo, tandem::ui::ModelLookupPtr lookup);
  void failed(const QString& repo, const QString& message);  // a sentence for the user
  void sized(tandem::ui::ModelLookupPtr lookup);

 private:
  struct Answer {
    ModelLookupPtr lookup;
    QString message;
  };
  QList<QFutureWatcher<Answer>*> watchers_;  // this check's and stopped ones still finishing
  std::shared_ptr<std::atomic<bool>> stop_;  // the current check's
  quint64 generation_ = 0;
  bool running_ = false;
  bool sizing_ = false;
};

}  // namespace tandem::ui

Q_DECLARE_METATYPE(tandem::ui::ModelLookupPtr)
