#include "studies/fashion/fashion_study.h"

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "backends/registry.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/stats.h"
#include "engine/data/dataset_import.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/image_codec.h"
#include "engine/io/fileio.h"
#include "engine/train/task.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

namespace fs = std::filesystem;

namespace {

// The data set at o.data: reused when it is an import of o.source, else imported now (raw pixels,
// the cheapest decode: the study measures training, not PNG).
DatasetInfo prepare_data(const FashionStudyOptions& o) {
  std::error_code ec;
  TL_CHECK(fs::is_directory(o.source, ec),
           "--source " + o.source +
               " is not a directory (the IDX files; apt-get install dataset-fashion-mnist puts Fashion-MNIST's in "
               "/usr/share/datasets/fashion-mnist)");
  const std::string source = fs::weakly_canonical(fs::absolute(o.source), ec).string();
  const std::string wanted = "idx:" + source + " (";
  if (fs::exists(fs::path(o.data) / "manifest.json", ec)) {
    const DatasetInfo info = read_dataset_info(o.data);
    if (info.source.rfind(wanted, 0) == 0) {
      std::cout << fmt::format("# data set: {} (imported earlier from {})\n", o.data, source);
      return info;
    }
  }
  std::cout << fmt::format("# importing {} into {}\n", source, o.data);
  ImportOptions import_options;
  import_options.progress = [](const std::string& line) { std::cout << "# " << line << "\n" << std::flush; };
  const ImportedDataset imported = open_import(ImportSource{ImportKind::idx, source}, import_options, o.data);
  DatasetWriteOptions w;
  w.out = o.data;
  w.codec = ImageCodec::raw;
  w.overwrite = true;  // only ever a data set: write_image_dataset replaces nothing else
  w.source = imported.source;
  w.class_names = imported.class_names;
  w.unit_values = true;
  w.normalize = true;
  w.progress = import_options.progress;
  write_image_dataset(*imported.train, imported.test.get(), w);
  return read_dataset_info(o.data);
}

// The warm-up in steps: warmup_epochs of `per_epoch` steps, rounded.
std::int64_t warmup_steps_of(const FashionStudyOptions& o, std::int64_t per_epoch) {
  return static_cast<std::int64_t>(std::llround(o.warmup_epochs * static_cast<double>(per_epoch)));
}

// The first steps' losses a row keeps (the loss-curve comparison's window).
constexpr std::size_t kCurveSteps = 200;

FashionRunRow row_for(const FashionStudyOptions& o, const RowHeader& header, const std::string& framework,
                      std::int64_t seed, std::int64_t steps, const DatasetInfo& info) {
  FashionRunRow row;
  row.header = header;
  row.framework = framework;
  row.seed = seed;
  row.epochs = o.epochs;
  row.steps = steps;
  row.batch = o.batch;
  row.lr = o.lr;
  row.momentum = o.momentum;
  row.warmup_steps = warmup_steps_of(o, steps / std::max<std::int64_t>(1, o.epochs));
  row.schedule = row.warmup_steps > 0 ? fmt::format("warmup_cosine ({} warm-up steps, to 0)", row.warmup_steps)
                                      : "warmup_cosine (no warm-up, to 0)";
  row.dataset = data_source_of_dir(info.dir).label();
  row.model = o.model.name;
  row.model_options = model_options_text(o.model.options);
  row.weight_decay = o.weight_decay;
  row.goal = o.goal;
  row.budget_seconds = 60 * o.budget_minutes;
  return row;
}

FashionRunRow train_trainlab(const FashionStudyOptions& o, const RowHeader& header, std::int64_t seed,
                             const DatasetInfo& info, std::int64_t train_size, std::int64_t test_size) {
  const std::int64_t steps = o.epochs * (train_size / o.batch);
  FashionRunRow row = row_for(o, header, "trainlab", seed, steps, info);
  TrainConfig c;
  c.model = o.model;
  c.data.dir = o.data;
  c.data.train_samples = train_size;
  c.data.eval_samples = test_size;
  c.data.workers = o.workers;
  c.batch = o.batch;
  c.steps = steps;
  c.seed = static_cast<std::uint64_t>(seed);
  c.optimizer.lr = o.lr;
  c.optimizer.momentum = o.momentum;
  c.optimizer.weight_decay = o.weight_decay;
  c.optimizer.schedule = ScheduleKind::warmup_cosine;
  c.optimizer.warmup_steps = row.warmup_steps;
  c.optimizer.min_lr = 0;
  c.execution.backend = o.backend;
  c.execution.threads = o.threads;
  c.execution.layout = o.layout;
  c.execution.fuse = o.fuse;
  c.reporting.log_every = std::max<std::int64_t>(1, steps / 4);
  try {
    validate_config(c);
    Trainer trainer(c, model_task(c));
    const TrainResult r = trainer.train(&std::cout);
    row.variant = trainer.step_plan().backend + " f32 " + memory_format_name(o.layout) + (o.fuse ? " fused" : "");
    row.first_losses.assign(r.losses.begin(),
                            r.losses.begin() + static_cast<std::ptrdiff_t>(std::min(r.losses.size(), kCurveSteps)));
    row.header.status = "ok";
    row.test_accuracy = r.final_eval.accuracy;
    row.test_samples = r.final_eval.samples;
    row.per_class_accuracy = r.final_eval.per_class_accuracy();
    row.class_names = info.class_names;
    row.confusion = r.final_eval.confusion;
    row.samples_per_s = r.samples_per_s;
    double seconds = 0;
    for (double s : r.step_seconds) seconds += s;
    row.train_seconds = seconds;
  } catch (const Error& e) {
    row.header.status = "failed";
    row.error = e.what();
  }
  return row;
}

FashionRunRow train_pytorch(const FashionStudyOptions& o, const RowHeader& header, std::int64_t seed,
                            const DatasetInfo& info, std::int64_t train_size) {
  FashionRunRow row = row_for(o, header, "pytorch", seed, o.epochs * (train_size / o.batch), info);
  const std::string command = fmt::format(
      "{} {} --data '{}' --model {} --model-options '{}' --epochs {} --batch {} --lr {} --momentum {} "
      "--weight-decay {} --schedule warmup_cosine --warmup-steps {} --seed {} --threads {} 2>&1",
      o.python, o.peer_script, o.source, find_model(o.model.name).torch_twin, model_options_text(o.model.options),
      o.epochs, o.batch, o.lr, o.momentum, o.weight_decay, row.warmup_steps, seed, o.threads);
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    std::array<char, 4096> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
    pclose(pipe);
  }
  const auto start = output.rfind("{\"tool\"");
  try {
    TL_CHECK(start != std::string::npos, "the peer printed no result: " + output.substr(0, 300));
    const json j = json::parse(output.substr(start));
    TL_CHECK(!j.contains("error"), "the peer: " + j.value("error", std::string()));
    row.variant = fmt::format("{} (torch {}, {} threads, malloc {})", j.at("variant").get<std::string>(),
                              j.at("torch").get<std::string>(), j.at("threads").get<int>(),
                              j.at("malloc").get<std::string>().substr(0, 5));
    row.header.status = "ok";
    row.test_accuracy = j.at("test_accuracy").get<double>();
    row.test_samples = j.at("test_samples").get<std::int64_t>();
    row.per_class_accuracy = j.at("per_class_accuracy").get<std::vector<double>>();
    row.class_names = info.class_names;
    row.train_seconds = j.at("train_seconds").get<double>();
    row.samples_per_s = j.at("samples_per_s").get<double>();
    if (j.contains("losses")) {
      const auto losses = j.at("losses").get<std::vector<double>>();
      row.first_losses.assign(losses.begin(),
                              losses.begin() + static_cast<std::ptrdiff_t>(std::min(losses.size(), kCurveSteps)));
    }
  } catch (const std::exception& e) {
    row.header.status = "failed";
    row.error = e.what();
  }
  return row;
}

std::string percent(const Summary& s) {
  return fmt::format("{:.2f}% ({:.2f}-{:.2f})", 100 * s.median, 100 * s.min, 100 * s.max);
}

// The published table's fallback, as Fashion-MNIST's README on GitHub lists its two-convolution rows.
const std::vector<FashionBaseline> kQuoted = {
    {"2 Conv+pooling", 0.876, ""},
    {"2 Conv+pooling (TensorFlow's doc)", 0.916, ""},
    {"2 Conv+pooling+ELU activation (PyTorch)", 0.903, ""},
    {"2 Conv, normalisation and augmentation", 0.919, ""},
    {"2 Conv <100K parameters", 0.925, ""},
    {"2 Conv ~113K parameters, normalisation", 0.922, ""},
    {"2 Conv+3 FC ~1.8M parameters, normalisation", 0.932, ""},
    {"2 Conv+3 FC ~500K parameters, augmentation, batch normalisation", 0.934, ""},
    {"2 Conv+pooling+BN", 0.934, ""},
    {"2 Conv+2 FC, random horizontal flips", 0.939, ""}};

}  // namespace

std::vector<FashionBaseline> fashion_baselines(const std::string& readme) {
  std::vector<FashionBaseline> found;
  std::error_code ec;
  if (fs::is_regular_file(readme, ec)) {
    try {
      const auto bytes = gunzip_if_gzipped(read_file(readme, 64 << 20), readme);
      std::istringstream in(std::string(bytes.begin(), bytes.end()));
      std::string line;
      while (std::getline(in, line)) {
        // | Classifier | Preprocessing | Fashion test accuracy | MNIST test accuracy | Submitter | Code |
        if (line.rfind("|2 Conv", 0) != 0) continue;
        std::vector<std::string> cells;
        std::stringstream row(line.substr(1));
        for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
        if (cells.size() < 3) continue;
        const auto trim = [](std::string s) {
          s.erase(0, s.find_first_not_of(' '));
          s.erase(s.find_last_not_of(' ') + 1);
          return s;
        };
        const std::string model = trim(cells[0]), pre = trim(cells[1]);
        try {
          const double accuracy = std::stod(trim(cells[2]));
          if (accuracy > 0 && accuracy <= 1)
            found.push_back({pre == "None" || pre.empty() ? model : model + ", " + pre, accuracy, readme});
        } catch (const std::exception&) {
        }
      }
    } catch (const Error&) {
      found.clear();
    }
  }
  if (!found.empty()) return found;
  std::vector<FashionBaseline> quoted = kQuoted;
  for (auto& b : quoted) b.source = "github.com/zalandoresearch/fashion-mnist README (benchmark table), quoted";
  return quoted;
}

std::vector<std::vector<double>> smoothed_curves(const std::vector<FashionRunRow>& rows, const std::string& framework) {
  std::vector<std::vector<double>> curves;
  for (const auto& r : rows) {
    if (!r.header.ok() || r.framework != framework || r.first_losses.empty()) continue;
    std::vector<double> curve;
    double window = 0;
    for (std::size_t i = 0; i < r.first_losses.size(); ++i) {
      window += r.first_losses[i];
      if (i >= kCurveWindow) window -= r.first_losses[i - kCurveWindow];
      curve.push_back(window / static_cast<double>(std::min(i + 1, kCurveWindow)));
    }
    curves.push_back(std::move(curve));
  }
  return curves;
}

CurveAgreement curve_agreement(const std::vector<FashionRunRow>& rows) {
  const auto ours = smoothed_curves(rows, "trainlab"), theirs = smoothed_curves(rows, "pytorch");
  CurveAgreement a;
  a.seeds = std::min(ours.size(), theirs.size());
  if (ours.empty() || theirs.empty()) return a;
  std::size_t steps = std::numeric_limits<std::size_t>::max();
  for (const auto& c : ours) steps = std::min(steps, c.size());
  for (const auto& c : theirs) steps = std::min(steps, c.size());
  for (std::size_t i = 0; i < steps; ++i) {
    std::vector<double> at;
    double lo = 1e300, hi = -1e300;
    for (const auto& c : ours) at.push_back(c[i]);
    for (const auto& c : theirs) lo = std::min(lo, c[i]), hi = std::max(hi, c[i]);
    const double median = summarize(at).median;
    ++a.steps;
    if (median >= lo && median <= hi) ++a.within;
    a.worst_gap = std::max(a.worst_gap, median < lo ? lo - median : median > hi ? median - hi : 0.0);
  }
  return a;
}

std::string fashion_report(const std::vector<FashionRunRow>& rows, const std::vector<FashionBaseline>& baselines) {
  std::map<std::string, std::vector<const FashionRunRow*>> by;
  std::vector<std::string> failed;
  for (const auto& r : rows) {
    if (r.header.ok())
      by[r.framework].push_back(&r);
    else
      failed.push_back(fmt::format("{} seed {}: {}", r.framework, r.seed, r.error));
  }
  std::string out;
  const FashionRunRow* any = rows.empty() ? nullptr : &rows.front();
  if (any)
    out += fmt::format(
        "{} on Fashion-MNIST ({}), {} epochs of batch {} ({} steps), SGD lr {} momentum {}{}, {}; test accuracy on "
        "the whole test split\n\n",
        model_label(any->model, any->model_options), any->dataset, any->epochs, any->batch, any->steps, any->lr,
        any->momentum,
        any->weight_decay > 0 ? fmt::format(" weight decay {} (the model's parameter groups)", any->weight_decay) : "",
        any->schedule);
  out +=
      "| framework | what ran | seeds | test accuracy, median (min-max) | samples/s, median (min-max) | "
      "training time, median (min-max) |\n";
  out += "|---|---|---|---|---|---|\n";
  std::map<std::string, Summary> accuracy, speed, seconds;
  for (const char* name : {"trainlab", "pytorch"}) {
    const auto it = by.find(name);
    if (it == by.end()) continue;
    std::vector<double> acc, sps, secs;
    for (const auto* r : it->second)
      acc.push_back(r->test_accuracy), sps.push_back(r->samples_per_s), secs.push_back(r->train_seconds);
    accuracy[name] = summarize(acc);
    speed[name] = summarize(sps);
    seconds[name] = summarize(secs);
    out += fmt::format("| {} | {} | {} | {} | {:.0f} ({:.0f}-{:.0f}) | {:.1f} s ({:.1f}-{:.1f}) |\n", name,
                       it->second.front()->variant, acc.size(), percent(accuracy[name]), speed[name].median,
                       speed[name].min, speed[name].max, seconds[name].median, seconds[name].min, seconds[name].max);
  }
  if (any != nullptr && any->model == "resnet")
    out +=
        "| He et al. 2016, ResNet-20 (0.27M parameters) | on CIFAR-10, not this data set | - | 91.25% (8.75% "
        "error) | - | - |\n";
  if (!baselines.empty()) {
    double lo = 1, hi = 0;
    for (const auto& b : baselines) lo = std::min(lo, b.accuracy), hi = std::max(hi, b.accuracy);
    out += fmt::format("| published two-convolution CNNs | {} results | - | {:.1f}% to {:.1f}% | - | - |\n",
                       baselines.size(), 100 * lo, 100 * hi);
  }
  out += "\n";
  if (accuracy.count("trainlab")) {
    const Summary& t = accuracy["trainlab"];
    const double goal = any->goal > 0 ? any->goal : 0.90;
    out += fmt::format("- trainlab's test accuracy {:.2f}%: {} the {:g}% goal\n", 100 * t.median,
                       t.median >= goal ? "meets" : "MISSES", 100 * goal);
    if (any->budget_seconds > 0) {
      const Summary& s = seconds["trainlab"];
      out += fmt::format("- trainlab's training time {:.1f} min (slowest seed {:.1f}): {} the {:g}-minute budget\n",
                         s.median / 60, s.max / 60, s.max <= any->budget_seconds ? "within" : "OVER",
                         any->budget_seconds / 60);
    }
    if (accuracy.count("pytorch")) {
      const Summary& p = accuracy["pytorch"];
      const bool within = t.median >= p.min && t.median <= p.max;
      out +=
          fmt::format("- against PyTorch's seeds ({:.2f}-{:.2f}%): trainlab's median is {}\n", 100 * p.min, 100 * p.max,
                      within ? std::string("within their spread")
                             : fmt::format("OUTSIDE their spread, by {:+.2f} points (the two ranges {})",
                                           100 * (t.median < p.min ? t.median - p.min : t.median - p.max),
                                           t.max >= p.min && t.min <= p.max ? "overlap" : "do not overlap"));
      const double ratio = speed["trainlab"].median / speed["pytorch"].median;
      out += fmt::format("- speed: trainlab {:.2f}x PyTorch's samples/s (medians; min-max {:.2f}-{:.2f}x): {}\n", ratio,
                         speed["trainlab"].min / speed["pytorch"].max, speed["trainlab"].max / speed["pytorch"].min,
                         ratio > 1 ? "trainlab faster" : "trainlab NOT faster");
    }
  }
  const CurveAgreement curve = curve_agreement(rows);
  if (curve.seeds >= 2) {
    out += fmt::format(
        "- the first {} steps' loss ({}-step means): trainlab's median over seeds within PyTorch's seeds' spread at "
        "{} of {} steps ({}); the farthest step {:.3f} outside\n",
        curve.steps, kCurveWindow, curve.within, curve.steps,
        curve.within * 10 >= curve.steps * 9 ? "follows PyTorch's curve" : "does NOT follow PyTorch's curve",
        curve.worst_gap);
  } else if (curve.seeds == 1) {
    out += "- loss curves: one seed each, no spread to hold them to (run more seeds)\n";
  }
  if (!baselines.empty()) out += "- published results from " + baselines.front().source + "\n";
  for (const auto& f : failed) out += "- FAILED: " + f + "\n";
  return out;
}

std::string fashion_peer_mismatch(const ModelConfig& model) {
  const std::string twin = find_model(model.name).torch_twin;
  if (twin == "resnet" || (twin == "smallcnn" && model.options.empty())) return "";
  return "the PyTorch peer trains SmallCNN and ResNet only, and this run's model is " + model_label(model);
}

int run_fashion_study(const FashionStudyOptions& o) {
  TL_CHECK(o.epochs >= 1 && o.epochs <= 1000, "--epochs " + std::to_string(o.epochs) + " is outside 1..1000");
  TL_CHECK(o.warmup_epochs >= 0 && o.warmup_epochs < static_cast<double>(o.epochs),
           "--warmup-epochs " + fmt::format("{}", o.warmup_epochs) + " is outside [0, --epochs " +
               std::to_string(o.epochs) + ")");
  TL_CHECK(o.goal > 0 && o.goal <= 1, "--goal " + fmt::format("{}", o.goal) + " is outside (0, 1]");
  TL_CHECK(o.budget_minutes >= 0, "--budget-minutes " + fmt::format("{}", o.budget_minutes) + " is negative");
  TL_CHECK(o.seeds >= 1 && o.seeds <= 100, "--seeds " + std::to_string(o.seeds) + " is outside 1..100");
  check_backend_name(o.backend);
  {
    // The model takes Fashion-MNIST's samples (its keys' values too): refused here, before the import.
    const ModelDef& def = find_model(o.model.name);
    const ModelInput input{{1, 28, 28}, 10};
    check_model_keys(def, o.model.options);
    try {
      def.check(input, o.model.options);
    } catch (const Error& e) {
      throw Error("model '" + def.name + "' for Fashion-MNIST's " + input.str() + ": " + e.what());
    }
  }
  Backend& backend = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
  RowHeader header;
  header.env = current_environment(backend);
  header.kind = FashionRunRow::kKind;
  std::optional<Ledger> ledger;
  if (!o.no_ledger) ledger.emplace(o.ledger_path.empty() ? default_ledger_path(header.env.device.type) : o.ledger_path);
  if (ledger) ledger->load();  // a bad ledger path fails before anything runs
  header.run_id = new_run_id();

  const DatasetInfo info = prepare_data(o);
  const std::int64_t train_size = open_image_dataset(o.data, Split::train)->size();
  const std::int64_t test_size = open_image_dataset(o.data, Split::held_out)->size();
  TL_CHECK(train_size >= o.batch, "the data set's " + std::to_string(train_size) +
                                      " training samples are fewer than "
                                      "--batch " +
                                      std::to_string(o.batch));
  // Beside a model the peer has no twin for it would compare two models, so trainlab runs alone.
  const std::string peer_mismatch = fashion_peer_mismatch(o.model);
  const bool peer = !o.no_peer && peer_mismatch.empty();
  std::cout << fmt::format("# fashion_study: {}, {} seeds, {}; device {}, run {}\n", model_label(o.model), o.seeds,
                           peer ? "trainlab then PyTorch for each" : "trainlab only", header.env.device.name,
                           header.run_id);
  if (!o.no_peer && !peer_mismatch.empty())
    std::cout << "# PyTorch peer skipped: " << peer_mismatch << " (" << o.peer_script << ")\n";
  std::vector<FashionRunRow> rows;
  bool all_ok = true;
  const auto keep = [&](FashionRunRow row) {
    std::cout << fmt::format("# {} seed {}: {}\n", row.framework, row.seed,
                             row.header.ok()
                                 ? fmt::format("test accuracy {:.2f}%, {:.0f} samples/s over {:.1f} s",
                                               100 * row.test_accuracy, row.samples_per_s, row.train_seconds)
                                 : "FAILED: " + row.error)
              << std::flush;
    all_ok = all_ok && row.header.ok();
    if (ledger) ledger->append(row);
    rows.push_back(std::move(row));
  };
  for (std::int64_t seed = 0; seed < o.seeds; ++seed) {
    keep(train_trainlab(o, header, seed, info, train_size, test_size));
    if (peer) keep(train_pytorch(o, header, seed, info, train_size));
  }
  std::cout << "\n" << fashion_report(rows, fashion_baselines(o.readme));
  if (ledger) std::cout << "ledger: " << ledger->path() << " (run " << header.run_id << ")\n";
  return all_ok ? 0 : 1;
}

}  // namespace trainlab::bench
