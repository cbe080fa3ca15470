// The data set study (issue 15, seed 002's re-export regression): the same images, exported three
// ways, measured side by side for what the loader can supply and what training gets.
//
//   build/bin/dataset_study [--work DIR] [--samples 8000] [--image-size 64] [--repeats 7] [--workers 2]
//                           [--warm] [--quick] [--ledger FILE | --no-ledger]
//
// Arms, all SyntheticImages' same training samples stored at --image-size pixels:
//   shards-raw          large shards, raw pixels (no decode): the layout before the "re-export"
//   shards-raw (again)  the same data set measured again: the calibration arm (the noise floor)
//   shards-png          the same shards with an expensive codec (zlib inflate in every sample)
//   files-raw           one small file per sample (an open, a read and a close per sample)
// Every round measures every arm in turn (interleaved): the loader alone (cold page cache unless
// --warm), then SmallCNN trained on it for the measured steps after a warm-up. Each measurement
// is a ledger row ("dataset_study_repeat"); the table gives medians (min-max), each arm's effect
// against shards-raw in percent and in units of the noise floor, and whether it is separable.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "apps/cli_parse.h"
#include "backends/registry.h"
#include "bench/measure/ledger.h"
#include "bench/measure/loader_bench.h"
#include "bench/measure/stats.h"
#include "engine/disk_dataset.h"
#include "engine/synthetic_images.h"
#include "studies/dataset/dataset_study.h"

using namespace trainlab;
using namespace trainlab::bench;

namespace {

struct Options {
  std::string work = "build/dataset-study", ledger_path, backend;
  std::int64_t samples = 8000, loader_samples = 4096, steps = 40, warmup = 5, batch = 64;
  int image_size = 64, repeats = 7, workers = 2, threads = 0;
  bool warm = false, quick = false, no_ledger = false;
};

struct Arm {
  std::string name, dir;
  DiskLayout layout = DiskLayout::shards;
  ImageCodec codec = ImageCodec::raw;
  bool calibration = false;
  std::uint64_t bytes = 0;
  std::int64_t files = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dataset_study: the same images as large raw shards, PNG shards and one file per sample, loader and "
      "training measured side by side (seed 002's re-export regression)",
      "dataset_study"};
  Options o;
  app.add_option("--work", o.work, "where the data sets are written (replaced on each run)")->capture_default_str();
  app.add_option("--samples", o.samples, "training samples per data set [256..1000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{256}, std::int64_t{1000000}));
  app.add_option("--image-size", o.image_size, "stored pixels (a multiple of 32) [32..512]")
      ->capture_default_str()
      ->check(FiniteRange(32, 512));
  app.add_option("--repeats", o.repeats, "rounds, every arm measured in each [2..100]")
      ->capture_default_str()
      ->check(FiniteRange(2, 100));
  app.add_option("--workers", o.workers, "loader workers [0..64]")->capture_default_str()->check(FiniteRange(0, 64));
  app.add_option("--steps", o.steps, "measured training steps per arm and round [1..100000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{100000}));
  app.add_option("--loader-samples", o.loader_samples, "samples the loader alone is timed over [64..10000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{64}, std::int64_t{10000000}));
  app.add_option("--backend", o.backend, "the training step's backend (default: the best CPU backend)");
  app.add_option("--threads", o.threads, "the training step's compute threads (0: all cores)")
      ->check(FiniteRange(0, 1024));
  app.add_flag("--warm", o.warm, "keep the page cache (default: cold, dropped before each loader measurement)");
  app.add_flag("--quick", o.quick, "a small run for tests: 512 samples at 32 px, 2 rounds, 5 steps");
  app.add_option("--ledger", o.ledger_path, "ledger to append to (default: results/ledger_cpu.jsonl)");
  app.add_flag("--no-ledger", o.no_ledger, "write no ledger rows");
  if (const auto status = parse_command_line(app, argc, argv, "dataset_study")) return *status;
  try {
    TL_CHECK(o.image_size % 32 == 0, "--image-size " + std::to_string(o.image_size) + " is not a multiple of 32");
    if (o.quick) {  // small defaults; a flag given beside --quick keeps its value
      if (!app.count("--samples")) o.samples = 512;
      if (!app.count("--image-size")) o.image_size = 32;
      if (!app.count("--repeats")) o.repeats = 2;
      if (!app.count("--steps")) o.steps = 5;
      if (!app.count("--loader-samples")) o.loader_samples = 256;
      o.warmup = 2;
      o.batch = 32;
    }
    // The work directory: ours to write the data sets into, so a directory (made when missing),
    // never a file, a device or a path nothing can be created under.
    TL_CHECK(!o.work.empty(), "--work is empty: name the directory the data sets are written into");
    {
      std::error_code ec;
      const auto status = std::filesystem::status(o.work, ec);
      if (std::filesystem::exists(status)) {
        TL_CHECK(std::filesystem::is_directory(status),
                 "--work " + quote_value(o.work) +
                     " exists and is not a directory (the data sets are written into "
                     "a directory of their own)");
      } else {
        std::filesystem::create_directories(o.work, ec);
        TL_CHECK(!ec, "--work " + quote_value(o.work) + ": cannot create the directory: " + ec.message());
      }
    }
    check_backend_name(o.backend);
    Backend& backend = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
    const Environment env = current_environment(backend);
    std::optional<Ledger> ledger;
    if (!o.no_ledger) ledger.emplace(o.ledger_path.empty() ? default_ledger_path(env.device.type) : o.ledger_path);
    if (ledger) ledger->load();  // a bad ledger path fails before anything is written
    const std::string run_id = new_run_id();

    // The exports: the same images each time.
    const auto arm_of = [&](const char* name, const char* dir, DiskLayout layout, ImageCodec codec) {
      Arm arm;
      arm.name = name;
      arm.dir = o.work + "/" + dir;
      arm.layout = layout;
      arm.codec = codec;
      return arm;
    };
    std::vector<Arm> arms = {arm_of("shards-raw", "shards-raw", DiskLayout::shards, ImageCodec::raw),
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
    std::cout << fmt::format(
        "# dataset_study: {} samples of SyntheticImages at {} px; {} rounds of {} arms interleaved; loader {} workers, "
        "batch {}, {} samples timed, {} cache; training {} steps after {} warm-up\n",
        o.samples, o.image_size, o.repeats, arms.size(), o.workers, o.batch, o.loader_samples, o.warm ? "warm" : "cold",
        o.steps, o.warmup);
    std::cout << fmt::format(
        "# device: {}, backend {}, timer steady_clock (loader) and the trainer's step timer; run {}\n", env.device.name,
        env.backend, run_id);
    std::vector<json> rows;  // every measurement, as the ledger gets it: the table is drawn from them
    for (int round = 0; round < o.repeats; ++round) {
      for (auto& arm : arms) {
        const LoaderRun run{arm.dir, o.workers, o.batch, o.loader_samples, !o.warm, static_cast<std::uint64_t>(round)};
        json row = env.to_json();
        row["run_id"] = run_id;
        row["kind"] = "dataset_study_repeat";
        row["arm"] = arm.name;
        row["calibration"] = arm.calibration;
        row["round"] = round;
        row["layout"] = disk_layout_name(arm.layout);
        row["codec"] = image_codec_name(arm.codec);
        row["image_size"] = o.image_size;
        row["samples"] = o.samples;
        row["workers"] = o.workers;
        row["batch"] = o.batch;
        row["cold"] = !o.warm;
        row["files"] = arm.files;
        row["bytes_per_sample"] = static_cast<double>(arm.bytes) / static_cast<double>(o.samples);
        try {
          const LoaderMeasurement m = measure_loader(run);
          const TrainResult t = train_on_data(run, o.steps, o.warmup, o.backend, o.threads);
          const double wait =
              t.measured.data_wait_s / static_cast<double>(std::max<std::int64_t>(t.measured_steps, 1)) * 1e3;
          row["status"] = "ok";
          row["loader_samples_per_s"] = m.samples_per_s;
          row["read_cpu_us_per_sample"] = m.read_us;
          row["decode_cpu_us_per_sample"] = m.decode_us;
          row["page_cache_resident"] = m.resident;
          row["train_samples_per_s"] = t.samples_per_s;
          row["data_wait_ms_per_step"] = wait;
          row["step_seconds"] = t.step_seconds;
          std::cout << fmt::format(
              "[round {}/{}] {:<19} loader {:7.0f} samples/s (read {:.1f} us, decode {:.1f} us per "
              "sample, {:.0f}% cached)  training {:6.0f} samples/s, data wait {:.2f} ms/step\n",
              round + 1, o.repeats, arm.name, m.samples_per_s, m.read_us, m.decode_us, m.resident * 100,
              t.samples_per_s, wait);
        } catch (const Error& e) {
          row["status"] = "failed";
          row["error"] = e.what();
          std::cout << fmt::format("[round {}/{}] {:<19} FAILED: {}\n", round + 1, o.repeats, arm.name, e.what());
        }
        std::cout.flush();
        if (ledger) ledger->append(row);
        rows.push_back(row);
      }
    }

    std::cout << "\n" << dataset_report(dataset_arms_from_rows(rows));
    if (ledger) std::cout << "ledger: " << ledger->path() << " (run " << run_id << ")\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "dataset_study: error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "dataset_study: error: " << e.what() << "\n";  // one line, never a terminate
    return 2;
  }
}
