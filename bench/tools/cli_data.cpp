#include "bench/tools/cli_data.h"

#include <cstdio>
#include <iostream>

#include "backends/host_memory.h"
#include "bench/ledger.h"
#include "engine/config.h"
#include "engine/synthetic_images.h"

namespace trainlab {

void add_data_commands(CLI::App& app, DataCommands& c) {
  c.make = app.add_subcommand("make-dataset",
                              "write SyntheticImages to disk as a real image data set: shards or one file per "
                              "sample, JPEG, PNG or raw pixels, with a manifest of sizes and CRC-32s");
  c.make->add_option("--out", c.write.out, "the data set's directory (new or empty; --overwrite replaces a data set)")
      ->required();
  c.make->add_option("--layout", c.layout, "shards | files")
      ->capture_default_str()
      ->check(CLI::IsMember({"shards", "files"}));
  c.make->add_option("--codec", c.codec, "jpeg | png | raw")
      ->capture_default_str()
      ->check(CLI::IsMember({"jpeg", "png", "raw"}));
  c.make->add_option("--quality", c.write.quality, "JPEG quality [1..100]")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  c.make->add_option("--shard-mb", c.write.shard_mb, "MiB per shard (shards layout) (0..1048576]")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1048576.0));
  c.make->add_option("--samples", c.samples, "training samples [1..100000000]")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}));
  c.make->add_option("--held-out", c.held_out, "held-out samples (0: none) [0..100000000]")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{100000000}));
  c.make
      ->add_option("--image-size", c.write.image_size,
                   "stored height and width in pixels, a multiple of 32 (images upsampled; readers box-filter "
                   "back to 32) [32..4096]")
      ->check(CLI::Range(32, 4096));
  c.make->add_option("--seed", c.seed, "SyntheticImages' seed (the same seed as trainlab train's gives its images)");
  c.make->add_flag("--overwrite", c.write.overwrite, "replace a data set an earlier make-dataset wrote at --out");
  c.verify = app.add_subcommand("verify-dataset",
                                "read every file of a data set and check its size and CRC-32 against the manifest; "
                                "exit 0 when all match, 2 naming each file that does not");
  c.verify->add_option("DIR", c.verify_dir, "the data set directory")->required();
  c.loader = app.add_subcommand("loader-bench",
                                "samples/s of a data set on disk per loader worker count, CPU per sample (read, "
                                "decode), the loader's cap, and the data wait of a training step at each count; rows "
                                "in the ledger");
  bench::LoaderBenchOptions& b = c.bench;
  c.loader->add_option("--data", b.data, "the data set directory (trainlab make-dataset)")->required();
  c.loader->add_option("--workers", c.workers, "worker counts, comma-separated (0: load on the consuming thread)")
      ->capture_default_str();
  c.loader->add_flag("--cold", b.cold, "drop the data set's pages from the page cache before each measurement");
  c.loader->add_option("--batch", b.batch, "batch size [1..65536]")->capture_default_str()->check(CLI::Range(1, 65536));
  c.loader->add_option("--samples", b.samples, "samples per loader measurement [1..100000000]")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}));
  c.loader->add_option("--train-steps", b.train_steps, "measured training steps per worker count (0: loader only)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  c.loader->add_option("--repeats", b.repeats, "rounds, worker counts interleaved in each [1..100]")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  c.loader->add_option("--backend", b.backend, "the training step's backend (default: the best CPU backend)");
  c.loader->add_option("--threads", b.threads, "the training step's compute threads (0: all cores) [0..1024]")
      ->check(CLI::Range(0, 1024));
  c.loader->add_option("--ledger", b.ledger, "the ledger to append to (default: results/ledger_cpu.jsonl)");
}

namespace {

int run_make(DataCommands& c) {
  c.write.layout = parse_disk_layout(c.layout);
  c.write.codec = parse_image_codec(c.codec);
  c.write.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()), std::fflush(stdout); };
  const SyntheticImages train(c.seed, Split::train, c.samples);
  const SyntheticImages held_out(c.seed, Split::held_out, c.held_out > 0 ? c.held_out : 1);
  const DatasetWriteSummary summary = write_image_dataset(train, c.held_out > 0 ? &held_out : nullptr, c.write);
  const DatasetInfo info = read_dataset_info(c.write.out);
  std::printf("make-dataset: %s written in %.1f s: %s, %s%s, %dx%dx%d\n", c.write.out.c_str(), summary.seconds,
              disk_layout_name(info.layout), image_codec_name(info.codec),
              info.codec == ImageCodec::jpeg ? (" q" + std::to_string(info.quality)).c_str() : "", info.image.height,
              info.image.width, info.image.channels);
  for (const auto& s : summary.splits) {
    std::printf("  %-8s %8lld samples in %6lld files, %s (%.0f bytes per sample)\n", s.name.c_str(),
                static_cast<long long>(s.samples), static_cast<long long>(s.files), human_size(s.bytes).c_str(),
                static_cast<double>(s.bytes) / static_cast<double>(s.samples));
  }
  return 0;
}

int run_verify(const DataCommands& c) {
  const DatasetVerifyResult r = verify_image_dataset(c.verify_dir);
  for (const auto& problem : r.problems)
    std::fprintf(stderr, "verify-dataset: %s/%s\n", c.verify_dir.c_str(), problem.c_str());
  if (!r.problems.empty()) {
    std::fprintf(stderr, "trainlab: error: data set %s: %zu of %lld files differ from the manifest\n",
                 c.verify_dir.c_str(), r.problems.size(), static_cast<long long>(r.files));
    return 2;
  }
  std::printf("data set %s: %lld files, %s, every size and CRC-32 matches the manifest\n", c.verify_dir.c_str(),
              static_cast<long long>(r.files), human_size(r.bytes).c_str());
  return 0;
}

int run_loader(DataCommands& c) {
  c.bench.workers.clear();
  std::size_t start = 0;
  while (true) {
    const auto comma = c.workers.find(',', start);
    const std::string item = c.workers.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const bool digits = !item.empty() && item.size() <= 3 && item.find_first_not_of("0123456789") == std::string::npos;
    TL_CHECK(digits && std::stoi(item) <= 64, "loader-bench: --workers " + quote_value(c.workers) + ": " +
                                                  quote_value(item) + " is not a worker count 0..64");
    c.bench.workers.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  check_backend_name(c.bench.backend);
  const auto result = bench::run_loader_bench(c.bench, std::cout);
  std::cout << bench::loader_bench_table(result, c.bench);
  std::cout << "ledger: " << result.ledger << " (run " << result.run_id << ")\n";
  return 0;
}

}  // namespace

std::optional<int> run_data_command(DataCommands& c) {
  if (*c.loader) return run_loader(c);
  if (*c.make) return run_make(c);
  if (*c.verify) return run_verify(c);
  return std::nullopt;
}

}  // namespace trainlab
