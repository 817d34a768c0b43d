// The engine off the UI thread. EngineHost lives on the UI thread and owns a QThread on
// which an EngineWorker holds the model and the chat session; requests and results cross
// with queued signals, and stopping a reply is an atomic flag, so the UI never waits.
#pragma once

#include <QFuture>
#include <QObject>
#include <QThread>
#include <QVector>
#include <atomic>
#include <memory>

#include "engine/forward/runner_settings.h"
#include "engine/hw/hardware_report.h"
#include "engine/serve/completion.h"
#include "ui/conversation/store.h"

namespace tandem::generate {
class ChatSession;
}
namespace tandem::measure {
class Metrics;
}
namespace tandem::text {
class Tokenizer;
}
namespace tandem {
class ChatTemplate;
}

namespace tandem::ui {

// What to load and how to run it: the settings a saved profile, the setup wizard and the
// command line made (forward/runner_settings.h).
struct LoadRequest {
  QString folder;
  forward::RunSettings settings;
  QString profile;  // the profile the settings came from, for display; empty: none
  // Nothing chose the CPU format: the worker takes the plan's for this model on `hardware`
  // (plan::planned_cpu_format), as a profile would have given it. Without a report, the
  // worker waits for `hardware_probe`, the probe under way (the window's, at start-up), or
  // else probes the machine itself.
  bool plan_cpu_format = false;
  std::shared_ptr<const hw::HardwareReport> hardware;
  QFuture<std::shared_ptr<const hw::HardwareReport>> hardware_probe;
};

struct ModelInfo {
  QString folder;
  QString name;
  QString architecture;
  int layers = 0;
  int experts = 0;
  int experts_per_token = 0;
  qint64 context = 0;
  int threads = 0;
  QString cpu_format;
  QString cpu_kernels;      // the packed weights' CPU kernels: "AVX-512", "AVX2", ...
  QString widening;         // on AMX, where products are widened, in a line; else empty
  QString widening_detail;  // the same with the measurement's figures
  bool widens = false;      // on AMX, whether products of enough tokens are widened at all
  // Where it runs: the accelerator's description, or empty for the CPU alone.
  QString accelerator;
  QString placement_note;         // why it runs where it does, for the user
  QString no_accelerator_reason;  // without an accelerator, why, in a few words
  QString profile;
  // Where the plan was asked for cpu_format (LoadRequest::plan_cpu_format), its reason; else
  // empty. planned_format_fits false: no format fit the memory, and the weights stay as stored.
  QString planned_format_reason;
  bool planned_format_fits = true;
  int gpu_experts_per_layer = 0;
  QString placement_strategy;
  int deferred_per_token = 0;
  qint64 layerwise_threshold = 0;  // 0: off
  bool dynamic_update = false;
  std::shared_ptr<const measure::Metrics> metrics;  // read by the live charts from any thread
};

struct TurnRequest {
  enum class Kind { Send, Regenerate, Edit };
  quint64 id = 0;
  Kind kind = Kind::Send;
  QVector<StoredMessage> history;  // the conversation before this turn's change
  QString text;                    // Send and Edit: the user's message
  int edit_index = -1;             // Edit: which message
  ConversationSettings settings;
  bool drop_oldest = false;  // make room by dropping the oldest turns
};

struct TurnOutcome {
  quint64 id = 0;
  QVector<StoredMessage> messages;  // the conversation after the turn
  bool stopped = false;
  bool overflow = false;
  QString error;  // a sentence for the user; empty on success
  qint64 prompt_tokens = 0;
  qint64 cached_tokens = 0;
  qint64 generated_tokens = 0;
  double prompt_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double first_token_seconds = 0;
  qint64 context_used = 0;
  qint64 context_capacity = 0;
  int dropped_turns = 0;
};

class EngineWorker : public QObject {
  Q_OBJECT
 public:
  EngineWorker();
  ~EngineWorker() override;
  // Thread-safe: stops the turns up to `turn` (all, by default), the running one after its
  // current token, one still queued as soon as it starts.
  void requestStop(quint64 turn = ~quint64{0});

 public slots:
  void loadModel(const tandem::ui::LoadRequest& request);
  void runTurn(const tandem::ui::TurnRequest& request);

 public:
  // A request of the local server, on a KV cache of its own (the chat's stays as it is),
  // between the chat's turns.
  void runCompletion(const std::shared_ptr<serve::CompletionJob>& job);

 signals:
  void modelLoaded(const tandem::ui::ModelInfo& info);
  // `kept`: the model in use before is still loaded (the folder failed its checks before
  // anything was unloaded).
  void modelLoadFailed(const QString& folder, const QString& message, bool kept);
  // A model being loaded: `done` of `total` items of `stage` ("packing the weights").
  void loadProgress(const QString& folder, const QString& stage, qint64 done, qint64 total);
  void turnDelta(quint64 id, const QString& answer, const QString& thinking);
  void turnFinished(const tandem::ui::TurnOutcome& outcome);
  void throughputSample(double seconds, double prompt_tokens_per_s, double decode_tokens_per_s);

 private:
  std::unique_ptr<model::LoadedModel> model_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<backend::NumaPools> pool_;
  std::unique_ptr<forward::ModelRunner> runner_;
  std::unique_ptr<generate::ChatSession> session_;
  std::unique_ptr<serve::CompletionRunner> completions_;  // made at the server's first request
  qint64 context_ = 0;
  std::string record_expert_stats_;  // where the loaded model's routing goes when unloaded

  // Adds the loaded model's routing to its statistics file, when it has one; then unloads.
  void unload();
  std::atomic<generate::ChatSession*> active_{nullptr};
  std::atomic<quint64> active_turn_{0};
  std::atomic<quint64> stop_through_{0};  // turns with ids up to this one are to stop
  qint64 started_ms_ = 0;
  // The live chart's clock: seconds since the model was loaded.
  double secondsSinceLoad() const;
};

// Also lends the loaded model to the local server (serve::CompletionPort): its requests run
// on the engine's thread, one at a time, between the chat's turns.
class EngineHost : public QObject, public serve::CompletionPort {
  Q_OBJECT
 public:
  explicit EngineHost(QObject* parent = nullptr);
  ~EngineHost() override;

  // `cpu_format`: "native", "int8" or "bf16" (see model::CpuFormat); empty means native.
  void loadModel(const LoadRequest& request);
  quint64 startTurn(TurnRequest request);
  void stop();  // returns at once; the running turn ends after the current token

  bool isLoading() const { return loads_ > 0; }
  bool isBusy() const { return busy_; }
  bool hasModel() const { return !model_.folder.isEmpty(); }
  const ModelInfo& model() const { return model_; }

  std::string served_model() const override { return model_.name.toStdString(); }
  void submit(std::shared_ptr<serve::CompletionJob> job) override;

 signals:
  void modelLoaded(const tandem::ui::ModelInfo& info);
  void modelLoadFailed(const QString& folder, const QString& message, bool kept);
  // A model being loaded: `done` of `total` items of `stage` ("packing the weights").
  void loadProgress(const QString& folder, const QString& stage, qint64 done, qint64 total);
  void turnDelta(quint64 id, const QString& answer, const QString& thinking);
  void turnFinished(const tandem::ui::TurnOutcome& outcome);
  void throughputSample(double seconds, double prompt_tokens_per_s, double decode_tokens_per_s);
  void busyChanged(bool busy);
  void loadingChanged(bool loading);

 private:
  struct ThreadStopper {
    void operator()(QThread* t) const {
      t->quit();
      t->wait();
      delete t;
    }
  };
  std::unique_ptr<QThread, ThreadStopper> thread_;
  EngineWorker* worker_ = nullptr;  // lives on thread_, deleted when it finishes
  ModelInfo model_;
  int loads_ = 0;  // asked for and not answered yet (a second may be queued behind one)
  bool busy_ = false;
  quint64 next_turn_ = 1;
};

}  // namespace tandem::ui

Q_DECLARE_METATYPE(tandem::ui::LoadRequest)
Q_DECLARE_METATYPE(tandem::ui::ModelInfo)
Q_DECLARE_METATYPE(tandem::ui::TurnRequest)
Q_DECLARE_METATYPE(tandem::ui::TurnOutcome)
