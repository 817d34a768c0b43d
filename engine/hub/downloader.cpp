#include "engine/hub/downloader.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/hub/content_digest.h"
#include "engine/hub/http_transfer.h"
#include "engine/hub/hub_failure.h"
#include "engine/log/log.h"

namespace tandem::hub {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// "bytes 100-199/1000" -> {100, 1000}
bool parse_content_range(const std::string& value, std::uint64_t& start, std::uint64_t& total) {
  const auto space = value.find(' ');
  const auto dash = value.find('-');
  const auto slash = value.find('/');
  if (space == std::string::npos || dash == std::string::npos || slash == std::string::npos)
    return false;
  const char* b = value.data();
  return std::from_chars(b + space + 1, b + dash, start).ec == std::errc() &&
         std::from_chars(b + slash + 1, b + value.size(), total).ec == std::errc();
}

}  // namespace

const char* file_state_name(FileState state) {
  switch (state) {
    case FileState::Queued:
      return "queued";
    case FileState::Downloading:
      return "downloading";
    case FileState::Verifying:
      return "verifying";
    case FileState::Waiting:
      return "waiting to retry";
    case FileState::Paused:
      return "paused";
    case FileState::Done:
      return "done";
    case FileState::Failed:
      return "failed";
    case FileState::Cancelled:
      return "cancelled";
  }
  return "";
}

struct Downloader::Slot {
  PlannedFile planned;
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<std::uint64_t> bytes_received{0};  // over the network in this run, for the speed
  FileState state = FileState::Queued;
  int failed_attempts = 0;
  std::string error;
  std::optional<HubErrorKind> error_kind;
  TransferRate speed;
};

Downloader::Downloader(DownloadPlan plan, DownloadOptions options)
    : plan_(std::move(plan)), options_(std::move(options)) {
  for (const auto& planned : plan_.files) {
    auto slot = std::make_unique<Slot>();
    slot->planned = planned;
    slot->bytes_done = planned.bytes_present;
    slots_.push_back(std::move(slot));
  }
  if (!options_.open_part_file) options_.open_part_file = hub::open_part_file;
}

Downloader::~Downloader() = default;

void Downloader::pause() {
  paused_ = true;
  wake_.notify_all();
}

void Downloader::resume() {
  paused_ = false;
  wake_.notify_all();
}

void Downloader::cancel() {
  cancelled_ = true;
  wake_.notify_all();
}

void Downloader::set_state(Slot& slot, FileState state, const std::string& error,
                           std::optional<HubErrorKind> kind) {
  std::lock_guard lock(mutex_);
  slot.state = state;
  if (!error.empty() || state == FileState::Done) {
    slot.error = error;
    slot.error_kind = kind;
  }
}

bool Downloader::wait_while_paused(Slot& slot) {
  if (paused_ && !cancelled_) {
    FileState before;
    {
      std::lock_guard lock(mutex_);
      before = slot.state;
    }
    set_state(slot, FileState::Paused);
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [this] { return !paused_ || cancelled_; });
    slot.state = before == FileState::Paused ? FileState::Queued : before;
  }
  return !cancelled_;
}

bool Downloader::sleep_unless_cancelled(std::int64_t ms) {
  std::unique_lock lock(mutex_);
  return !wake_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return cancelled_.load(); });
}

DownloadProgress Downloader::snapshot() {
  const auto now = Clock::now();
  DownloadProgress p;
  p.paused = paused_;
  std::uint64_t received = 0;
  std::lock_guard lock(mutex_);
  for (auto& slot : slots_) {
    FileProgress f;
    f.path = slot->planned.file.path;
    f.size = slot->planned.file.size;
    f.bytes_done = slot->bytes_done;
    f.state = slot->state;
    f.failed_attempts = slot->failed_attempts;
    f.error = slot->error;
    f.error_kind = slot->error_kind;
    const std::uint64_t slot_received = slot->bytes_received;
    const double speed = slot->speed.add(now, slot_received);
    f.bytes_per_s = f.state == FileState::Downloading ? speed : 0.0;
    received += slot_received;
    p.bytes_done += f.bytes_done;
    p.bytes_total += f.size;
    p.files.push_back(std::move(f));
  }
  p.bytes_per_s = total_rate_.add(now, received);
  if (p.bytes_per_s > 0 && !p.paused) {
    p.eta_s =
        static_cast<double>(p.bytes_total - std::min(p.bytes_total, p.bytes_done)) / p.bytes_per_s;
  }
  return p;
}

void Downloader::work() {
  for (;;) {
    const std::size_t index = next_slot_++;
    if (index >= slots_.size()) break;
    Slot& slot = *slots_[index];
    if (cancelled_) {
      set_state(slot, FileState::Cancelled);
      continue;
    }
    try {
      fetch(slot);
    } catch (const HubError& e) {
      set_state(slot, FileState::Failed, e.what(), e.kind());
    } catch (const std::exception& e) {
      set_state(slot, FileState::Failed, e.what(), HubErrorKind::WriteFailed);
    }
  }
  std::lock_guard lock(mutex_);
  --workers_left_;
  wake_.notify_all();
}

void Downloader::fetch(Slot& slot) {
  const RepoFile& file = slot.planned.file;
  const fs::path final_path = fs::path(plan_.destination) / file.path;
  const fs::path part = part_path_for(final_path);
  std::error_code ec;
  if (slot.planned.complete && fs::file_size(final_path, ec) == file.size && !ec) {
    slot.bytes_done = file.size;
    set_state(slot, FileState::Done);
    return;
  }
  fs::create_directories(final_path.parent_path(), ec);
  if (ec) throw_write_error(final_path.parent_path(), ec.value());

  const FailureContext context{&options_.hub, plan_.repo, file.path, /*download=*/true};
  const DigestKind digest_kind = file.is_lfs() ? DigestKind::Sha256 : DigestKind::GitBlobSha1;
  const std::string expected = file.is_lfs() ? file.sha256 : file.git_oid;
  const bool verifiable = expected.size() == (file.is_lfs() ? 64u : 40u);
  auto should_stop = [this] { return cancelled_.load() || paused_.load(); };

  int failed_attempts = 0;
  for (;;) {
    if (!wait_while_paused(slot)) {
      set_state(slot, FileState::Cancelled);
      return;
    }
    std::uint64_t offset = 0;
    const auto part_size = fs::file_size(part, ec);
    if (!ec && part_size <= file.size) offset = part_size;

    // Resuming: the digest must cover the bytes already in the .part file.
    auto digest = std::make_unique<ContentDigest>(digest_kind, file.size);
    slot.bytes_done = offset;
    set_state(slot, FileState::Downloading);
    if (offset > 0) {
      set_state(slot, FileState::Verifying);  // reading back what an earlier run left
      std::ifstream in(part, std::ios::binary);
      std::vector<char> buffer(1 << 20);
      std::uint64_t left = offset;
      while (left > 0 && in && !should_stop()) {
        in.read(buffer.data(),
                static_cast<std::streamsize>(std::min<std::uint64_t>(left, buffer.size())));
        digest->update(buffer.data(), static_cast<std::size_t>(in.gcount()));
        left -= static_cast<std::uint64_t>(in.gcount());
      }
      if (should_stop()) continue;
      if (left > 0) {  // unreadable: start the file again
        offset = 0;
        slot.bytes_done = 0;
        digest = std::make_unique<ContentDigest>(digest_kind, file.size);
      }
      set_state(slot, FileState::Downloading);
    }
    std::unique_ptr<PartFileWriter> writer = options_.open_part_file(part, offset);

    std::optional<HubError> abort_reason;
    std::uint64_t received = 0;
    HttpAnswer answer;
    if (offset < file.size) {
      HttpGet get =
          hub_get(options_.hub, resolve_url(options_.hub, plan_.repo, plan_.revision, file.path),
                  should_stop);
      if (offset > 0) get.headers.push_back(fmt::format("Range: bytes={}-", offset));
      auto changed = [&](std::uint64_t server_size) {
        return HubError(
            HubErrorKind::FileChanged,
            fmt::format("{} changed on the server since the file list was fetched (listed with "
                        "{} bytes, the server now sends {}). Its partial download was deleted; "
                        "start the download again to fetch the current version.",
                        file.path, file.size, server_size));
      };
      get.on_start = [&](long status, const std::map<std::string, std::string>& headers) {
        try {
          const auto range = headers.find("content-range");
          const auto length = headers.find("content-length");
          if (status == 206 && range != headers.end()) {
            std::uint64_t start = 0, total = 0;
            if (!parse_content_range(range->second, start, total) || start != offset) {
              abort_reason =
                  HubError(HubErrorKind::BadResponse,
                           fmt::format("The server answered the request for {} from byte {} with "
                                       "\"{}\"; the download cannot continue from there.",
                                       file.path, offset, range->second));
            } else if (total != file.size) {
              abort_reason = changed(total);
            }
          } else {
            // The server sent the whole file (it ignores ranges): start over.
            if (offset > 0) {
              writer.reset();
              writer = options_.open_part_file(part, 0);
              digest = std::make_unique<ContentDigest>(digest_kind, file.size);
              offset = 0;
              slot.bytes_done = 0;
            }
            std::uint64_t total = 0;
            if (length != headers.end() &&
                std::from_chars(length->second.data(),
                                length->second.data() + length->second.size(), total)
                        .ec == std::errc() &&
                total != file.size) {
              abort_reason = changed(total);
            }
          }
        } catch (const HubError& e) {
          abort_reason = e;
        }
        return !abort_reason;
      };
      get.on_body = [&](std::string_view bytes) {
        if (offset + received + bytes.size() > file.size) {
          abort_reason = changed(offset + received + bytes.size());
          return false;
        }
        try {
          writer->write(bytes);
        } catch (const HubError& e) {
          abort_reason = e;
          return false;
        }
        digest->update(bytes);
        received += bytes.size();
        slot.bytes_done += bytes.size();
        slot.bytes_received += bytes.size();
        return true;
      };
      answer = http_get(get);
    }

    if (abort_reason) {
      writer.reset();
      if (abort_reason->kind() == HubErrorKind::FileChanged) fs::remove(part, ec);
      throw *abort_reason;
    }
    if (answer.failure == HttpAnswer::Failure::Stopped) {
      writer.reset();  // keeps what arrived; a resume continues from there
      if (cancelled_) {
        set_state(slot, FileState::Cancelled);
        return;
      }
      continue;  // paused
    }
    const bool complete = offset + received == file.size;
    if ((offset == file.size || answer.ok()) && complete) {
      set_state(slot, FileState::Verifying);
      writer->finish();
      writer.reset();
      const std::string actual = digest->hex();
      if (verifiable && actual != expected) {
        fs::remove(part, ec);
        throw HubError(
            HubErrorKind::ChecksumMismatch,
            fmt::format("{} was not accepted: its {} is {} but the Hub publishes {}. The file "
                        "changed on the server or was damaged on the way; the partial download "
                        "was deleted, so starting the download again fetches it afresh.",
                        file.path, file.is_lfs() ? "sha256" : "git blob id", actual, expected));
      }
      fs::rename(part, final_path, ec);
      if (ec) throw_write_error(final_path, ec.value());
      log::info("hub: {} downloaded and verified ({} bytes)", file.path, file.size);
      set_state(slot, FileState::Done);
      return;
    }
    writer.reset();

    HubError error =
        answer.status == 416
            ? HubError(HubErrorKind::FileChanged,
                       fmt::format("{} changed on the server since the file list was fetched (it "
                                   "is now shorter than the {} bytes already downloaded). Its "
                                   "partial download was deleted; start the download again.",
                                   file.path, offset))
        : answer.ok()
            ? HubError(HubErrorKind::Network,
                       fmt::format("The server closed the connection after {} of {} bytes "
                                   "of {}; the download resumes where it stopped.",
                                   offset + received, file.size, file.path))
            : describe_failure(answer, context);
    if (error.kind() == HubErrorKind::FileChanged) fs::remove(part, ec);
    if (!is_retryable(error.kind())) throw error;
    if (received > 0) failed_attempts = 0;  // progress was made: this is a new run of failures
    ++failed_attempts;
    {
      std::lock_guard lock(mutex_);
      slot.failed_attempts = failed_attempts;
    }
    if (failed_attempts >= options_.hub.retry.max_attempts) {
      throw HubError(error.kind(),
                     fmt::format("{} (gave up after {} attempts)", error.what(), failed_attempts));
    }
    std::int64_t wait_ms = backoff_delay_ms(options_.hub.retry, failed_attempts);
    if (const auto asked = requested_wait_ms(answer)) {
      if (*asked > options_.hub.retry.max_retry_after_ms) throw error;
      wait_ms = std::max(wait_ms, *asked);
    }
    report_retry(options_.hub, error, failed_attempts, wait_ms);
    set_state(slot, FileState::Waiting, error.what(), error.kind());
    if (!sleep_unless_cancelled(wait_ms)) {
      set_state(slot, FileState::Cancelled);
      return;
    }
  }
}

DownloadResult Downloader::run() {
  const int workers = std::clamp<int>(options_.parallel_files, 1,
                                      std::max<int>(1, static_cast<int>(slots_.size())));
  {
    std::lock_guard lock(mutex_);
    workers_left_ = workers;
  }
  // The first report comes at once, so a view shows the files (and what is already on disk)
  // before any transfer has moved.
  if (options_.on_progress) options_.on_progress(snapshot());
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) threads.emplace_back([this] { work(); });
  for (;;) {
    bool finished = false;
    {
      std::unique_lock lock(mutex_);
      finished = wake_.wait_for(lock, std::chrono::milliseconds(options_.progress_interval_ms),
                                [this] { return workers_left_ == 0; });
    }
    if (finished) break;
    if (options_.on_progress) options_.on_progress(snapshot());
  }
  for (auto& t : threads) t.join();

  DownloadResult result;
  result.progress = snapshot();
  if (options_.on_progress) options_.on_progress(result.progress);
  bool any_cancelled = false;
  for (const auto& f : result.progress.files) {
    if (f.state == FileState::Failed && !result.error_kind) {
      result.message = f.error;
      result.error_kind = f.error_kind;
    }
    any_cancelled = any_cancelled || f.state == FileState::Cancelled;
  }
  if (cancelled_ || (any_cancelled && !result.error_kind)) {
    result.outcome = DownloadOutcome::Cancelled;
    result.message =
        "Cancelled; the partial files are kept, so the download resumes where it stopped.";
  } else if (result.error_kind) {
    result.outcome = DownloadOutcome::Failed;
  } else {
    result.outcome = DownloadOutcome::Completed;
    result.message = fmt::format("{} files of {} downloaded and verified.",
                                 result.progress.files.size(), plan_.repo);
  }
  return result;
}

}  // namespace tandem::hub
