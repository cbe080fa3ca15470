// bench_parallelism: seed 004's doors side by side at one global batch
// (studies/parallelism/parallelism_study.h).
#include "studies/parallelism/parallelism_study.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>

#include "backends/registry.h"
#include "bench/measure/comm_bench.h"
#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "comm/cost_model.h"
#include "comm/ddp.h"
#include "comm/mpi_communicator.h"
#include "comm/pipeline.h"
#include "comm/tensor_parallel.h"
#include "engine/instrument/memory_usage.h"
#include "engine/nn/model_registry.h"
#include "engine/train/step.h"
#include "studies/parallelism/rows.h"

namespace trainlab::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kDoors = "one, data, zero1, zero2, zero3, pipeline, tensor, data-pipeline, data-tensor";

// What one step of a door left on this rank: its loss, and the bytes this rank sent: point to point
// as sent, a collective over p ranks as a bandwidth-optimal algorithm (the ring) sends it per rank,
// 2 (p-1)/p of the buffer for an all-reduce, (p-1)/p for a reduce-scatter or an all-gather (what
// bus bandwidth counts), so that DDP's all-reduce and ZeRO-1's two halves weigh the same.
struct StepOut {
  double loss = 0;
  std::int64_t bytes = 0;
  // Its communication: seed 001's prediction for what it sent (Wire), and what the step waited
  // for (-1: not timed apart).
  double predicted_s = 0, waited_s = -1;
};

std::int64_t allreduce_bytes(std::int64_t buffer, int p) { return buffer * 2 * (p - 1) / std::max(p, 1); }
std::int64_t half_bytes(std::int64_t buffer, int p) {  // a reduce-scatter or an all-gather
  return buffer * (p - 1) / std::max(p, 1);
}

// Seed 001's alpha-beta model of this run's wire (comm/cost_model.h): alpha and B fitted to the
// ring all-reduce timed at four sizes at the start of the run, every collective and send then
// priced as if it had the wire to itself (steps x alpha + the bytes it moves / B).
struct Wire {
  comm::AllreduceFit fit;
  double time(double steps, double moved_bytes) const { return steps * fit.alpha_s + moved_bytes / fit.bandwidth_Bps; }
  double allreduce(int ranks, std::int64_t buffer, AllreduceAlgorithm algorithm = AllreduceAlgorithm::ring) const {
    return comm::allreduce_cost(algorithm, ranks).time_s(fit.alpha_s, fit.bandwidth_Bps, static_cast<double>(buffer));
  }
  // A reduce-scatter or an all-gather (the ring's half), `count` of them over `buffer` bytes in all.
  double half(int ranks, std::int64_t buffer, int count = 1) const {
    return time(static_cast<double>(count * (ranks - 1)), static_cast<double>(half_bytes(buffer, ranks)));
  }
};

// One way to divide the step: what it holds, and one step of it on every rank (a collective), which
// returns this rank's seconds (0 on a rank that only waited) and fills `out`.
struct Door {
  std::string name, detail;
  std::function<double(StepOut& out)> step;
  std::vector<double> seconds;
  double loss = 0;
  // The persistent state this rank holds between steps (its parameters, their gradients, the
  // optimiser's state), bytes; asked once, after the last step.
  std::function<std::int64_t()> held;
  std::int64_t bytes = 0;           // the last measured step's, this rank
  std::int64_t transient_peak = 0;  // the most a measured step allocated above what was live before it, this rank
  double predicted_s = 0;           // the last measured step's predicted communication, this rank (StepOut)
  std::vector<double> waited;       // each measured step's wait, this rank (none: not timed apart)
};

struct DoorSetup {
  comm::MpiCommunicator& world;
  Backend& be;
  std::function<std::shared_ptr<Module>()> build;
  ModelInput input;
  bool tokens = false;
  const ParallelismStudyOptions& o;
  SgdOptions sgd;
  std::shared_ptr<const JobCpus> job_cpus;  // every CPU the job's ranks may use
  std::shared_ptr<const Wire> wire;         // fitted before the doors are made
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double mebibytes(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// The largest model (in parameters) whose state, at this door's bytes per parameter, fits in `gib`.
std::string fits_in(double gib, std::int64_t state_bytes, std::int64_t parameters) {
  if (state_bytes <= 0 || parameters <= 0) return "-";
  const double fit = gib * 1024 * 1024 * 1024 / (static_cast<double>(state_bytes) / static_cast<double>(parameters));
  return fit >= 1e9 ? fmt::format("{:.2f}B", fit / 1e9) : fmt::format("{:.0f}M", fit / 1e6);
}

// Bytes of `params`, of their gradients (`gradient_bytes` when the caller knows better: DDP's
// buckets and shards; -1: every defined .grad) and of the optimiser's state.
std::int64_t state_bytes(const NamedTensors& params, const Optimizer& optimizer, std::int64_t gradient_bytes = -1) {
  std::int64_t bytes = 0, grads = 0;
  for (const auto& [name, p] : params) {
    bytes += static_cast<std::int64_t>(p.nbytes());
    if (p.grad().defined()) grads += static_cast<std::int64_t>(p.grad().nbytes());
  }
  for (const auto& [key, t] : optimizer.state_dict().tensors) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes + (gradient_bytes >= 0 ? gradient_bytes : grads);
}

Door one_process_door(const DoorSetup& s, int threads) {
  auto model = s.build();
  auto sgd = std::make_shared<SGD>(model->named_parameters(), s.sgd);
  const Batch batch = synthetic_batches(s.input, s.tokens, s.o.batch, s.be, 41)();
  comm::MpiCommunicator* world = &s.world;
  Backend* be = &s.be;
  const int rank_threads = s.o.threads;
  auto cpus = s.job_cpus;
  Door door{fmt::format("one process, {} thread{}", threads, threads == 1 ? "" : "s"),
            "the unsplit model on rank 0, free to run on every core of the job, the other ranks asleep",
            [=](StepOut& out) {
              double seconds = 0;
              if (world->rank() == 0) {
                cpus->on_every_cpu([&] {  // the same cores as the split doors, every one of them
                  be->set_num_threads(threads);
                  const auto start = Clock::now();
                  out.loss = plain_train_step(*model, *sgd, batch);
                  seconds = seconds_since(start);
                  be->set_num_threads(rank_threads);
                });
              }
              world->rendezvous();
              return seconds;
            },
            {},
            0,
            {},
            0,
            0,
            0,
            {}};
  door.held = [model, sgd] { return state_bytes(model->named_parameters(), *sgd); };
  return door;
}

// DDP (zero 0), or with its optimiser state (zero 1), gradients (zero 2) and parameters (zero 3)
// sharded over the ranks.
Door data_door(const DoorSetup& s, int zero) {
  const int p = s.world.size();
  const std::string name = zero == 0 ? "data" : fmt::format("zero{}", zero);
  TL_CHECK(s.o.batch % p == 0, "the " + name + " door: batch " + std::to_string(s.o.batch) + " does not divide over " +
                                   std::to_string(p) + " ranks (allowed: a multiple of " + std::to_string(p) + ")");
  auto model = s.build();
  comm::DdpOptions options;  // DDP's defaults: 25 MiB buckets, the library's all-reduce, overlapped with backward
  options.zero = zero;
  auto ddp = std::make_shared<comm::Ddp>(s.world, options);
  if (zero == 3) {  // gathered part by part, as the trainer does (engine/train/run.cpp)
    std::vector<std::vector<std::string>> units;
    for (const ModelPart& part : model->parts()) units.push_back(part.parameters);
    ddp->set_parameter_units(units);
  }
  ddp->attach(model->named_parameters());
  auto sgd = std::make_shared<SGD>(ddp->optimizer_parameters(), s.sgd);  // the pieces this rank updates
  auto runner = std::make_shared<StepRunner>(s.be, *model, *sgd, StepOptions{}, nullptr, ddp.get());
  const Batch batch = synthetic_batches(s.input, s.tokens, s.o.batch / p, s.be, 43 + s.world.rank())();
  const char* sharded = zero == 0   ? ""
                        : zero == 1 ? ", ZeRO-1 (optimiser state sharded; the parameters all-gathered after the step)"
                        : zero == 2 ? ", ZeRO-2 (optimiser state and gradients sharded; the parameters all-gathered "
                                      "after the step)"
                                    : ", ZeRO-3 (optimiser state, gradients and parameters sharded; each part's "
                                      "parameters all-gathered before its forward and its backward)";
  Door door{name,
            fmt::format("DDP over {} ranks, {} samples each, {} all-reduce, {} MiB buckets overlapped with backward{}",
                        p, s.o.batch / p, comm::algorithm_name(options.allreduce), options.bucket_cap_mb, sharded),
            [model, sgd, ddp, runner, batch, p, zero, wire = s.wire](StepOut& out) {
              const auto start = Clock::now();
              const StepResult r = runner->step([&batch] { return batch; });
              const double seconds = seconds_since(start);
              out.loss = r.loss;
              std::int64_t reduced = 0;
              for (std::int64_t bytes : r.ddp.bucket_bytes) {
                reduced += bytes;
                out.predicted_s += zero == 0 ? wire->allreduce(p, bytes) : wire->half(p, bytes);
              }
              // DDP all-reduces; ZeRO reduce-scatters, then all-gathers the parameters (ZeRO-3 twice a part).
              out.bytes = zero == 0 ? allreduce_bytes(reduced, p) : half_bytes(reduced + r.ddp.gather_bytes, p);
              if (r.ddp.gathers > 0) out.predicted_s += wire->half(p, r.ddp.gather_bytes, r.ddp.gathers);
              // Waited: the reductions still running after backward, ZeRO's gathers after the update
              // and (ZeRO-3) inside forward and backward.
              out.waited_s = r.phases.comm_s + r.ddp.gather_wait_s;
              return seconds;
            },
            {},
            0,
            {},
            0,
            0,
            0,
            {}};
  // The optimiser's parameters are pieces of the model's under ZeRO: the parameters this rank holds
  // (ZeRO-3: its shards), the pieces' state.
  door.held = [sgd, ddp] { return state_bytes({}, *sgd, ddp->gradient_bytes_held()) + ddp->parameter_bytes_held(); };
  return door;
}

// A pipeline stage's door: each step runs the stage's schedule over the micro-batches. The stage
// refers to its model (and, with replicas, to its grid's communicators): the door keeps them alive.
Door stage_door(std::string name, std::string detail, std::shared_ptr<const void> model,
                std::shared_ptr<const void> grid, std::shared_ptr<comm::PipelineStage> stage, std::shared_ptr<SGD> sgd,
                std::shared_ptr<std::vector<Batch>> micro, std::shared_ptr<const Wire> wire) {
  Door door{std::move(name),
            std::move(detail),
            [model, grid, stage, sgd, micro, wire](StepOut& out) {
              std::size_t next = 0;
              const auto start = Clock::now();
              const comm::PipelineStepResult r = stage->step([&] { return (*micro)[next++ % micro->size()]; }, *sgd);
              const double seconds = seconds_since(start);
              out.loss = r.loss;
              out.bytes = r.sent_bytes + allreduce_bytes(r.averaged_bytes, 2);  // the replicas: 2
              // A message per micro-batch: activations forward (but from the last stage), gradients
              // back (but from the first).
              const auto micro_batches = std::count_if(r.events.begin(), r.events.end(),
                                                       [](const comm::PipelineEvent& e) { return e.kind == 'F'; });
              const int messages = static_cast<int>(micro_batches) *
                                   ((stage->stage() + 1 < stage->stages() ? 1 : 0) + (stage->stage() > 0 ? 1 : 0));
              out.predicted_s = wire->time(messages, static_cast<double>(r.sent_bytes)) +
                                (r.averaged_bytes > 0 ? wire->allreduce(2, r.averaged_bytes) : 0.0);
              return seconds;
            },
            {},
            0,
            {},
            0,
            0,
            0,
            {}};
  door.held = [stage, sgd] { return state_bytes(stage->parameters(), *sgd); };
  return door;
}

Door pipeline_door(const DoorSetup& s) {
  const std::int64_t m = s.o.micro_batches;
  TL_CHECK(m >= 1 && s.o.batch % m == 0, "the pipeline door: batch " + std::to_string(s.o.batch) +
                                             " does not divide into " + std::to_string(m) +
                                             " micro-batches (allowed: a --micro-batches that divides it)");
  auto model = s.build();
  TL_CHECK(!model->parts().empty(), "the pipeline door: --model " + s.o.model.name +
                                        " does not describe its parts, so it cannot be cut into stages (allowed: "
                                        "smallcnn, resnet, gpt; or leave pipeline out of --doors)");
  comm::PipelineOptions po;
  po.schedule = comm::PipelineSchedule::one_f_one_b;
  po.micro_batches = m;
  auto stage = std::make_shared<comm::PipelineStage>(s.world, *model, po);
  auto sgd = std::make_shared<SGD>(stage->parameters(), s.sgd);
  auto micro = std::make_shared<std::vector<Batch>>();
  auto source = synthetic_batches(s.input, s.tokens, s.o.batch / m, s.be, 47);
  for (std::int64_t i = 0; i < m; ++i) micro->push_back(source());
  return stage_door("pipeline",
                    fmt::format("1F1B over {} stages ({}), {} micro-batches of {}", s.world.size(), stage->describe(),
                                m, s.o.batch / m),
                    model, nullptr, stage, sgd, micro, s.wire);
}

Door tensor_door(const DoorSetup& s) {
  auto model = s.build();
  auto tp = std::make_shared<comm::TensorParallel>(s.world);
  model->split_tensor_parallel(tp->group());
  auto sgd = std::make_shared<SGD>(model->named_parameters(), s.sgd);
  const Batch batch = synthetic_batches(s.input, s.tokens, s.o.batch, s.be, 41)();
  Door door{
      "tensor",
      fmt::format("Megatron's split over {} ranks, the whole batch on each, sums by auto's all-reduce", s.world.size()),
      [model, tp, sgd, batch, p = s.world.size(), wire = s.wire](StepOut& out) {
        const auto start = Clock::now();
        out.loss = plain_train_step(*model, *sgd, batch);
        const double seconds = seconds_since(start);
        out.waited_s = 0;  // every all-reduce on the critical path
        for (const comm::TensorParallelCall& call : tp->take_calls()) {
          out.bytes += allreduce_bytes(call.bytes, p);
          out.predicted_s += wire->allreduce(p, call.bytes, call.algorithm);
          out.waited_s += call.seconds;
        }
        return seconds;
      },
      {},
      0,
      {},
      0,
      0,
      0,
      {}};
  door.held = [model, sgd] { return state_bytes(model->named_parameters(), *sgd); };
  return door;
}

// The largest of every rank's `seconds` (on every rank).
double slowest_rank(comm::MpiCommunicator& world, double seconds) {
  std::vector<double> all(static_cast<std::size_t>(world.size()), 0.0);
  all[static_cast<std::size_t>(world.rank())] = seconds;
  world.allreduce_native(all.data(), world.size(), DType::f64, comm::ReduceOp::sum);
  return *std::max_element(all.begin(), all.end());
}

std::int64_t largest_over_ranks(comm::MpiCommunicator& world, std::int64_t value) {
  return static_cast<std::int64_t>(slowest_rank(world, static_cast<double>(value)));
}

// A door's bytes per rank (the largest rank's): its state between steps, its peak, what a step sent;
// and its communication (the largest rank's seconds, StepOut).
struct DoorBytes {
  std::int64_t held = 0, peak = 0, sent = 0;
  double predicted_s = 0, waited_s = -1;
};

// The wire's alpha and B (Wire): the ring all-reduce at 4K, 64K, 1M and 8M, 2 warm-up and 7 timed
// calls each, the slowest rank's median.
std::shared_ptr<const Wire> fit_wire(comm::MpiCommunicator& world) {
  auto wire = std::make_shared<Wire>();
  const comm::AllreduceCost cost = comm::allreduce_cost(AllreduceAlgorithm::ring, world.size());
  std::vector<comm::AllreducePoint> points;
  for (const std::int64_t bytes :
       {std::int64_t{4} << 10, std::int64_t{64} << 10, std::int64_t{1} << 20, std::int64_t{8} << 20}) {
    std::vector<float> buffer(static_cast<std::size_t>(bytes / 4), 1.0f);
    std::vector<double> seconds;
    for (int i = 0; i < 9; ++i) {
      world.barrier();
      const auto start = Clock::now();
      comm::allreduce(world, buffer.data(), bytes / 4, DType::f32, comm::ReduceOp::sum, AllreduceAlgorithm::ring);
      const double slowest = slowest_rank(world, seconds_since(start));
      if (i >= 2) seconds.push_back(slowest);
    }
    points.push_back({cost, static_cast<double>(bytes), summarize(seconds).median});
  }
  wire->fit = comm::fit_allreduce(points);
  return wire;
}

// Two replicas of a model split over half the ranks each (the world must be even): the grid, and the
// samples per replica.
std::shared_ptr<comm::ParallelGrid> two_replicas(const DoorSetup& s, const std::string& door) {
  const int p = s.world.size();
  TL_CHECK(p % 2 == 0 && p >= 4, "the " + door + " door: needs an even world of at least 4 ranks (2 replicas of " +
                                     "at least 2), got " + std::to_string(p));
  TL_CHECK(s.o.batch % 2 == 0, "the " + door + " door: batch " + std::to_string(s.o.batch) +
                                   " does not divide over 2 replicas (allowed: an even batch)");
  return std::make_shared<comm::ParallelGrid>(comm::make_parallel_grid(s.world, 2));
}

Door data_pipeline_door(const DoorSetup& s) {
  auto grid = two_replicas(s, "data x pipeline");
  const std::int64_t m = s.o.micro_batches, replica_batch = s.o.batch / 2;
  TL_CHECK(replica_batch % m == 0, "the data x pipeline door: a replica's " + std::to_string(replica_batch) +
                                       " samples do not divide into " + std::to_string(m) + " micro-batches");
  auto model = s.build();
  comm::PipelineOptions po;
  po.micro_batches = m;
  po.data_parallel = grid->data.get();
  auto stage = std::make_shared<comm::PipelineStage>(*grid->model, *model, po);
  auto sgd = std::make_shared<SGD>(stage->parameters(), s.sgd);
  auto micro = std::make_shared<std::vector<Batch>>();
  auto source = synthetic_batches(s.input, s.tokens, replica_batch / m, s.be, 53 + grid->data->rank());
  for (std::int64_t i = 0; i < m; ++i) micro->push_back(source());
  return stage_door("data x pipeline",
                    fmt::format("2 replicas of a 1F1B pipeline of {} stages, {} micro-batches of {} each, stage "
                                "gradients averaged over the replicas",
                                grid->model_ranks, m, replica_batch / m),
                    model, grid, stage, sgd, micro, s.wire);
}

Door data_tensor_door(const DoorSetup& s) {
  auto grid = two_replicas(s, "data x tensor");
  auto model = s.build();
  auto tp = std::make_shared<comm::TensorParallel>(*grid->model);
  model->split_tensor_parallel(tp->group());
  auto sgd = std::make_shared<SGD>(model->named_parameters(), s.sgd);
  const Batch batch = synthetic_batches(s.input, s.tokens, s.o.batch / 2, s.be, 59 + grid->data->rank())();
  Door door{"data x tensor",
            fmt::format("2 replicas of Megatron's split over {} ranks, {} samples each, gradients averaged over the "
                        "replicas",
                        grid->model_ranks, s.o.batch / 2),
            [grid, model, tp, sgd, batch, p = grid->model_ranks, wire = s.wire](StepOut& out) {
              const auto start = Clock::now();
              sgd->zero_grad(true);
              const Tensor l = cross_entropy(model->forward(batch.inputs), batch.labels.view({-1}));
              l.backward();
              const auto averaging = Clock::now();
              comm::average_gradients(*grid->data, model->named_parameters());
              out.waited_s = seconds_since(averaging);
              sgd->step();
              out.loss = l.item();
              const double seconds = seconds_since(start);
              for (const comm::TensorParallelCall& call : tp->take_calls()) {
                out.bytes += allreduce_bytes(call.bytes, p);
                out.predicted_s += wire->allreduce(p, call.bytes, call.algorithm);
                out.waited_s += call.seconds;
              }
              std::int64_t averaged = 0;  // one all-reduce of every gradient over the 2 replicas
              for (const auto& [name, t] : model->named_parameters()) averaged += static_cast<std::int64_t>(t.nbytes());
              out.bytes += allreduce_bytes(averaged, 2);
              out.predicted_s +=
                  wire->allreduce(2, averaged, comm::choose_algorithm(AllreduceAlgorithm::automatic, averaged, {}));
              return seconds;
            },
            {},
            0,
            {},
            0,
            0,
            0,
            {}};
  door.held = [model, sgd] { return state_bytes(model->named_parameters(), *sgd); };
  return door;
}

std::vector<Door> make_doors(const DoorSetup& s) {
  std::vector<Door> doors;
  std::stringstream list(s.o.doors);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name == "one") {
      doors.push_back(one_process_door(s, 1));
      if (s.world.size() * s.o.threads > 1) doors.push_back(one_process_door(s, s.world.size() * s.o.threads));
    } else if (name == "data") {  // twice: the calibration pair (identical configurations), the noise floor
      doors.push_back(data_door(s, 0));
      doors.push_back(data_door(s, 0));
      doors.back().name = "data again";
    } else if (name == "zero1" || name == "zero2" || name == "zero3") {
      doors.push_back(data_door(s, name[4] - '0'));
    } else if (name == "pipeline") {
      doors.push_back(pipeline_door(s));
    } else if (name == "tensor") {
      doors.push_back(tensor_door(s));
    } else if (name == "data-pipeline") {
      doors.push_back(data_pipeline_door(s));
    } else if (name == "data-tensor") {
      doors.push_back(data_tensor_door(s));
    } else {
      throw Error("--doors: '" + name + "' is not a door (allowed: " + std::string(kDoors) + ", comma-separated)");
    }
  }
  TL_CHECK(!doors.empty(), "--doors is empty (allowed: " + std::string(kDoors) + ", comma-separated)");
  return doors;
}

// The samples/s of each of a door's measured steps.
std::vector<double> door_samples(const Door& d, std::int64_t batch) {
  std::vector<double> samples;
  for (double seconds : d.seconds) samples.push_back(static_cast<double>(batch) / seconds);
  return samples;
}

// Each door against DDP ("data"), in units of the noise floor that DDP's calibration pair ("data
// again") measured; nothing without them.
void compare_with_data(const ParallelismStudyOptions& o, const std::vector<Door>& doors,
                       std::vector<ParallelismRow>& rows) {
  const auto find = [&](const char* name) {
    return std::find_if(doors.begin(), doors.end(), [name](const Door& d) { return d.name == name; });
  };
  const auto data = find("data"), again = find("data again");
  if (data == doors.end() || again == doors.end()) return;
  const Calibration calibration = calibrate(door_samples(*data, o.batch), door_samples(*again, o.batch));
  const bool valid = calibration.valid && o.steps >= 2;
  const Summary control = summarize(door_samples(*data, o.batch));
  for (std::size_t i = 0; i < doors.size(); ++i) {
    ParallelismRow& row = rows[i];
    row.noise_floor_percent = calibration.noise_floor_percent;
    if (doors[i].name == "data") {
      row.against_data = "control";
    } else if (doors[i].name == "data again") {
      row.against_data = "calibration pair";
    } else {
      const Summary s = summarize(door_samples(doors[i], o.batch));
      const Verdict v = verdict(s, control, valid ? std::optional(calibration) : std::nullopt);
      row.against_data = effect_words(effect_percent(s, control), calibration, valid ? v : Verdict::no_conclusion);
    }
  }
}

// Rank 0: a row per door, printed and appended.
int write_parallelism_rows(const ParallelismStudyOptions& o, std::vector<Door>& doors,
                           const std::vector<DoorBytes>& bytes, int ranks, Backend& be, std::int64_t parameters,
                           const Wire& wire) {
  std::vector<ParallelismRow> rows;
  double one = 0, best = 0;
  for (std::size_t i = 0; i < doors.size(); ++i) {
    Door& d = doors[i];
    ParallelismRow row;
    row.state_bytes_per_rank = bytes[i].held;
    row.peak_bytes_per_rank = bytes[i].peak;
    row.bytes_per_step = bytes[i].sent;
    row.predicted_comm_s = bytes[i].predicted_s;
    if (bytes[i].waited_s >= 0) row.waited_comm_s = bytes[i].waited_s;
    row.parameters = parameters;
    row.config = {model_label(o.model), ranks, o.batch, o.threads, d.name, d.detail};
    row.repeats = d.seconds;
    row.stats = summarize(d.seconds);
    row.warmup_steps_excluded = o.warmup;
    row.samples_per_s = static_cast<double>(o.batch) / row.stats.median;
    row.loss = d.loss;
    if (d.name.rfind("one process", 0) == 0 && (one == 0 || row.stats.median < one)) one = row.stats.median;
    if (best == 0 || row.stats.median < best) best = row.stats.median;
    rows.push_back(row);
  }
  compare_with_data(o, doors, rows);
  Environment env = mpi_environment(be);
  env.timer = "steady_clock (each door's step, the slowest rank's; the doors round-robin)";
  const std::string run_id = new_run_id();
  const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
  std::cout << fmt::format(
      "| door | how | step ms median (min-max) | samples/s | against one process | against data | state MiB per "
      "rank | peak MiB per rank | MiB sent per step per rank | comm ms per step: predicted, waited | parameters "
      "whose state fits in {:g} GiB |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n",
      o.memory_gib);
  for (ParallelismRow& row : rows) {
    row.speedup = one > 0 ? one / row.stats.median : 0;
    row.fastest = row.stats.median == best;
    row.header.env = env;
    row.header.kind = ParallelismRow::kKind;
    row.header.run_id = run_id;
    row.header.status = "ok";
    std::cout << fmt::format(
        "| {}{} | {} | {:.2f} ({:.2f}-{:.2f}) | {:.0f} | {:.2f}x | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f}, {} | "
        "{} |\n",
        row.config.door, row.fastest ? " (fastest)" : "", row.config.detail, 1e3 * row.stats.median,
        1e3 * row.stats.min, 1e3 * row.stats.max, row.samples_per_s, row.speedup, row.against_data.value_or("-"),
        mebibytes(*row.state_bytes_per_rank), mebibytes(*row.peak_bytes_per_rank), mebibytes(*row.bytes_per_step),
        1e3 * *row.predicted_comm_s, row.waited_comm_s ? fmt::format("{:.2f}", 1e3 * *row.waited_comm_s) : "-",
        fits_in(o.memory_gib, *row.state_bytes_per_rank, parameters));
    if (!o.no_ledger) ledger.append(row);
  }
  if (!rows.empty() && rows.front().noise_floor_percent)
    std::cout << fmt::format("noise floor: {:.1f}% between data and data again (the calibration pair)\n",
                             *rows.front().noise_floor_percent);
  std::cout << "peak: the state held between steps and the most a step allocated on top (activations, "
               "workspaces, gradients in flight, gathered parameters); sent: point to point as sent, a collective "
               "over p ranks as the ring sends it (2 (p-1)/p of the buffer for an all-reduce, (p-1)/p for each "
               "half); fits: the budget over the state's bytes per parameter of "
               "the model (activations excluded: they scale with the batch, not the parameters)\n";
  std::cout << fmt::format(
      "comm: predicted is seed 001's alpha-beta model (alpha {:.1f} us, B {:.2f} GB/s, fitted to this run's ring "
      "all-reduce at 4K-8M) for what the step sent, each collective and send as if alone on the wire; waited is "
      "the median step's wait (DDP: the reductions still running after backward and ZeRO's gathers; tensor: its "
      "all-reduces, on the critical path; -: not timed apart, a pipeline's waits are its bubble), the waits for a "
      "slower rank included. Predicted above waited is communication hidden under compute\n",
      1e6 * wire.fit.alpha_s, 1e-9 * wire.fit.bandwidth_Bps);
  if (!o.no_ledger) std::cout << "ledger: " << ledger.path() << " (run " << run_id << ")\n";
  return 0;
}

int run_parallelism(const ParallelismStudyOptions& o, comm::MpiCommunicator* world) {
  world->set_timeout(o.timeout);
  TL_CHECK(world->size() >= 2, "needs at least 2 ranks, got " + std::to_string(world->size()) +
                                   " (launch it as scripts/mpirun -np 2 or more)");
  TL_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps must be >= 1 and --warmup >= 0");
  TL_CHECK(o.batch >= 1, "--batch must be >= 1, got " + std::to_string(o.batch));
  const ModelDef& def = find_model(o.model.name);
  Backend& be = get_backend(o.backend);
  be.set_num_threads(o.threads);
  DoorSetup setup{*world, be,      nullptr, default_input_for(def, o.model.options), static_cast<bool>(def.context), o,
                  {},     nullptr, nullptr};
  setup.build = [&def, &be, &o, &setup] {
    Generator gen(7);
    auto model = build_model(def, InitOptions{&gen, DType::f32, &be}, setup.input, o.model.options);
    model->set_fused(o.fuse);
    return model;
  };
  setup.sgd.lr = 0.01;
  setup.sgd.momentum = 0.9;  // optimiser state for ZeRO to shard (seed 003's accounting has it)
  setup.job_cpus = std::make_shared<const JobCpus>(*world);
  setup.wire = fit_wire(*world);
  std::vector<Door> doors = make_doors(setup);
  if (world->rank() == 0)
    std::cout << "bench_parallelism: " << model_label(o.model) << ", global batch " << o.batch << ", " << world->size()
              << " ranks, " << o.backend << " at " << o.threads << " thread(s) a rank" << (o.fuse ? ", fused" : "")
              << "; the doors round-robin, " << o.warmup << " warm-up and " << o.steps << " measured steps each\n"
              << std::flush;
  const DeviceType device = be.device_type();
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    for (Door& d : doors) {
      world->barrier();
      StepOut out;
      // Every door's model lives beside the others: a step's own peak is what it allocated above
      // what was live before it.
      const std::int64_t live = memory_usage(device).total_live;
      reset_memory_peaks(device);
      const double seconds = slowest_rank(*world, d.step(out));
      if (step >= o.warmup) {
        d.seconds.push_back(seconds);
        d.transient_peak = std::max(d.transient_peak, memory_usage(device).total_peak - live);
        d.bytes = out.bytes;
        d.predicted_s = out.predicted_s;
        if (out.waited_s >= 0) d.waited.push_back(out.waited_s);
      }
      d.loss = out.loss;
    }
  }
  // Per door, the largest rank's: the state it holds between steps, its peak (that state and the
  // step's own allocations on top) and the bytes it sent in a step (collectives every rank calls).
  std::vector<DoorBytes> bytes;
  for (Door& d : doors) {
    DoorBytes b;
    b.held = largest_over_ranks(*world, d.held());
    b.peak = largest_over_ranks(*world, d.held() + d.transient_peak);
    b.sent = largest_over_ranks(*world, d.bytes);
    b.predicted_s = slowest_rank(*world, d.predicted_s);
    b.waited_s = slowest_rank(*world, d.waited.empty() ? -1.0 : summarize(d.waited).median);
    bytes.push_back(b);
  }
  if (world->rank() != 0) return 0;
  return write_parallelism_rows(o, doors, bytes, world->size(), be, setup.build()->num_parameters(), *setup.wire);
}

}  // namespace

int run_parallelism_study(const ParallelismStudyOptions& options) {
  auto world = comm::MpiCommunicator::world();
  try {
    return run_parallelism(options, world.get());
  } catch (const Error& e) {
    world->abort(std::string("bench_parallelism: error: ") + e.what(), 2);
  }
}

}  // namespace trainlab::bench
