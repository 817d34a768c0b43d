#include "ui/engine_host.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>

#include "engine/generate/chat_session.h"
#include "engine/hw/topology.h"
#include "engine/log/log.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_spec.h"
#include "engine/plan/planned_format.h"
#include "engine/schedule/routing_stats.h"
#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"
#include "kernels/cpu/isa.h"

namespace tandem::ui {
namespace {

// Prompts shorter than this are not plotted: their rate is mostly timer noise.
constexpr qint64 kMeasuredPromptTokens = 32;

// A reply's decode rate as it streams, for the live chart (the chat's turns and the local
// server's replies alike): at most one sample a quarter second, the pieces after the first
// over the time since it.
class StreamRate {
 public:
  StreamRate() { clock_.start(); }
  // Counts one piece; the rate to plot now, or below zero when it is not yet time to.
  double piece() {
    ++pieces_;
    const qint64 now = clock_.elapsed();
    if (first_ms_ < 0) first_ms_ = now;
    if (now - last_ms_ < 250 || now <= first_ms_) return -1.0;
    last_ms_ = now;
    return 1000.0 * static_cast<double>(pieces_ - 1) / static_cast<double>(now - first_ms_);
  }

 private:
  QElapsedTimer clock_;
  qint64 last_ms_ = -1000, first_ms_ = -1, pieces_ = 0;
};

std::vector<generate::ChatMessage> toEngine(const QVector<StoredMessage>& messages) {
  std::vector<generate::ChatMessage> out;
  for (const StoredMessage& m : messages)
    out.push_back({m.role.toStdString(), m.content.toStdString(), m.thinking.toStdString()});
  return out;
}

QVector<StoredMessage> fromEngine(const std::vector<generate::ChatMessage>& messages) {
  QVector<StoredMessage> out;
  for (const auto& m : messages) {
    out.push_back({QString::fromStdString(m.role), QString::fromStdString(m.content),
                   QString::fromStdString(m.thinking)});
  }
  return out;
}

// The CPU kernels a model runs on, as the System page names them.
QString cpuKernelsLabel(kernels::CpuVariant variant) {
  switch (variant) {
    case kernels::CpuVariant::Amx:
      return EngineWorker::tr("AMX tiles, AVX-512 beside them");
    case kernels::CpuVariant::Avx512:
      return EngineWorker::tr("AVX-512");
    case kernels::CpuVariant::Avx2:
      return EngineWorker::tr("AVX2");
    case kernels::CpuVariant::Scalar:
      break;
  }
  return EngineWorker::tr("portable C++ (no vector instructions)");
}

}  // namespace

EngineWorker::EngineWorker() = default;
EngineWorker::~EngineWorker() {
  unload();
}

void EngineWorker::unload() {
  active_.store(nullptr);
  if (runner_ && !record_expert_stats_.empty() && runner_->spec().num_experts > 0) {
    const measure::MetricsSnapshot s = runner_->metrics()->snapshot();
    try {
      schedule::record_routing_statistics(record_expert_stats_, runner_->spec(), s.hits, s.tokens);
      log::info("added the routing of {} tokens to {}", s.tokens, record_expert_stats_);
    } catch (const std::exception& e) {
      log::warn("{}", e.what());
    }
  }
  record_expert_stats_.clear();
  completions_.reset();
  session_.reset();
  runner_.reset();
  pool_.reset();
  template_.reset();
  tokenizer_.reset();
  model_.reset();
}

void EngineWorker::requestStop(quint64 turn) {
  quint64 through = stop_through_.load();
  while (through < turn && !stop_through_.compare_exchange_weak(through, turn)) {
  }
  const quint64 active = active_turn_.load();
  if (active != 0 && active <= turn) {
    if (generate::ChatSession* s = active_.load()) s->request_stop();
  }
}

void EngineWorker::loadModel(const LoadRequest& request) {
  const QString& folder = request.folder;
  // What can be checked without reading the weights (the config, tokenizer, template and
  // the safetensors headers) is checked before the model in use is unloaded: a folder that
  // fails there leaves it loaded.
  try {
    const std::string path = folder.toStdString();
    model::LoadedModel::check(path);
    text::load_tokenizer(path);
    ChatTemplate::from_model_folder(path);
  } catch (const std::exception& e) {
    log::warn("loading {} failed: {}", folder.toStdString(), e.what());
    emit modelLoadFailed(folder, QString::fromUtf8(e.what()), session_ != nullptr);
    return;
  }
  unload();
  try {
    const std::string path = folder.toStdString();
    const forward::RunSettings& s = request.settings;
    model::LoadOptions load = s.load;
    // No format chosen: the plan's for this computer, where it has one for the model (a
    // converted folder and a GGUF file carry their own). A model it cannot plan loads as
    // stored, and the load below says what is wrong with it.
    QString planned_reason;
    bool planned_fits = true;
    if (request.plan_cpu_format) {
      try {
        std::shared_ptr<const hw::HardwareReport> report = request.hardware;
        if (!report && request.hardware_probe.isValid())
          report = request.hardware_probe.result();  // waits here, not on the UI thread
        const hw::HardwareReport hardware = report ? *report : hw::probe_hardware({});
        const auto planned = plan::planned_cpu_format(hardware, path, s.context);
        if (planned && planned->fits) {
          load.cpu_format = planned->format;
          planned_reason = QString::fromStdString(planned->reason);
          log::info("{}: no CPU format chosen, so the plan's: {}", path, planned->reason);
        } else if (planned) {
          // Mapped as stored, the weights are read from the disk as they are needed.
          planned_reason = QString::fromStdString(planned->reason);
          planned_fits = false;
          log::warn("{}: no CPU format chosen, and the plan {}; so the weights stay as stored",
                    path, planned->reason);
        }
      } catch (const std::exception& e) {
        log::info("{}: no CPU format chosen and no plan for it ({}), so as stored", path, e.what());
      }
    }
    load.on_progress = [this, folder](const model::LoadProgress& p) {
      emit loadProgress(folder, QString::fromStdString(p.stage), static_cast<qint64>(p.done),
                        static_cast<qint64>(p.total));
    };
    auto model = model::LoadedModel::load(path, load);
    auto tokenizer = text::load_tokenizer(path);
    auto chat_template = std::make_unique<ChatTemplate>(ChatTemplate::from_model_folder(path));
    const int n = s.threads > 0 ? s.threads : std::max(1, hw::probe_topology().physical_cores);
    const qint64 ctx =
        s.context > 0 ? s.context : std::min<qint64>(model->spec().max_position_embeddings, 4096);
    auto pool = std::make_unique<backend::NumaPools>(n, model->pools());
    forward::BuiltRunner built = forward::make_runner(*model, *pool, s, ctx);
    auto session =
        std::make_unique<generate::ChatSession>(*built.runner, *tokenizer, *chat_template, ctx);
    const forward::ModelRunner& runner = *built.runner;
    ModelInfo info;
    info.folder = folder;
    info.name = QFileInfo(folder).fileName();
    info.architecture = QString::fromStdString(model->spec().architecture);
    info.layers = static_cast<int>(model->spec().num_layers);
    info.experts = static_cast<int>(model->spec().num_experts);
    info.experts_per_token = static_cast<int>(model->spec().experts_per_token);
    info.context = ctx;
    info.threads = n;
    // A converted folder brings its own format, whatever was asked for.
    info.cpu_format = QString::fromUtf8(model::cpu_format_name(model->cpu_format()).data());
    info.cpu_kernels = cpuKernelsLabel(model->cpu_variant());
    if (built.widening) {
      info.widening = QString::fromStdString(forward::summary(*built.widening));
      info.widening_detail = QString::fromStdString(forward::figures(*built.widening));
      info.widens = built.widening->from > 0;
    }
    info.profile = request.profile;
    info.planned_format_reason = planned_reason;
    info.planned_format_fits = planned_fits;
    info.placement_note = QString::fromStdString(built.note);
    info.no_accelerator_reason = QString::fromStdString(built.no_accelerator_reason);
    if (runner.has_accelerator()) {
      const schedule::HybridOptions& h = runner.hybrid();
      info.accelerator = QString::fromStdString(runner.device().description());
      info.gpu_experts_per_layer = static_cast<int>(runner.gpu_experts_per_layer());
      info.placement_strategy = QString::fromUtf8(schedule::strategy_name(h.strategy).data());
      info.deferred_per_token = static_cast<int>(h.max_deferred_per_token);
      info.layerwise_threshold = runner.layerwise_prefill() ? h.prefill_token_threshold : 0;
      info.dynamic_update = h.dynamic_update;
    }
    info.metrics = session->metrics();
    model_ = std::move(model);
    tokenizer_ = std::move(tokenizer);
    template_ = std::move(chat_template);
    pool_ = std::move(pool);
    runner_ = std::move(built.runner);
    session_ = std::move(session);
    context_ = ctx;
    record_expert_stats_ = s.record_expert_stats;
    started_ms_ = QDateTime::currentMSecsSinceEpoch();
    emit modelLoaded(info);
  } catch (const std::exception& e) {
    session_.reset();
    log::warn("loading {} failed: {}", folder.toStdString(), e.what());
    emit modelLoadFailed(folder, QString::fromUtf8(e.what()), false);
  }
}

void EngineWorker::runTurn(const TurnRequest& request) {
  TurnOutcome outcome;
  outcome.id = request.id;
  if (!session_) {
    outcome.error = tr("No model is loaded. Open a model folder first.");
    outcome.messages = request.history;
    emit turnFinished(outcome);
    return;
  }
  generate::ChatSettings settings;
  settings.system_prompt = request.settings.system_prompt.toStdString();
  settings.sampling.temperature = static_cast<float>(request.settings.temperature);
  settings.sampling.top_p = static_cast<float>(request.settings.top_p);
  settings.sampling.top_k = request.settings.top_k;
  settings.sampling.min_p = static_cast<float>(request.settings.min_p);
  settings.sampling.seed = static_cast<std::uint64_t>(QDateTime::currentMSecsSinceEpoch());
  settings.max_tokens = request.settings.max_tokens;
  session_->set_settings(settings);
  session_->set_messages(toEngine(request.history));

  StreamRate rate;
  auto on_delta = [&](const generate::ThinkingDelta& d) {
    const double decode = rate.piece();
    emit turnDelta(request.id, QString::fromStdString(d.answer),
                   QString::fromStdString(d.thinking));
    if (decode >= 0) emit throughputSample(secondsSinceLoad(), -1.0, decode);
  };
  active_.store(session_.get());
  active_turn_.store(request.id);
  // Stop was pressed before this turn started: it stops before its first token.
  if (stop_through_.load() >= request.id) session_->request_stop();
  try {
    generate::TurnResult r;
    switch (request.kind) {
      case TurnRequest::Kind::Send:
        r = session_->send(request.text.toStdString(), on_delta, request.drop_oldest);
        break;
      case TurnRequest::Kind::Regenerate:
        r = session_->regenerate(on_delta, request.drop_oldest);
        break;
      case TurnRequest::Kind::Edit:
        r = session_->edit(static_cast<std::size_t>(request.edit_index), request.text.toStdString(),
                           on_delta, request.drop_oldest);
        break;
    }
    outcome.stopped = r.stats.stop == generate::StopReason::Cancelled;
    outcome.prompt_tokens = r.stats.prompt_tokens;
    outcome.cached_tokens = r.stats.cached_tokens;
    outcome.generated_tokens = r.stats.generated_tokens;
    outcome.prompt_tokens_per_s = r.stats.prompt_tokens_per_s();
    outcome.decode_tokens_per_s = r.stats.decode_tokens_per_s();
    outcome.first_token_seconds = r.first_token_seconds;
    outcome.dropped_turns = r.dropped_turns;
    const double seconds = secondsSinceLoad();
    // A prompt of a few tokens takes too little time to give a meaningful rate.
    emit throughputSample(
        seconds,
        outcome.prompt_tokens >= kMeasuredPromptTokens && outcome.prompt_tokens_per_s > 0
            ? outcome.prompt_tokens_per_s
            : -1.0,
        outcome.decode_tokens_per_s);
  } catch (const generate::ContextOverflow& e) {
    outcome.overflow = true;
    outcome.error = QString::fromUtf8(e.what());
  } catch (const std::exception& e) {
    outcome.error = tr("The reply failed: %1").arg(QString::fromUtf8(e.what()));
  }
  active_turn_.store(0);
  active_.store(nullptr);
  outcome.messages = fromEngine(session_->messages());
  outcome.context_used = session_->context_used();
  outcome.context_capacity = session_->context_capacity();
  emit turnFinished(outcome);
}

EngineHost::EngineHost(QObject* parent) : QObject(parent), thread_(new QThread) {
  qRegisterMetaType<LoadRequest>();
  qRegisterMetaType<ModelInfo>();
  qRegisterMetaType<TurnRequest>();
  qRegisterMetaType<TurnOutcome>();
  thread_->setObjectName(QStringLiteral("tandem-engine"));
  worker_ = new EngineWorker;
  worker_->moveToThread(thread_.get());
  connect(thread_.get(), &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &EngineWorker::modelLoaded, this, [this](const ModelInfo& info) {
    model_ = info;
    loads_ = std::max(0, loads_ - 1);
    emit loadingChanged(loads_ > 0);
    emit modelLoaded(info);
  });
  connect(worker_, &EngineWorker::modelLoadFailed, this,
          [this](const QString& folder, const QString& message, bool kept) {
            if (!kept) model_ = {};
            loads_ = std::max(0, loads_ - 1);
            emit loadingChanged(loads_ > 0);
            emit modelLoadFailed(folder, message, kept);
          });
  connect(worker_, &EngineWorker::loadProgress, this, &EngineHost::loadProgress);
  connect(worker_, &EngineWorker::turnDelta, this, &EngineHost::turnDelta);
  connect(worker_, &EngineWorker::throughputSample, this, &EngineHost::throughputSample);
  connect(worker_, &EngineWorker::turnFinished, this, [this](const TurnOutcome& outcome) {
    busy_ = false;
    emit busyChanged(false);
    emit turnFinished(outcome);
  });
  // The engine thread and the CPU pool it creates (threads inherit it) yield to the UI
  // thread when the cores are busy, so the window stays responsive while a model writes.
  connect(
      thread_.get(), &QThread::started, worker_,
      [] { setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 4); },
      Qt::DirectConnection);
  thread_->start();
}

EngineHost::~EngineHost() {
  // Stop a running reply so the thread can finish promptly.
  if (worker_) worker_->requestStop();
}

void EngineHost::loadModel(const LoadRequest& request) {
  ++loads_;
  emit loadingChanged(true);
  QMetaObject::invokeMethod(worker_, "loadModel", Qt::QueuedConnection,
                            Q_ARG(tandem::ui::LoadRequest, request));
}

quint64 EngineHost::startTurn(TurnRequest request) {
  request.id = next_turn_++;
  busy_ = true;
  emit busyChanged(true);
  QMetaObject::invokeMethod(worker_, "runTurn", Qt::QueuedConnection,
                            Q_ARG(tandem::ui::TurnRequest, request));
  return request.id;
}

double EngineWorker::secondsSinceLoad() const {
  return static_cast<double>(QDateTime::currentMSecsSinceEpoch() - started_ms_) / 1000.0;
}

void EngineWorker::runCompletion(const std::shared_ptr<serve::CompletionJob>& job) {
  if (job->cancel.load()) {  // the client left while it waited
    serve::CompletionResult gone;
    gone.cancelled = true;
    job->on_done(gone, nullptr);
    return;
  }
  if (!runner_) {
    const serve::RequestError e(503, "No model is loaded yet; load one in Tandem, then try again.");
    job->on_done({}, &e);
    return;
  }
  try {
    if (!completions_)
      completions_ =
          std::make_unique<serve::CompletionRunner>(*runner_, *tokenizer_, *template_, context_);
    // The live chart follows the server's replies as it follows the chat's: the decode rate
    // every quarter second while a reply streams, and the prompt's rate at its end.
    StreamRate rate;
    const auto on_delta = [&](const serve::StreamDelta& d) {
      if (const double decode = rate.piece(); decode >= 0)
        emit throughputSample(secondsSinceLoad(), -1.0, decode);
      if (job->on_delta) job->on_delta(d);
    };
    const serve::CompletionResult r = completions_->run(job->request, on_delta, &job->cancel);
    const std::int64_t computed = r.prompt_tokens - r.cached_tokens;
    emit throughputSample(secondsSinceLoad(),
                          computed >= kMeasuredPromptTokens && r.prompt_seconds > 0
                              ? static_cast<double>(computed) / r.prompt_seconds
                              : -1.0,
                          r.completion_tokens > 1 && r.decode_seconds > 0
                              ? static_cast<double>(r.completion_tokens - 1) / r.decode_seconds
                              : -1.0);
    job->on_done(r, nullptr);
  } catch (const serve::RequestError& e) {
    job->on_done({}, &e);
  } catch (const std::exception& e) {
    log::warn("a server request failed: {}", e.what());
    const serve::RequestError error(500, std::string("The engine failed: ") + e.what());
    job->on_done({}, &error);
  }
}

void EngineHost::submit(std::shared_ptr<serve::CompletionJob> job) {
  EngineWorker* worker = worker_;
  QMetaObject::invokeMethod(
      worker_, [worker, job = std::move(job)] { worker->runCompletion(job); },
      Qt::QueuedConnection);
}

void EngineHost::stop() {
  if (next_turn_ > 1) worker_->requestStop(next_turn_ - 1);
}

}  // namespace tandem::ui
