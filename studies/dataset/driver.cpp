#include "studies/dataset/driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "backends/registry.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "bench/measure/loader_bench.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/synthetic_images.h"
#include "studies/dataset/dataset_study.h"

namespace trainlab::bench {

namespace {

struct ExportArm {
  std::string name, dir;
  DiskLayout layout = DiskLayout::shards;
  ImageCodec codec = ImageCodec::raw;
  bool calibration = false;
  std::uint64_t bytes = 0;
  std::int64_t files = 0;
};

// The work directory: ours to write the data sets into, so a directory (made when missing), never
// a file, a device or a path nothing can be created under.
void prepare_work_directory(const std::string& work) {
  TL_CHECK(!work.empty(), "--work is empty: name the directory the data sets are written into");
  std::error_code ec;
  const auto status = std::filesystem::status(work, ec);
  if (std::filesystem::exists(status)) {
    TL_CHECK(std::filesystem::is_directory(status), "--work " + quote_value(work) +
                                                        " exists and is not a directory (the data sets are written "
                                                        "into a directory of their own)");
  } else {
    std::filesystem::create_directories(work, ec);
    TL_CHECK(!ec, "--work " + quote_value(work) + ": cannot create the directory: " + ec.message());
  }
}

// The exports, the same images each time; the calibration arm measures the control's data set again.
std::vector<ExportArm> export_arms(const DatasetStudyOptions& o) {
  const auto arm_of = [&](const char* name, const char* dir, DiskLayout layout, ImageCodec codec) {
    ExportArm arm;
    arm.name = name;
    arm.dir = o.work + "/" + dir;
    arm.layout = layout;
    arm.codec = codec;
    return arm;
  };
  std::vector<ExportArm> arms = {arm_of("shards-raw", "shards-raw", DiskLayout::shards, ImageCodec::raw),
                                 arm_of("shards-raw (again)", "shards-raw", DiskLayout::shards, ImageCodec::raw),
                                 arm_of("shards-png", "shards-png", DiskLayout::shards, ImageCodec::png),
                                 arm_of("files-raw", "files-raw", DiskLayout::files, ImageCodec::raw)};
  arms[1].calibration = true;
  const SyntheticImages source(0, Split::train, o.samples);
  for (auto& arm : arms) {
    if (arm.calibration) continue;
    DatasetWriteOptions w;
    w.out = arm.dir;
    w.layout = arm.layout;
    w.codec = arm.codec;
    w.image_size = o.image_size;
    w.shard_mb = 256;
    w.overwrite = true;
    const auto summary = write_image_dataset(source, nullptr, w);
    std::cout << fmt::format("# wrote {}: {} samples in {} files, {:.1f} MiB, {:.1f} s\n", arm.dir,
                             summary.splits[0].samples, summary.splits[0].files,
                             static_cast<double>(summary.splits[0].bytes) / (1 << 20), summary.seconds);
    arm.bytes = summary.splits[0].bytes;
    arm.files = summary.splits[0].files;
  }
  arms[1].bytes = arms[0].bytes, arms[1].files = arms[0].files;
  return arms;
}

// One arm in one round: the loader alone, then training on it; the row says what each measured,
// or why it failed.
DatasetRepeatRow measure_arm(const DatasetStudyOptions& o, const ExportArm& arm, int round, const RowHeader& header) {
  const LoaderRun run{arm.dir, o.workers, o.batch, o.loader_samples, !o.warm, static_cast<std::uint64_t>(round)};
  DatasetRepeatRow row;
  row.header = header;
  row.arm = arm.name;
  row.calibration = arm.calibration;
  row.round = round;
  row.layout = disk_layout_name(arm.layout);
  row.codec = image_codec_name(arm.codec);
  row.image_size = o.image_size;
  row.samples = o.samples;
  row.workers = o.workers;
  row.batch = o.batch;
  row.cold = !o.warm;
  row.model = o.model.name;
  row.model_options = model_options_text(o.model.options);
  row.files = arm.files;
  row.bytes_per_sample = static_cast<double>(arm.bytes) / static_cast<double>(o.samples);
  try {
    const LoaderMeasurement m = measure_loader(run);
    const TrainResult t = train_on_data(run, o.steps, o.warmup, o.backend, o.threads, o.model);
    const double wait = t.measured.data_wait_s / static_cast<double>(std::max<std::int64_t>(t.measured_steps, 1)) * 1e3;
    row.header.status = "ok";
    row.measurement = {.loader_samples_per_s = m.samples_per_s,
                       .read_cpu_us_per_sample = m.read_us,
                       .decode_cpu_us_per_sample = m.decode_us,
                       .page_cache_resident = m.resident,
                       .train_samples_per_s = t.samples_per_s,
                       .data_wait_ms_per_step = wait,
                       .step_seconds = t.step_seconds};
    std::cout << fmt::format(
        "[round {}/{}] {:<19} loader {:7.0f} samples/s (read {:.1f} us, decode {:.1f} us per "
        "sample, {:.0f}% cached)  training {:6.0f} samples/s, data wait {:.2f} ms/step\n",
        round + 1, o.repeats, arm.name, m.samples_per_s, m.read_us, m.decode_us, m.resident * 100, t.samples_per_s,
        wait);
  } catch (const Error& e) {
    row.header.status = "failed";
    row.error = e.what();
    std::cout << fmt::format("[round {}/{}] {:<19} FAILED: {}\n", round + 1, o.repeats, arm.name, e.what());
  }
  std::cout.flush();
  return row;
}

}  // namespace

int run_dataset_study(const DatasetStudyOptions& o) {
  {
    // The model takes the arms' samples (SyntheticImages' shape, whatever --image-size stores) and its
    // keys' values: refused here, before any data set is written.
    TrainConfig config;
    config.model = o.model;
    (void)model_task(config);
  }
  prepare_work_directory(o.work);
  check_backend_name(o.backend);
  Backend& backend = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
  RowHeader header;
  header.env = current_environment(backend);
  header.kind = DatasetRepeatRow::kKind;
  std::optional<Ledger> ledger;
  if (!o.no_ledger) ledger.emplace(o.ledger_path.empty() ? default_ledger_path(header.env.device.type) : o.ledger_path);
  if (ledger) ledger->load();  // a bad ledger path fails before anything is written
  header.run_id = new_run_id();

  const std::vector<ExportArm> arms = export_arms(o);
  std::cout << fmt::format(
      "# dataset_study: {} samples of SyntheticImages at {} px; {} rounds of {} arms interleaved; loader {} workers, "
      "batch {}, {} samples timed, {} cache; training {} {} steps after {} warm-up\n",
      o.samples, o.image_size, o.repeats, arms.size(), o.workers, o.batch, o.loader_samples, o.warm ? "warm" : "cold",
      model_label(o.model), o.steps, o.warmup);
  std::cout << fmt::format(
      "# device: {}, backend {}, timer steady_clock (loader) and the trainer's step timer; run {}\n",
      header.env.device.name, header.env.backend, header.run_id);
  std::vector<DatasetRepeatRow> rows;  // every measurement, as the ledger gets it: the table is drawn from them
  for (int round = 0; round < o.repeats; ++round) {
    for (const auto& arm : arms) {
      rows.push_back(measure_arm(o, arm, round, header));
      if (ledger) ledger->append(rows.back());
    }
  }

  std::cout << "\n" << dataset_report(dataset_arms_from_rows(rows));
  if (ledger) std::cout << "ledger: " << ledger->path() << " (run " << header.run_id << ")\n";
  return 0;
}

}  // namespace trainlab::bench
