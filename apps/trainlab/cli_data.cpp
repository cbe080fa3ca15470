#include "apps/trainlab/cli_data.h"

#include "apps/cli_parse.h"
#include "apps/model_option.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>

#include "backends/host_memory.h"
#include "bench/measure/ledger.h"
#include "engine/data/synthetic_images.h"
#include "engine/data/token_dataset.h"
#include "engine/train/config.h"

namespace trainlab {

namespace {

// make-dataset: SyntheticImages' options, and an import's (--from).
void add_make_dataset(CLI::App& app, DataCommands& c) {
  c.make = app.add_subcommand("make-dataset",
                              "write a data set to disk: images, SyntheticImages or imported (--from: a folder of "
                              "class folders, MNIST/Fashion-MNIST IDX files, CIFAR-10), as shards or one file per "
                              "sample, JPEG, PNG or raw pixels; or a text corpus as token streams (--from text:); "
                              "with a manifest of sizes and CRC-32s");
  c.make
      ->add_option("--from", c.from,
                   "import instead of SyntheticImages: imagefolder:ROOT (ROOT/train/<class>/*.png|jpg and "
                   "ROOT/test/ or ROOT/val/), idx:DIR (train-/t10k-images-idx3-ubyte[.gz] and labels), "
                   "cifar10:DIR (data_batch_1..5.bin, test_batch.bin), text:FILE|DIR (UTF-8 text, a directory's "
                   ".txt and extensionless files: token streams for a language model, e.g. "
                   "text:/usr/share/games/fortunes)")
      ->check([](const std::string& text) {
        try {
          if (text.rfind("text:", 0) == 0) {
            TL_CHECK(text.size() > 5, "--from text: names no file or directory after 'text:'");
            return std::string();
          }
          parse_import_source(text);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      });
  c.make
      ->add_option("--channels", c.import.channels,
                   "with --from: 1 (grey) or 3 (RGB) (default: the source's: IDX 1, CIFAR-10 3, imagefolder "
                   "from its first image)")
      ->check(CLI::IsMember({1, 3}));
  c.make->add_flag("--skip-bad", c.import.skip_bad,
                   "with --from imagefolder: skip files that are not readable 8-bit PNG/JPEG images (counted in "
                   "the manifest) instead of refusing the import");
  c.make
      ->add_option("--class-names", c.import.class_names,
                   "with --from: the class names in label order, comma-separated (default: the source's)")
      ->delimiter(',');
  c.make->add_option("--out", c.write.out, "the data set's directory (new or empty; --overwrite replaces a data set)")
      ->required()
      ->check(NonEmptyPath());
  c.make->add_option("--layout", c.layout, "shards | files")
      ->capture_default_str()
      ->check(CLI::IsMember({"shards", "files"}));
  c.make->add_option("--codec", c.codec, "jpeg | png | raw")
      ->capture_default_str()
      ->check(CLI::IsMember({"jpeg", "png", "raw"}));
  c.make->add_option("--quality", c.write.quality, "JPEG quality [1..100]")
      ->capture_default_str()
      ->check(FiniteRange(1, 100));
  c.make->add_option("--shard-mb", c.write.shard_mb, "MiB per shard (shards layout) (0..1048576]")
      ->capture_default_str()
      ->check(FiniteRange(1e-6, 1048576.0));
  c.make->add_option("--samples", c.samples, "training samples [1..100000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{100000000}));
  c.make->add_option("--held-out", c.held_out, "held-out samples (0: none) [0..100000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{0}, std::int64_t{100000000}));
  c.make
      ->add_option("--image-size", c.write.image_size,
                   "SyntheticImages: the stored height and width, a multiple of 32 (upsampled; readers box-filter "
                   "back to 32); --from imagefolder: every image resized to this square size [4..4096]")
      ->check(FiniteRange(4, 4096));
  c.make->add_option("--seed", c.seed, "SyntheticImages' seed (the same seed as trainlab train's gives its images)")
      ->check(StrictUnsigned(std::numeric_limits<std::uint64_t>::max()));
  c.make->add_flag("--overwrite", c.write.overwrite, "replace a data set an earlier make-dataset wrote at --out");
  c.make->add_option("--vocabulary", c.vocabulary, "with --from text: chars (the corpus's characters) | bytes (256)")
      ->capture_default_str()
      ->check(CLI::IsMember({"chars", "bytes"}));
  c.make
      ->add_option("--held-out-fraction", c.held_out_fraction,
                   "with --from text: the corpus's last fraction held out [0..0.5] (0: none)")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 0.5));
}

}  // namespace

void add_data_commands(CLI::App& app, DataCommands& c) {
  add_make_dataset(app, c);
  c.verify = app.add_subcommand("verify-dataset",
                                "read every file of a data set and check its size and CRC-32 against the manifest; "
                                "exit 0 when all match, 2 naming each file that does not");
  c.verify->add_option("DIR", c.verify_dir, "the data set directory")->required();
  c.loader = app.add_subcommand("loader-bench",
                                "samples/s of a data set on disk per loader worker count, CPU per sample (read, "
                                "decode), the loader's cap, and the data wait of a training step at each count; rows "
                                "in the ledger");
  bench::LoaderBenchOptions& b = c.bench;
  c.loader->add_option("--data", b.data, "the data set directory (trainlab make-dataset)")
      ->required()
      ->check(NonEmptyPath());
  c.loader->add_option("--workers", c.workers, "worker counts, comma-separated (0: load on the consuming thread)")
      ->capture_default_str();
  c.loader->add_flag("--cold", b.cold, "drop the data set's pages from the page cache before each measurement");
  c.loader->add_option("--batch", b.batch, "batch size [1..65536]")
      ->capture_default_str()
      ->check(FiniteRange(1, 65536));
  c.loader->add_option("--samples", b.samples, "samples per loader measurement [1..100000000]")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{100000000}));
  c.loader->add_option("--train-steps", b.train_steps, "measured training steps per worker count (0: loader only)")
      ->capture_default_str()
      ->check(FiniteRange(std::int64_t{0}, std::int64_t{1000000}));
  c.loader->add_option("--repeats", b.repeats, "rounds, worker counts interleaved in each [1..100]")
      ->capture_default_str()
      ->check(FiniteRange(1, 100));
  add_model_options(*c.loader, b.model, "the model the training steps train (built for the data set's samples)");
  c.loader->add_option("--backend", b.backend, "the training step's backend (default: the best CPU backend)");
  c.loader->add_option("--threads", b.threads, "the training step's compute threads (0: all cores) [0..1024]")
      ->check(FiniteRange(0, 1024));
  c.loader->add_option("--ledger", b.ledger, "the ledger to append to (default: results/ledger_cpu.jsonl)")
      ->check(NonEmptyPath());
  c.budget = app.add_subcommand("throughput-budget",
                                "seed 002's analytic model: demanded vs supplied samples/s, the expected utilisation, "
                                "and the straggler tail 1-(1-p)^N at N and 2N ranks (--seed-case: the seed's example)");
  bench::BudgetInput& in = c.budget_input;
  c.budget->add_option("--ranks", in.ranks, "ranks N, each consuming --per-rank [1..16777216]")
      ->check(FiniteRange(std::int64_t{1}, std::int64_t{1} << 24));
  c.budget->add_option("--per-rank", in.per_rank, "samples/s one rank's step consumes (0..1e12]")
      ->check(FiniteRange(1e-12, 1e12));
  c.budget->add_option("--loader-cap", in.loader_cap, "samples/s the input pipeline supplies in all (0..1e15]")
      ->check(FiniteRange(1e-12, 1e15));
  c.budget->add_option("--p-slow", in.p_slow, "probability that one rank's step is slow [0..1]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 1.0));
  c.budget->add_flag("--seed-case", c.budget_seed_case,
                     "print seed 002's case (128 x 95 samples/s, a 6,800 samples/s loader, p = 1%) and where its "
                     "62% differs");
  c.inspect = app.add_subcommand("inspect",
                                 "a checkpoint part by part: tensors and shapes, the step, the LR a resume starts at, "
                                 "the optimiser, schedule, RNG and loader position, the fraction of the data seen; "
                                 "exit 0 when complete (--resume takes it), 1 when a part is missing or --resume "
                                 "refuses it (its reason printed; the checks are resume's own)");
  c.inspect->add_option("CKPT", c.inspect_dir, "the checkpoint directory")->required();
  c.diagnose = app.add_subcommand(
      "diagnose",
      "seed 002's ordered checks on what a run left (a ledger run id from train --ledger, a trace, or a checkpoint): "
      "hang vs slow, utilisation shape, step breakdown, per-rank distribution, loader CPU, data layout, changes "
      "against an earlier run, checkpoint completeness; says which check decided");
  bench::DiagnoseOptions& d = c.diagnose_options;
  c.diagnose->add_option("RUN", d.target, "a run id (in --ledger), a Chrome trace (.json) or a checkpoint directory")
      ->required();
  c.diagnose->add_option("--ledger", d.ledger, "the ledger the run recorded to (default: results/ledger_cpu.jsonl)")
      ->check(NonEmptyPath());
  c.diagnose->add_option("--against", d.against,
                         "an earlier run id in the same ledger: layout, config and environment "
                         "compared with it");
  c.diagnose
      ->add_option("--stall-factor", d.stall_factor,
                   "no progress for this many usual progress intervals (and at least 5 s) is a stopped step "
                   "counter [2..1e6]")
      ->capture_default_str()
      ->check(FiniteRange(2.0, 1e6));
}

namespace {

// make-dataset --from: the source read and checked, then written as any data set.
DatasetWriteSummary run_import(DataCommands& c) {
  for (const char* flag : {"--samples", "--held-out", "--seed"}) {
    TL_CHECK(c.make->get_option(flag)->count() == 0,
             std::string(flag) + " is SyntheticImages'; with --from the source's own splits are written whole");
  }
  c.import.progress = c.write.progress;
  c.import.image_size = c.write.image_size;
  c.write.image_size = 0;
  const ImportedDataset source = open_import(parse_import_source(c.from), c.import, c.write.out);
  for (const auto& note : source.notes) std::printf("make-dataset: %s\n", note.c_str());
  c.write.source = source.source;
  c.write.class_names = source.class_names;
  c.write.skipped = source.skipped;
  c.write.unit_values = true;
  c.write.normalize = true;
  return write_image_dataset(*source.train, source.test.get(), c.write);
}

// make-dataset --from text: the corpus read (UTF-8 checked), written as token streams.
int run_make_text(DataCommands& c) {
  for (const char* flag : {"--samples", "--held-out", "--seed", "--channels", "--skip-bad", "--class-names", "--layout",
                           "--codec", "--quality", "--shard-mb", "--image-size"}) {
    TL_CHECK(c.make->get_option(flag)->count() == 0, std::string(flag) +
                                                         " is for image data sets; --from text: "
                                                         "takes --vocabulary and --held-out-fraction");
  }
  const std::string path = c.from.substr(5);
  const TextCorpus corpus = read_text_corpus(path, parse_text_vocabulary(c.vocabulary));
  TokenDatasetWriteOptions o;
  o.out = c.write.out;
  o.overwrite = c.write.overwrite;
  o.held_out_fraction = c.held_out_fraction;
  o.source = c.from;
  const DatasetWriteSummary summary = write_token_dataset(corpus, o);
  const TokenDatasetInfo info = read_token_dataset_info(summary.out);
  std::printf("make-dataset: %s written in %.1f s: %zu text files, %s, vocabulary %s of %lld symbols\n",
              summary.out.c_str(), summary.seconds, corpus.files.size(), human_size(corpus.bytes).c_str(),
              c.vocabulary.c_str(), static_cast<long long>(info.vocab()));
  for (const auto& s : summary.splits)
    std::printf("  %-8s %10lld tokens, %s\n", s.name.c_str(), static_cast<long long>(s.samples),
                human_size(s.bytes).c_str());
  if (!summary.kept.empty()) {
    std::printf(
        "make-dataset: files that were in the replaced data set's directory but not in its manifest are "
        "kept in %s (the new data set has files of their names)\n",
        summary.kept.c_str());
  }
  return 0;
}

int run_make(DataCommands& c) {
  if (c.from.rfind("text:", 0) == 0) return run_make_text(c);
  for (const char* flag : {"--vocabulary", "--held-out-fraction"})
    TL_CHECK(c.make->get_option(flag)->count() == 0, std::string(flag) + " goes with --from text:");
  c.write.layout = parse_disk_layout(c.layout);
  c.write.codec = parse_image_codec(c.codec);
  c.write.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()), std::fflush(stdout); };
  DatasetWriteSummary summary;
  if (!c.from.empty()) {
    summary = run_import(c);
  } else {
    for (const char* flag : {"--channels", "--skip-bad", "--class-names"}) {
      TL_CHECK(c.make->get_option(flag)->count() == 0, std::string(flag) + " goes with --from (an import)");
    }
    const SyntheticImages train(c.seed, Split::train, c.samples);
    const SyntheticImages held_out(c.seed, Split::held_out, c.held_out > 0 ? c.held_out : 1);
    summary = write_image_dataset(train, c.held_out > 0 ? &held_out : nullptr, c.write);
  }
  const DatasetInfo info = read_dataset_info(summary.out);  // absolute: --out . names a directory now replaced
  std::printf("make-dataset: %s written in %.1f s: %s, %s%s, %dx%dx%d\n", summary.out.c_str(), summary.seconds,
              disk_layout_name(info.layout), image_codec_name(info.codec),
              info.codec == ImageCodec::jpeg ? (" q" + std::to_string(info.quality)).c_str() : "", info.image.height,
              info.image.width, info.image.channels);
  for (const auto& s : summary.splits) {
    std::printf("  %-8s %8lld samples in %6lld files, %s (%.0f bytes per sample)\n", s.name.c_str(),
                static_cast<long long>(s.samples), static_cast<long long>(s.files), human_size(s.bytes).c_str(),
                static_cast<double>(s.bytes) / static_cast<double>(s.samples));
  }
  if (!info.class_names.empty()) {
    std::string names;
    for (const auto& n : info.class_names) names += (names.empty() ? "" : ", ") + n;
    std::printf("  classes  %lld: %s\n", static_cast<long long>(info.classes), names.c_str());
  }
  for (std::size_t ch = 0; ch < info.mean.size(); ++ch)
    std::printf(
        "  channel %zu: mean %.4f, std %.4f of the training split (values = pixels / 255; the reader "
        "standardises with them)\n",
        ch, info.mean[ch], info.stdev[ch]);
  if (!summary.kept.empty()) {
    std::printf(
        "make-dataset: files that were in the replaced data set's directory but not in its manifest are "
        "kept in %s (the new data set has files of their names)\n",
        summary.kept.c_str());
  }
  return 0;
}

int run_verify(const DataCommands& c) {
  const DatasetVerifyResult r =
      is_token_dataset(c.verify_dir) ? verify_token_dataset(c.verify_dir) : verify_image_dataset(c.verify_dir);
  for (const auto& problem : r.problems) std::fprintf(stderr, "verify-dataset: %s\n", problem.c_str());
  if (!r.problems.empty()) {
    std::fprintf(stderr, "trainlab: error: data set %s: %zu problem(s) in %lld files against the manifest\n",
                 c.verify_dir.c_str(), r.problems.size(), static_cast<long long>(r.files));
    return 2;
  }
  std::printf("data set %s: %lld files, %s, every size and CRC-32 matches the manifest, every record checks\n",
              c.verify_dir.c_str(), static_cast<long long>(r.files), human_size(r.bytes).c_str());
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
  // Nothing measured at all: the failed rows are in the ledger, and the exit status says so.
  const bool measured = std::any_of(result.arms.begin(), result.arms.end(), [](const bench::LoaderBenchArm& a) {
    return !a.samples_per_s.empty() || !a.train_samples_per_s.empty();
  });
  if (!measured) {
    std::string first;
    for (const auto& a : result.arms)
      if (first.empty() && !a.errors.empty()) first = a.errors.front();
    std::fprintf(stderr, "trainlab: error: loader-bench: every measurement failed (first: %s)\n", first.c_str());
    return 1;
  }
  return 0;
}

int run_budget(const DataCommands& c) {
  if (c.budget_seed_case) {
    for (const char* flag : {"--ranks", "--per-rank", "--loader-cap", "--p-slow"})
      TL_CHECK(c.budget->count(flag) == 0,
               std::string("throughput-budget: --seed-case takes the seed's inputs; drop ") + flag);
    std::printf("%s", bench::seed_budget_text().c_str());
    return 0;
  }
  std::string missing;
  for (const char* flag : {"--ranks", "--per-rank", "--loader-cap"})
    if (c.budget->count(flag) == 0) missing += std::string(missing.empty() ? "" : ", ") + flag;
  TL_CHECK(missing.empty(), "throughput-budget: missing " + missing + " (or --seed-case for seed 002's example)");
  std::printf("%s", bench::budget_text(c.budget_input, bench::throughput_budget(c.budget_input)).c_str());
  return 0;
}

int run_inspect(const DataCommands& c) {
  const bench::CheckpointInspection inspection = bench::inspect_checkpoint(c.inspect_dir);
  std::printf("%s", bench::inspection_text(inspection).c_str());
  return inspection.complete() ? 0 : 1;
}

}  // namespace

std::optional<int> run_data_command(DataCommands& c) {
  if (*c.diagnose) {
    std::printf("%s", bench::diagnosis_text(bench::diagnose(c.diagnose_options)).c_str());
    return 0;
  }
  if (*c.budget) return run_budget(c);
  if (*c.inspect) return run_inspect(c);
  if (*c.loader) return run_loader(c);
  if (*c.make) return run_make(c);
  if (*c.verify) return run_verify(c);
  return std::nullopt;
}

}  // namespace trainlab
