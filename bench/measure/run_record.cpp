#include "bench/measure/run_record.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "backends/registry.h"
#include "engine/data/disk_dataset.h"
#include "engine/train/config.h"

namespace trainlab::bench {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto n = static_cast<double>(values.size());
  const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n)));
  return values[std::min(rank, values.size()) - 1];
}

RankStepStats rank_step_stats(int rank, const std::vector<double>& step_s, const std::vector<double>& work_s) {
  RankStepStats s;
  s.rank = rank;
  s.steps = static_cast<std::int64_t>(step_s.size());
  s.p50_ms = percentile(step_s, 0.5) * 1e3;
  s.p99_ms = percentile(step_s, 0.99) * 1e3;
  s.max_ms = step_s.empty() ? 0 : *std::max_element(step_s.begin(), step_s.end()) * 1e3;
  s.work_p50_ms = percentile(work_s, 0.5) * 1e3;
  return s;
}

Straggler slowest_rank(const std::vector<RankStepStats>& ranks) {
  Straggler s;
  if (ranks.empty()) return s;
  std::vector<double> work;
  for (const auto& r : ranks) work.push_back(r.work_p50_ms);
  const auto it = std::max_element(ranks.begin(), ranks.end(), [](const RankStepStats& a, const RankStepStats& b) {
    return a.work_p50_ms < b.work_p50_ms;
  });
  s.rank = it->rank;
  s.work_p50_ms = it->work_p50_ms;
  s.median_work_p50_ms = percentile(work, 0.5);
  s.excess_percent = s.median_work_p50_ms > 0 ? (s.work_p50_ms / s.median_work_p50_ms - 1) * 100 : 0;
  return s;
}

std::string rank_stats_text(const std::vector<RankStepStats>& ranks) {
  if (ranks.empty()) return "";
  double p50 = 0, p99 = 0, max = 0;
  for (const auto& r : ranks) {
    p50 = std::max(p50, r.p50_ms);
    p99 = std::max(p99, r.p99_ms);
    max = std::max(max, r.max_ms);
  }
  const Straggler s = slowest_rank(ranks);
  std::string per_rank;
  for (const auto& r : ranks) per_rank += fmt::format("{}{:.1f}", per_rank.empty() ? "" : " ", r.work_p50_ms);
  return fmt::format(
      "per-rank step time over {} measured steps: p50 {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms (the slowest rank's); "
      "work (step less communication waits) p50 by rank [{}] ms; slowest rank {} ({:+.1f}% against the ranks' "
      "median)",
      ranks.front().steps, p50, p99, max, per_rank, s.rank, s.excess_percent);
}

namespace {

// The keys that name files and directories: recorded absolute, so that diagnose, run from another
// directory, reads this run's files and not whatever has the same relative name there.
constexpr const char* kPathKeys[] = {"data", "save", "resume", "trace", "ledger", "audit_file"};

std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

// Every config key as text ("config.batch" -> "batch"), as checkpoints hold them; paths absolute.
KnobMap config_keys(const TrainConfig& config) {
  StateDict state;
  config_to_state(config, state);
  KnobMap keys;
  for (const auto& [key, value] : state.strings) keys[key.substr(7)] = value;
  for (const char* key : kPathKeys) {
    auto it = keys.find(key);
    if (it != keys.end()) it->second = absolute_path(it->second);
  }
  return keys;
}

}  // namespace

RunRecorder::RunRecorder(const std::string& ledger, const TrainConfig& config, int rank, int world_size)
    : config_(config), world_(world_size), start_(unix_seconds()) {
  if (ledger.empty() || rank != 0) return;
  ledger_.emplace(ledger);
  env_ = current_environment(
      get_backend(config.execution.backend.empty() ? default_backend_name() : config.execution.backend));
  run_id_ = new_run_id();
}

RowHeader RunRecorder::header(const char* kind, const char* status) const {
  RowHeader h;
  h.env = env_;
  h.kind = kind;
  h.run_id = run_id_;
  h.status = status;
  return h;
}

RunProcess RunRecorder::process() const {
  return {static_cast<std::int64_t>(::getpid()), world_, unix_seconds(), unix_seconds() - start_};
}

void RunRecorder::watch_loader(std::shared_ptr<const Dataset> data) { data_ = std::move(data); }

void RunRecorder::on_step(const StepReport& r) {
  const PhaseTimes& p = r.phases;
  const double work = p.data_wait_s + p.forward_s + p.backward_s + p.optimizer_s;
  if (r.measured) {
    work_s_.push_back(work);
    data_wait_s_.push_back(p.data_wait_s);
  }
  recent_s_.push_back(r.seconds);
  if (!ledger_ || r.step % std::max<std::int64_t>(config_.reporting.log_every, 1) != 0) return;
  TrainProgressRow row;
  row.header = header(TrainProgressRow::kKind, "running");
  row.process = process();
  row.step = r.step;
  row.steps = config_.stop_at > 0 ? config_.stop_at : config_.steps;
  if (std::isfinite(r.loss)) row.loss = r.loss;
  row.recent_step_seconds = recent_s_;
  if (!wrote_config_) {
    row.config = config_keys(config_);  // the first progress row says what is running
    wrote_config_ = true;
  }
  recent_s_.clear();
  ledger_->append(row);
}

void RunRecorder::finish(const TrainResult& result, const std::vector<RankStepStats>& ranks, const std::string& data) {
  if (!ledger_ || finished_) return;
  finished_ = true;
  TrainRunRow row;
  row.header = header(TrainRunRow::kKind, "ok");
  row.process = process();
  row.config = config_keys(config_);
  row.data = absolute_path(data);
  row.first_step = result.first_step;
  row.last_step = result.last_step;
  row.warmup_steps = result.warmup_steps;
  row.measured_steps = result.measured_steps;
  row.samples_per_s = result.samples_per_s;
  row.step_seconds = result.step_seconds;
  row.work_seconds = work_s_;
  row.data_wait_seconds = data_wait_s_;
  const PhaseTimes& m = result.measured;
  row.phases = PhaseTotals{m.data_wait_s, m.forward_s, m.backward_s, m.optimizer_s, m.comm_s};
  row.ranks = ranks;
  if (const auto* disk = dynamic_cast<const EncodedImageDataset*>(data_.get())) {
    const DiskReadStats stats = disk->stats();
    row.loader = LoaderUse{static_cast<double>(stats.samples), static_cast<double>(stats.bytes), stats.read_cpu_s,
                           stats.decode_cpu_s, config_.data.workers};
  }
  if (result.final_eval.samples > 0) row.accuracy = result.final_eval.accuracy;
  if (result.final_eval.samples > 0 && !result.final_eval.confusion.empty())
    row.confusion = HeldOutConfusion{data_ ? data_->class_names() : std::vector<std::string>{},
                                     result.final_eval.classes, result.final_eval.confusion};
  row.stopped_by = result.stopped_by;
  ledger_->append(row);
}

void RunRecorder::fail(const std::string& error) {
  if (!ledger_ || finished_) return;
  finished_ = true;
  TrainRunRow row;
  row.header = header(TrainRunRow::kKind, "failed");
  row.process = process();
  row.error = error;
  row.config = config_keys(config_);
  ledger_->append(row);
}

}  // namespace trainlab::bench
