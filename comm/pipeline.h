// Pipeline parallelism, seed 004's first door: the model cut between its parts (Module::parts) into
// one stage per rank, each batch split into micro-batches whose activations travel forward to the
// next stage and whose gradients travel back, through the communicator's point-to-point calls.
// Two schedules (seed 003):
//   gpipe  every micro-batch's forward, then every backward (Huang et al. 2019): a stage holds the
//          activations of all m micro-batches at once.
//   1f1b   PipeDream-flush (Narayanan et al. 2021): stage s runs p - s - 1 forwards to fill the
//          pipe, then alternates one forward and one backward, then drains: at most p - s
//          micro-batches in flight.
// Both have the same bubble, (p - 1) / (m + p - 1) of a step for balanced stages. The step is the
// unpipelined step with `accumulate` = m (StepRunner): each micro-batch's loss scaled by 1/m, the
// backwards in micro-batch order, so every stage's gradients are summed in the same order as there
// and equal bit for bit; a weight two stages share (the GPT's tied embedding and head) gets the sum
// of both stages' gradients, added in stage order (the reduction order differs from the unpipelined
// step's there: equal within rounding). Then each stage's optimiser updates its own parameters.
//
//   PipelineStage stage(comm, model, {PipelineSchedule::one_f_one_b, 8, {}});
//   SGD sgd(stage.parameters(), sgd_options);
//   PipelineStepResult r = stage.step([&] { return loader.next(); }, sgd);
//
// Every rank builds the whole model from the same seed (the same initial weights everywhere) and
// reads every batch (the first stage uses the inputs, the last the labels); a stage touches only
// its parts' parameters. f32 or bf16 (autocast; `dtype`).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/data/loader.h"
#include "engine/nn/module.h"
#include "engine/optim/optim.h"

namespace trainlab::comm {

enum class PipelineSchedule { gpipe, one_f_one_b };
PipelineSchedule parse_pipeline_schedule(const std::string& name);  // "gpipe", "1f1b"; else Error naming them
const char* pipeline_schedule_name(PipelineSchedule schedule);

// One of a stage's operations: the forward ('F') or backward ('B') of a micro-batch.
struct PipelineOp {
  char kind;
  std::int64_t micro;
  bool operator==(const PipelineOp&) const = default;
};
// Stage `stage`'s operations in order, for `stages` stages and `micro_batches` micro-batches.
std::vector<PipelineOp> pipeline_order(PipelineSchedule schedule, int stage, int stages, std::int64_t micro_batches);
// The fill-and-drain bound on a balanced pipeline's utilisation: m / (m + p - 1).
double pipeline_bound(int stages, std::int64_t micro_batches);

// Where each stage starts in the model's parts: `starts` (starts[0] == 0, increasing, each < parts).
// even_cut spreads them as evenly as the counts allow (the earlier stages take the extra part);
// parse_cut reads "0,2,3"; both throw Error naming the value and what is allowed.
std::vector<int> even_cut(int parts, int stages);
std::vector<int> parse_cut(const std::string& text, int parts, int stages);
// The cut by time (seed 003: balance stages by measured time, not by layer count): contiguous parts
// whose slowest stage is the fastest possible, from each part's seconds (ties: the earlier cut).
std::vector<int> balanced_cut(const std::vector<double>& part_seconds, int stages);
// Each part's forward and backward seconds on `batch`, measured here: the median of `repeats` runs
// after one warm-up, the parts in order, each on the output of the one before (the last with the
// loss). What balanced_cut takes.
std::vector<double> time_parts(Module& model, const Batch& batch, int repeats);

struct PipelineOptions {
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  std::int64_t micro_batches = 4;
  std::vector<int> starts;  // empty: even_cut
  // The compute dtype: f32, or bf16 (autocast over the f32 master weights, as StepRunner's dtype
  // bf16; the activations and their gradients cross the stages in the dtype the parts give them).
  DType dtype = DType::f32;
  // Data parallel x pipeline: the ranks holding this stage in the other pipelines (ParallelGrid's
  // `data`, comm/communicator.h); each replica reads its own batches, and before the update every gradient of the stage
  // is averaged over them (one flat all-reduce, `auto` by size). Null: one pipeline.
  Communicator* data_parallel = nullptr;
};

// A forward or backward as the stage ran it: seconds from the step's start.
struct PipelineEvent {
  char kind;
  std::int64_t micro;
  double begin_s, end_s;
};

struct PipelineStepResult {
  double loss = 0;     // the step's mean loss over its micro-batches (every rank: sent by the last stage; with data
                       // parallelism, the mean over the replicas)
  double seconds = 0;  // the whole step on this stage, optimiser included
  double busy_s = 0;   // this stage's forwards and backwards (the rest: waiting, sending, the update)
  // The schedule's span on this stage: from its batches loaded to its last send complete, before
  // the shared weights' sum and the update (what the fill-and-drain bound describes).
  double schedule_begin_s = 0, schedule_end_s = 0;
  double data_parallel_s = 0;  // the gradients' average over the data-parallel replicas (0: none)
  std::vector<PipelineEvent> events;
  std::int64_t peak_in_flight = 0;  // micro-batches whose activations the stage held at once
  // Activation bytes (engine/instrument/memory_usage.h: what the forwards allocated and kept, the
  // received inputs included) above what was live before the schedule: the most held at once; what
  // the first forward left (one micro-batch's, which the in-flight count multiplies) and the most it
  // held while it ran (its transients on top).
  std::int64_t activation_peak_bytes = 0, activation_first_micro_bytes = 0, activation_first_forward_peak_bytes = 0;
  std::int64_t activation_received_bytes = 0;  // of those, the first forward's input as received (0 on stage 0)
  // What this stage sent: activations and gradients to its neighbours (their headers too) and a
  // shared weight's gradient; and, with data parallelism, the gradients it averaged (its
  // parameters' bytes, handed to the all-reduce).
  std::int64_t sent_bytes = 0, averaged_bytes = 0;
};

class PipelineStage {
 public:
  // This rank's stage: comm.rank() of comm.size() stages; `model` must outlive it and give at least
  // as many parts as there are stages.
  PipelineStage(Communicator& comm, Module& model, const PipelineOptions& options);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  const PipelineOptions& options() const { return options_; }
  // The parameters this stage's parts read, in the model's order: what its optimiser updates.
  NamedTensors parameters() const;
  // "stage 1 of 4: parts 1-1 (conv2), 18496 parameters"
  std::string describe() const;

  // One optimiser step over micro_batches batches from next_batch (a collective: every stage calls it).
  PipelineStepResult step(const std::function<Batch()>& next_batch, Optimizer& optimizer);

 private:
  struct InFlight;
  Tensor forward_parts(const Tensor& x);
  // The activation or gradient to a neighbour (a header with its dtype and shape, then its bytes);
  // sends complete by the step's end.
  void send(const Tensor& t, int peer, const char* what);
  Tensor receive(int peer, const char* what);
  void sum_shared_gradients();

  Communicator& comm_;
  Module& model_;
  PipelineOptions options_;
  int stage_, stages_;
  int first_part_ = 0, end_part_ = 0;
  std::vector<ModelPart> parts_;
  // A parameter read by this stage and another: the other stage, for the gradient's sum.
  std::vector<std::pair<std::string, int>> shared_;
  // A send in flight: its header (dtype, rank, shape) and tensor, kept alive until both complete.
  struct PendingSend {
    std::array<std::int64_t, 8> header{};
    Tensor data;
    std::vector<std::unique_ptr<Request>> requests;
  };
  void release_completed_sends();
  void wait_for_sends();  // under the deadline
  std::vector<std::unique_ptr<PendingSend>> sends_;
  std::int64_t sent_bytes_ = 0;  // this step's, so far
};

}  // namespace trainlab::comm
