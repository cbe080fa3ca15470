// bench_pipeline: pipeline parallelism against its bound (studies/pipeline/pipeline_study.h).
#include "studies/pipeline/pipeline_study.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "comm/mpi_communicator.h"
#include "comm/pipeline.h"
#include "engine/io/fileio.h"
#include "engine/nn/model_registry.h"
#include "studies/pipeline/rows.h"

namespace trainlab::bench {

namespace {

using comm::PipelineSchedule;

struct PipelineArm {
  PipelineSchedule schedule;
  std::int64_t micro;
};

// Per configuration, what every measured step gave: on each stage its busy seconds, the step's
// seconds (the slowest stage's), the in-flight peak, and the last step's events (every stage's).
struct PipelineArmRecord {
  std::vector<double> seconds;            // the slowest stage's step, update included
  std::vector<double> span;               // the schedule's, over every stage (PipelineStepResult)
  std::vector<std::vector<double>> busy;  // [step][stage]
  std::vector<std::int64_t> peak;         // [stage], the largest over the steps
  std::vector<double> events;             // [stage][2m][4]: kind (0 F, 1 B), micro, begin, end; the last step
  double loss = 0;
  std::vector<double> data_parallel_s;  // stage 0's average over the replicas, per step
  // [stage]: the activation bytes held at once (the largest over the steps), what one micro-batch's
  // forward left and the most it held while it ran (the last step's)
  std::vector<std::int64_t> activation_peak, activation_micro, activation_forward_peak, activation_received;
};

std::vector<std::int64_t> parse_micro_counts(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TL_CHECK(used == item.size() && !item.empty() && v >= 1 && v <= 4096,
             "bench_pipeline: --micro-batches '" + text + "': '" + item + "' is not a count (allowed: 1..4096, " +
                 "comma-separated)");
    out.push_back(v);
  }
  return out;
}

std::vector<PipelineSchedule> parse_pipeline_schedules(const std::string& text) {
  std::vector<PipelineSchedule> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(comm::parse_pipeline_schedule(item));
  TL_CHECK(!out.empty(), "bench_pipeline: --schedules is empty (allowed: gpipe, 1f1b, comma-separated)");
  return out;
}

// One step of a configuration on every stage, its figures summed into rank order on every rank.
void measure_pipeline_step(comm::Communicator& world, comm::PipelineStage& stage, Optimizer& sgd,
                           const std::function<Batch()>& batches, std::int64_t micro, PipelineArmRecord* record) {
  const int p = world.size(), s = world.rank();
  world.barrier();  // the stages start together: their clocks' offsets are the barrier's skew
  const comm::PipelineStepResult r = stage.step(batches, sgd);
  if (record == nullptr) return;
  // [busy | step seconds | peak | schedule begin | schedule end | activation peak | one micro-batch's
  // activations | its forward's peak | its received input] per stage, then the events per stage
  const std::size_t per = static_cast<std::size_t>(8 * micro), head = static_cast<std::size_t>(9 * p);
  std::vector<double> all(head + per * static_cast<std::size_t>(p), 0.0);
  all[static_cast<std::size_t>(s)] = r.busy_s;
  all[static_cast<std::size_t>(p + s)] = r.seconds;
  all[static_cast<std::size_t>(2 * p + s)] = static_cast<double>(r.peak_in_flight);
  all[static_cast<std::size_t>(3 * p + s)] = r.schedule_begin_s;
  all[static_cast<std::size_t>(4 * p + s)] = r.schedule_end_s;
  all[static_cast<std::size_t>(5 * p + s)] = static_cast<double>(r.activation_peak_bytes);
  all[static_cast<std::size_t>(6 * p + s)] = static_cast<double>(r.activation_first_micro_bytes);
  all[static_cast<std::size_t>(7 * p + s)] = static_cast<double>(r.activation_first_forward_peak_bytes);
  all[static_cast<std::size_t>(8 * p + s)] = static_cast<double>(r.activation_received_bytes);
  for (std::size_t e = 0; e < r.events.size() && 4 * e + 3 < per; ++e) {
    double* at = all.data() + head + per * static_cast<std::size_t>(s) + 4 * e;
    at[0] = r.events[e].kind == 'F' ? 0 : 1;
    at[1] = static_cast<double>(r.events[e].micro);
    at[2] = r.events[e].begin_s;
    at[3] = r.events[e].end_s;
  }
  world.allreduce_native(all.data(), static_cast<std::int64_t>(all.size()), DType::f64, comm::ReduceOp::sum);
  record->busy.emplace_back(all.begin(), all.begin() + p);
  record->seconds.push_back(*std::max_element(all.begin() + p, all.begin() + 2 * p));
  record->peak.resize(static_cast<std::size_t>(p), 0);
  for (int i = 0; i < p; ++i)
    record->peak[static_cast<std::size_t>(i)] = std::max(
        record->peak[static_cast<std::size_t>(i)], static_cast<std::int64_t>(all[static_cast<std::size_t>(2 * p + i)]));
  record->span.push_back(*std::max_element(all.begin() + 4 * p, all.begin() + 5 * p) -
                         *std::min_element(all.begin() + 3 * p, all.begin() + 4 * p));
  record->events.assign(all.begin() + static_cast<std::ptrdiff_t>(head), all.end());
  record->loss = r.loss;
  record->data_parallel_s.push_back(r.data_parallel_s);
  record->activation_peak.resize(static_cast<std::size_t>(p), 0);
  record->activation_micro.resize(static_cast<std::size_t>(p), 0);
  record->activation_forward_peak.resize(static_cast<std::size_t>(p), 0);
  record->activation_received.resize(static_cast<std::size_t>(p), 0);
  for (std::size_t i = 0; i < static_cast<std::size_t>(p); ++i) {
    record->activation_peak[i] =
        std::max(record->activation_peak[i], static_cast<std::int64_t>(all[5 * static_cast<std::size_t>(p) + i]));
    record->activation_micro[i] = static_cast<std::int64_t>(all[6 * static_cast<std::size_t>(p) + i]);
    record->activation_forward_peak[i] = static_cast<std::int64_t>(all[7 * static_cast<std::size_t>(p) + i]);
    record->activation_received[i] = static_cast<std::int64_t>(all[8 * static_cast<std::size_t>(p) + i]);
  }
}

PipelineRow pipeline_row_of(const PipelineArmRecord& record, const PipelineArm& arm, int p, const PipelineConfig& base,
                            int warmup, double base_estimate) {
  PipelineRow row;
  row.config = base;
  row.config.schedule = comm::pipeline_schedule_name(arm.schedule);
  row.config.micro_batches = arm.micro;
  row.repeats = record.seconds;
  row.stats = summarize(record.seconds);
  row.schedule_s = summarize(record.span);
  row.warmup_steps_excluded = warmup;
  double sum_t = 0, max_t = 0;
  for (int s = 0; s < p; ++s) {
    std::vector<double> busy, share;
    for (std::size_t k = 0; k < record.busy.size(); ++k) {
      busy.push_back(record.busy[k][static_cast<std::size_t>(s)]);
      share.push_back(record.busy[k][static_cast<std::size_t>(s)] / record.span[k]);
    }
    row.stage_busy_s.push_back(summarize(busy).median);
    row.stage_utilisation.push_back(summarize(share).median);
    const double t = row.stage_busy_s.back() / static_cast<double>(arm.micro);  // one micro-batch, F + B
    sum_t += t;
    max_t = std::max(max_t, t);
  }
  row.stage_peak_in_flight = record.peak;
  double total = 0;
  for (double u : row.stage_utilisation) total += u;
  row.utilisation = total / p;
  row.bound = comm::pipeline_bound(p, arm.micro);
  const double m = static_cast<double>(arm.micro);
  row.bound_measured_stages = m * sum_t / (p * ((m - 1) * max_t + sum_t));
  row.loss = record.loss;
  // The schedule's in-flight bound k (GPipe: m; 1F1B: min(m, p - s)): k - 1 micro-batches' activations
  // held while the k-th runs its forward at its peak.
  for (int s = 0; s < p; ++s) {
    const std::int64_t bound =
        arm.schedule == PipelineSchedule::gpipe ? arm.micro : std::min<std::int64_t>(arm.micro, p - s);
    row.stage_activation_peak_bytes.push_back(record.activation_peak[static_cast<std::size_t>(s)]);
    row.stage_activation_predicted_bytes.push_back((bound - 1) * record.activation_micro[static_cast<std::size_t>(s)] +
                                                   record.activation_forward_peak[static_cast<std::size_t>(s)]);
  }
  // One micro-batch's activations over every stage, less the copies the stages received, against
  // the memory estimator's for the whole model at the micro-batch (what the forward leaves saved).
  for (int s = 0; s < p; ++s)
    row.measured_saved_bytes +=
        record.activation_micro[static_cast<std::size_t>(s)] - record.activation_received[static_cast<std::size_t>(s)];
  row.estimator_saved_bytes = base_estimate;
  row.last_step_events = record.events;
  if (base.data_parallel > 1) row.data_parallel_s = summarize(record.data_parallel_s).median;
  return row;
}

// Every configuration's last step as Perfetto's JSON: a process per configuration, a thread per stage.
std::string pipeline_trace_json(const std::vector<PipelineArm>& arms, const std::vector<PipelineArmRecord>& records,
                                int p) {
  std::ostringstream out;
  out << "{\"traceEvents\":[";
  bool comma = false;
  for (std::size_t a = 0; a < arms.size(); ++a) {
    const std::string name = fmt::format("{} m={}", comm::pipeline_schedule_name(arms[a].schedule), arms[a].micro);
    out << (comma ? "," : "")
        << fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"{}"}}}})", a, name);
    comma = true;
    const std::size_t per = static_cast<std::size_t>(8 * arms[a].micro);
    for (int s = 0; s < p; ++s) {
      out << fmt::format(R"(,{{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"stage {}"}}}})", a, s,
                         s);
      for (std::size_t e = 0; e + 3 < per; e += 4) {
        const double* at = records[a].events.data() + per * static_cast<std::size_t>(s) + e;
        if (at[3] <= 0) continue;
        out << fmt::format(R"(,{{"ph":"X","name":"{}{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}}})",
                           at[0] == 0 ? "F" : "B", static_cast<std::int64_t>(at[1]), a, s, at[2] * 1e6,
                           (at[3] - at[2]) * 1e6);
      }
    }
  }
  out << "]}\n";
  return out.str();
}

// The cut by measured time: rank 0 times each part (the others wait asleep, off its cores) and
// every rank takes the same cut.
std::vector<int> balanced_starts(comm::MpiCommunicator& world, int stages, Module& model, const Batch& batch) {
  std::vector<double> seconds(model.parts().size(), 0.0);
  if (world.rank() == 0) seconds = comm::time_parts(model, batch, 5);
  world.rendezvous();
  world.broadcast(seconds.data(), seconds.size() * sizeof(double), 0);
  const std::vector<int> starts = comm::balanced_cut(seconds, stages);
  if (world.rank() == 0) {
    std::cout << "bench_pipeline: --cut balanced: each part's forward and backward (ms):";
    const auto parts = model.parts();
    for (std::size_t i = 0; i < seconds.size(); ++i)
      std::cout << fmt::format(" {} {:.2f}", parts[i].name, 1e3 * seconds[i]);
    std::cout << "\n";
  }
  return starts;
}

}  // namespace

namespace {

// Rank 0: a row per configuration (printed, and appended to the ledger), and the trace.
int write_pipeline_rows(const PipelineStudyOptions& o, const std::vector<PipelineArm>& arms,
                        const std::vector<PipelineArmRecord>& records, int p, const std::string& cut, Backend& be,
                        double estimator_saved) {
  PipelineConfig base;
  base.model = model_label(o.model);
  base.stages = p;
  base.data_parallel = o.data_parallel;
  base.dtype = o.dtype;
  base.micro_batch = o.micro_batch;
  base.cut = cut;
  Environment env = mpi_environment(be);
  env.timer = "steady_clock (the slowest stage's step; each stage's forwards and backwards)";
  const std::string run_id = new_run_id();
  const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
  std::cout << "| schedule | m | step ms median (min-max) | schedule ms | utilisation | bound m/(m+p-1) | bound, "
               "measured stages | stage busy ms | in flight | activations MiB, measured / predicted |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t a = 0; a < arms.size(); ++a) {
    PipelineRow row = pipeline_row_of(records[a], arms[a], p, base, o.warmup, estimator_saved);
    row.header.env = env;
    row.header.kind = PipelineRow::kKind;
    row.header.run_id = run_id;
    row.header.status = "ok";
    std::string busy, peak, memory;
    for (std::size_t s = 0; s < row.stage_busy_s.size(); ++s) {
      busy += fmt::format("{}{:.1f}", s ? " / " : "", 1e3 * row.stage_busy_s[s]);
      peak += fmt::format("{}{}", s ? " / " : "", row.stage_peak_in_flight[s]);
      memory += fmt::format("{}{:.2f} / {:.2f}", s ? "; " : "", row.stage_activation_peak_bytes[s] / 1048576.0,
                            row.stage_activation_predicted_bytes[s] / 1048576.0);
    }
    std::cout << fmt::format(
        "| {} | {} | {:.1f} ({:.1f}-{:.1f}) | {:.1f} | {:.1f}% | {:.1f}% | {:.1f}% | {} | {} | {} |\n",
        row.config.schedule, arms[a].micro, 1e3 * row.stats.median, 1e3 * row.stats.min, 1e3 * row.stats.max,
        1e3 * row.schedule_s.median, 100 * row.utilisation, 100 * row.bound, 100 * row.bound_measured_stages, busy,
        peak, memory);
    if (!o.no_ledger) ledger.append(row);
  }
  if (!arms.empty()) {
    const PipelineRow first = pipeline_row_of(records.front(), arms.front(), p, {}, o.warmup, estimator_saved);
    std::cout << fmt::format(
        "one micro-batch's activations over the stages, less the inputs they received: {:.3f} MiB; the memory "
        "estimator's for the whole model at {} samples: {}\n",
        first.measured_saved_bytes / 1048576.0, o.micro_batch,
        estimator_saved > 0 ? fmt::format("{:.3f} MiB ({:+.1f}%)", estimator_saved / 1048576.0,
                                          100 * (first.measured_saved_bytes / estimator_saved - 1))
                            : std::string("none (the model has no memory chain)"));
  }
  if (!o.trace_path.empty()) {
    write_file_atomic(o.trace_path, pipeline_trace_json(arms, records, p));
    std::cout << "trace: " << o.trace_path << " (open in ui.perfetto.dev)\n";
  }
  if (!o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
  return 0;
}

int run_pipeline_sweep(const PipelineStudyOptions& o, comm::MpiCommunicator* world) {
  world->set_timeout(o.timeout);
  // The world as o.data_parallel pipelines (one: the whole world is the pipeline); the figures are
  // the first pipeline's, the others its replicas.
  comm::ParallelGrid grid = comm::make_parallel_grid(*world, o.data_parallel);
  comm::Communicator& pipe = *grid.model;
  const int p = pipe.size();
  const ModelDef& def = find_model(o.model.name);
  const auto schedules = parse_pipeline_schedules(o.schedules);
  const auto counts = parse_micro_counts(o.micro_batches);
  TL_CHECK(o.steps >= 1 && o.warmup >= 0, "bench_pipeline: --steps must be >= 1 and --warmup >= 0");
  if (!o.trace_path.empty() && world->rank() == 0) check_output_file(o.trace_path, "--trace");
  Backend& be = get_backend(o.backend);
  be.set_num_threads(o.threads);
  const ModelInput input = default_input_for(def, o.model.options);
  auto build = [&] {
    Generator gen(7);
    return build_model(def, InitOptions{&gen, DType::f32, &be}, input, o.model.options);
  };
  TL_CHECK(!build()->parts().empty(),
           "--model " + def.name + " does not describe its parts (Module::parts), so it " +
               "cannot be cut into stages (allowed: a model that does: smallcnn, resnet, gpt)");
  std::vector<PipelineArm> arms;
  for (PipelineSchedule s : schedules)
    for (std::int64_t m : counts) arms.push_back({s, m});
  // Each configuration keeps its own model, stage and optimiser; the steps go round-robin.
  std::vector<std::shared_ptr<Module>> models;
  std::vector<std::unique_ptr<comm::PipelineStage>> stages;
  std::vector<std::unique_ptr<SGD>> optimizers;
  std::vector<std::function<Batch()>> batches;
  comm::PipelineOptions po;
  if (o.cut == "balanced") {
    po.starts = balanced_starts(*world, p, *build(),
                                synthetic_batches(input, static_cast<bool>(def.context), o.micro_batch, be, 23)());
  } else if (!o.cut.empty()) {
    po.starts = comm::parse_cut(o.cut, static_cast<int>(build()->parts().size()), p);
  }
  po.data_parallel = o.data_parallel > 1 ? grid.data.get() : nullptr;
  po.dtype = parse_dtype(o.dtype);
  SgdOptions sgd;
  sgd.lr = 0.01;
  for (const PipelineArm& arm : arms) {
    models.push_back(build());
    po.schedule = arm.schedule;
    po.micro_batches = arm.micro;
    stages.push_back(std::make_unique<comm::PipelineStage>(pipe, *models.back(), po));
    optimizers.push_back(std::make_unique<SGD>(stages.back()->parameters(), sgd));
    batches.push_back(synthetic_batches(input, static_cast<bool>(def.context), o.micro_batch, be,
                                        23 + static_cast<std::uint64_t>(grid.data->rank())));
  }
  if (world->rank() == 0) {
    std::cout << "bench_pipeline: " << model_label(o.model) << ", " << p << " stages"
              << (o.data_parallel > 1 ? " x " + std::to_string(o.data_parallel) + " data-parallel pipelines" : "")
              << ", micro-batches of " << o.micro_batch << ", " << o.dtype << ", " << o.backend << " at " << o.threads
              << " thread(s) a rank\n";
  }
  for (int r = 0; r < p; ++r) {
    if (r == world->rank()) std::cout << "  " << stages.front()->describe() << "\n" << std::flush;
    world->barrier();
  }
  std::vector<PipelineArmRecord> records(arms.size());
  for (int step = 0; step < o.warmup + o.steps; ++step)
    for (std::size_t a = 0; a < arms.size(); ++a)
      measure_pipeline_step(pipe, *stages[a], *optimizers[a], batches[a], arms[a].micro,
                            step < o.warmup ? nullptr : &records[a]);
  if (world->rank() != 0) return 0;
  // The memory estimator's saved activations for the whole model at one micro-batch (0: the model
  // does not describe its forward to it).
  const std::vector<ChainOp> chain =
      models.front()->memory_chain(ChainShape{o.micro_batch, parse_dtype(o.dtype), false}, be);
  const double estimator_saved = chain.empty() ? 0.0 : estimate_chain(chain).saved;
  return write_pipeline_rows(o, arms, records, p, stages.front()->describe(), be, estimator_saved);
}

}  // namespace

int run_pipeline_study(const PipelineStudyOptions& options) {
  auto world = comm::MpiCommunicator::world();
  try {
    return run_pipeline_sweep(options, world.get());
  } catch (const Error& e) {
    world->abort(std::string("bench_pipeline: error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
