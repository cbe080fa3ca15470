#include "bench/measure/run_record.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backends/registry.h"
#include "engine/config.h"
#include "engine/disk_dataset.h"

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

nlohmann::json rank_stats_json(const std::vector<RankStepStats>& ranks) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : ranks)
    out.push_back({{"rank", r.rank},
                   {"steps", r.steps},
                   {"p50_ms", r.p50_ms},
                   {"p99_ms", r.p99_ms},
                   {"max_ms", r.max_ms},
                   {"work_p50_ms", r.work_p50_ms}});
  return out;
}

namespace {

// Every config key as text ("config.batch" -> "batch"), as checkpoints hold them.
nlohmann::json config_json(const TrainConfig& config) {
  StateDict state;
  config_to_state(config, state);
  nlohmann::json keys = nlohmann::json::object();
  for (const auto& [key, value] : state.strings) keys[key.substr(7)] = value;
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

nlohmann::json RunRecorder::base_row(const char* kind) const {
  nlohmann::json row = env_.to_json();
  row["run_id"] = run_id_;
  row["kind"] = kind;
  row["pid"] = static_cast<std::int64_t>(::getpid());
  row["world_size"] = world_;
  row["unix_time"] = unix_seconds();
  row["elapsed_s"] = unix_seconds() - start_;
  return row;
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
  nlohmann::json row = base_row("train_progress");
  row["status"] = "running";
  row["step"] = r.step;
  row["steps"] = config_.stop_at > 0 ? config_.stop_at : config_.steps;
  row["loss"] = std::isfinite(r.loss) ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
  row["recent_step_seconds"] = recent_s_;
  if (!wrote_config_) {
    row["config"] = config_json(config_);  // the first progress row says what is running
    wrote_config_ = true;
  }
  recent_s_.clear();
  ledger_->append(row);
}

void RunRecorder::finish(const TrainResult& result, const std::vector<RankStepStats>& ranks, const std::string& data) {
  if (!ledger_ || finished_) return;
  finished_ = true;
  nlohmann::json row = base_row("train_run");
  row["status"] = "ok";
  row["config"] = config_json(config_);
  row["data"] = data;
  row["first_step"] = result.first_step;
  row["last_step"] = result.last_step;
  row["warmup_steps"] = result.warmup_steps;
  row["measured_steps"] = result.measured_steps;
  row["samples_per_s"] = result.samples_per_s;
  row["step_seconds"] = result.step_seconds;
  row["work_seconds"] = work_s_;
  row["data_wait_seconds"] = data_wait_s_;
  row["phases"] = {{"data_wait_s", result.measured.data_wait_s},
                   {"forward_s", result.measured.forward_s},
                   {"backward_s", result.measured.backward_s},
                   {"optimizer_s", result.measured.optimizer_s},
                   {"comm_s", result.measured.comm_s}};
  row["ranks"] = rank_stats_json(ranks);
  if (const auto* disk = dynamic_cast<const EncodedImageDataset*>(data_.get())) {
    const DiskReadStats stats = disk->stats();
    row["loader"] = {{"samples", stats.samples},
                     {"bytes", stats.bytes},
                     {"read_cpu_s", stats.read_cpu_s},
                     {"decode_cpu_s", stats.decode_cpu_s},
                     {"workers", config_.data.workers}};
  }
  row["accuracy"] =
      result.final_eval.samples > 0 ? nlohmann::json(result.final_eval.accuracy) : nlohmann::json(nullptr);
  row["stopped_by"] = result.stopped_by;
  ledger_->append(row);
}

void RunRecorder::fail(const std::string& error) {
  if (!ledger_ || finished_) return;
  finished_ = true;
  nlohmann::json row = base_row("train_run");
  row["status"] = "failed";
  row["error"] = error;
  row["config"] = config_json(config_);
  ledger_->append(row);
}

}  // namespace trainlab::bench
