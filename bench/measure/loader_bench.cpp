#include "bench/measure/loader_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "backends/registry.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/loader.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

LoaderMeasurement measure_loader(const LoaderRun& run) {
  DiskReadOptions read;
  read.output_size = 0;  // the data set's sample size
  const auto data = open_image_dataset(run.data, Split::train, read);
  if (run.cold) drop_page_cache(data->split_files());
  LoaderMeasurement m;
  m.resident = page_cache_resident_fraction(data->split_files());
  DataLoaderOptions lo;
  lo.batch_size = std::min<std::int64_t>(run.batch, data->size());
  lo.num_workers = run.workers;
  lo.seed = run.seed;
  DataLoader loader(data, lo, get_backend("reference"));
  const std::int64_t batches = std::max<std::int64_t>(1, run.samples / lo.batch_size);
  loader.next();  // workers started, first batch in
  data->reset_stats();
  const auto start = std::chrono::steady_clock::now();
  std::int64_t count = 0;
  for (std::int64_t b = 0; b < batches; ++b) count += loader.next().labels.numel();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const DiskReadStats stats = data->stats();
  m.samples_per_s = static_cast<double>(count) / seconds;
  // Workers run ahead of the consumer: divide by the samples the readers produced.
  const double produced = static_cast<double>(std::max<std::int64_t>(stats.samples, 1));
  m.read_us = stats.read_cpu_s / produced * 1e6;
  m.decode_us = stats.decode_cpu_s / produced * 1e6;
  return m;
}

TrainResult train_on_data(const LoaderRun& run, std::int64_t steps, std::int64_t warmup, const std::string& backend,
                          int threads, const ModelConfig& model) {
  TrainConfig config;
  config.model = model;
  config.data.dir = run.data;
  config.data.cold_cache = run.cold;
  config.data.workers = run.workers;
  config.batch = run.batch;
  config.steps = warmup + steps;
  config.reporting.warmup = warmup;
  config.reporting.eval_at_end = false;
  config.reporting.log_every = config.steps;
  config.execution.backend = backend;
  config.execution.threads = threads;
  config.seed = run.seed;
  validate_config(config);
  Trainer trainer(config);
  return trainer.train(nullptr);
}

namespace {

std::string range_text(const std::vector<double>& values, const char* format) {
  if (values.empty()) return "-";
  const Summary s = summarize(values);
  return fmt::format(fmt::runtime(format), s.median) + " (" + fmt::format(fmt::runtime(format), s.min) + "-" +
         fmt::format(fmt::runtime(format), s.max) + ")";
}

}  // namespace

LoaderBenchResult run_loader_bench(const LoaderBenchOptions& o, std::ostream& log) {
  TL_CHECK(!o.workers.empty(), "loader-bench: --workers needs at least one worker count");
  TL_CHECK(o.repeats >= 1, "loader-bench: --repeats must be >= 1");
  const auto data = open_image_dataset(o.data, Split::train);
  TL_CHECK(o.batch >= 1 && o.batch <= data->size(), "loader-bench: --batch " + std::to_string(o.batch) +
                                                        " must be in 1.." + std::to_string(data->size()) +
                                                        " (the data set's training samples)");
  if (o.train_steps > 0) {
    // The model is built for the data set (its keys' values, the data's sample shape): refused here,
    // before any measurement, rather than as a failed row per round.
    TrainConfig config;
    config.data.dir = o.data;
    config.model = o.model;
    (void)model_task(config);
  }
  Backend& backend = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
  const Environment env = current_environment(backend);
  const Ledger ledger(o.ledger.empty() ? default_ledger_path(env.device.type) : o.ledger);
  LoaderBenchResult result;
  result.run_id = new_run_id();
  result.dataset = o.data;
  result.describe = data->describe();
  result.ledger = ledger.path();
  const DatasetInfo& info = data->info();
  std::uint64_t bytes = 0;
  for (const auto& f : info.files) bytes += f.bytes;
  log << fmt::format(
      "# loader-bench: {} ({} files, {:.1f} MiB); batch {}; {} rounds, worker counts {} interleaved "
      "in each; {} cache\n",
      result.describe, info.files.size(), static_cast<double>(bytes) / (1 << 20), o.batch, o.repeats,
      fmt::join(o.workers, ","), o.cold ? "cold (pages dropped before each measurement)" : "warm");
  log << fmt::format("# device: {}, backend {}, timer steady_clock (loader) and the trainer's step timer; run {}\n",
                     env.device.name, env.backend, result.run_id);
  if (o.train_steps > 0) log << fmt::format("# training steps: {}\n", model_label(o.model));
  for (int w : o.workers) result.arms.push_back(LoaderBenchArm{w, {}, {}, {}, {}, {}, {}, {}});
  for (int round = 0; round < o.repeats; ++round) {
    for (auto& arm : result.arms) {
      LoaderRepeatRow row;
      row.header.env = env;
      row.header.kind = LoaderRepeatRow::kKind;
      row.header.run_id = result.run_id;
      row.round = round;
      row.workers = arm.workers;
      row.batch = o.batch;
      row.cold = o.cold;
      row.model = o.model.name;
      row.model_options = model_options_text(o.model.options);
      row.dataset = {o.data,
                     disk_layout_name(info.layout),
                     image_codec_name(info.codec),
                     info.quality,
                     info.image.height,
                     static_cast<std::int64_t>(info.files.size()),
                     static_cast<std::int64_t>(bytes)};
      try {
        const LoaderRun run{o.data,    arm.workers, o.batch,
                            o.samples, o.cold,      o.seed + static_cast<std::uint64_t>(round)};
        const LoaderMeasurement m = measure_loader(run);
        arm.samples_per_s.push_back(m.samples_per_s);
        arm.read_us.push_back(m.read_us);
        arm.decode_us.push_back(m.decode_us);
        arm.resident.push_back(m.resident);
        row.loader_samples_per_s = m.samples_per_s;
        row.read_cpu_us_per_sample = m.read_us;
        row.decode_cpu_us_per_sample = m.decode_us;
        row.page_cache_resident = m.resident;
        if (o.train_steps > 0) {
          const TrainResult t = train_on_data(run, o.train_steps, o.train_warmup, o.backend, o.threads, o.model);
          const double wait_ms =
              t.measured.data_wait_s / static_cast<double>(std::max<std::int64_t>(t.measured_steps, 1)) * 1e3;
          arm.train_samples_per_s.push_back(t.samples_per_s);
          arm.data_wait_ms.push_back(wait_ms);
          row.train_samples_per_s = t.samples_per_s;
          row.data_wait_ms_per_step = wait_ms;
          row.train_steps = t.measured_steps;
          row.warmup_steps = t.warmup_steps;
          row.step_seconds = t.step_seconds;
        }
        row.header.status = "ok";
        log << fmt::format(
            "round {} workers {}: loader {:.0f} samples/s (read {:.1f} us, decode {:.1f} us CPU per "
            "sample, {:.0f}% cached){}\n",
            round, arm.workers, m.samples_per_s, m.read_us, m.decode_us, m.resident * 100,
            arm.data_wait_ms.size() > static_cast<std::size_t>(round)
                ? fmt::format("; training {:.0f} samples/s, data wait {:.2f} ms/step", arm.train_samples_per_s.back(),
                              arm.data_wait_ms.back())
                : std::string());
      } catch (const Error& e) {
        arm.errors.push_back(e.what());
        row.header.status = "failed";
        row.error = e.what();
        log << fmt::format("round {} workers {}: FAILED: {}\n", round, arm.workers, e.what());
      }
      log.flush();
      ledger.append(row);
    }
  }
  return result;
}

std::string loader_bench_table(const LoaderBenchResult& r, const LoaderBenchOptions& o) {
  std::string out = fmt::format("\n{} ({} cache), batch {}, medians (min-max) of {} rounds:\n\n", r.describe,
                                o.cold ? "cold" : "warm", o.batch, o.repeats);
  out +=
      "| workers | loader samples/s | read CPU us/sample | decode CPU us/sample | cached | training samples/s | "
      "data wait ms/step |\n|---|---|---|---|---|---|---|\n";
  const LoaderBenchArm* best = nullptr;
  for (const auto& arm : r.arms) {
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |{}\n", arm.workers, range_text(arm.samples_per_s, "{:.0f}"),
                       range_text(arm.read_us, "{:.1f}"), range_text(arm.decode_us, "{:.1f}"),
                       arm.resident.empty() ? "-" : fmt::format("{:.0f}%", summarize(arm.resident).median * 100),
                       range_text(arm.train_samples_per_s, "{:.0f}"), range_text(arm.data_wait_ms, "{:.2f}"),
                       arm.errors.empty() ? "" : fmt::format(" {} failed: {}", arm.errors.size(), arm.errors.front()));
    if (!arm.samples_per_s.empty() &&
        (best == nullptr || summarize(arm.samples_per_s).median > summarize(best->samples_per_s).median))
      best = &arm;
  }
  if (best != nullptr) {
    const Summary cap = summarize(best->samples_per_s);
    out += fmt::format("\nloader cap: {:.0f} samples/s ({:.0f}-{:.0f}) with {} worker{}", cap.median, cap.min, cap.max,
                       best->workers, best->workers == 1 ? "" : "s");
    if (!best->train_samples_per_s.empty()) {
      const Summary train = summarize(best->train_samples_per_s);
      const Summary wait = summarize(best->data_wait_ms);
      out += fmt::format(
          "; training there: {:.0f} samples/s with {:.2f} ms/step waiting for data ({})", train.median, wait.median,
          wait.median * 1e-3 * train.median / static_cast<double>(o.batch) > 0.05 ? "the loader starves the step"
                                                                                  : "the step is not starved");
    }
    out += "\n";
  }
  return out;
}

}  // namespace trainlab::bench
