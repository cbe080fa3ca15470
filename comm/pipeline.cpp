// Pipeline stages and their two schedules (comm/pipeline.h).
#include "comm/pipeline.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "engine/core/autocast.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/instrument/memory_usage.h"

namespace trainlab::comm {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  throw Error("pipeline: unknown schedule '" + name + "' (allowed: gpipe, 1f1b)");
}

const char* pipeline_schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::gpipe ? "gpipe" : "1f1b";
}

std::vector<PipelineOp> pipeline_order(PipelineSchedule schedule, int stage, int stages, std::int64_t micro_batches) {
  TL_CHECK(stages >= 1 && stage >= 0 && stage < stages,
           "pipeline: stage " + std::to_string(stage) + " of " + std::to_string(stages) + " does not exist");
  TL_CHECK(micro_batches >= 1, "pipeline: micro_batches must be >= 1, got " + std::to_string(micro_batches));
  std::vector<PipelineOp> order;
  // GPipe: all forwards first. 1F1B: the stages after this one each need a forward in flight
  // before this stage's first backward can come back.
  const std::int64_t warm =
      schedule == PipelineSchedule::gpipe ? micro_batches : std::min<std::int64_t>(stages - stage - 1, micro_batches);
  for (std::int64_t i = 0; i < warm; ++i) order.push_back({'F', i});
  for (std::int64_t j = 0; j + warm < micro_batches; ++j) {
    order.push_back({'F', warm + j});
    order.push_back({'B', j});
  }
  for (std::int64_t j = micro_batches - warm; j < micro_batches; ++j) order.push_back({'B', j});
  return order;
}

double pipeline_bound(int stages, std::int64_t micro_batches) {
  return static_cast<double>(micro_batches) / static_cast<double>(micro_batches + stages - 1);
}

std::vector<int> even_cut(int parts, int stages) {
  TL_CHECK(stages >= 1 && parts >= stages, "pipeline: " + std::to_string(stages) + " stages need at least as many " +
                                               "parts, the model has " + std::to_string(parts));
  std::vector<int> starts;
  int at = 0;
  for (int s = 0; s < stages; ++s) {
    starts.push_back(at);
    at += parts / stages + (s < parts % stages ? 1 : 0);
  }
  return starts;
}

std::vector<int> parse_cut(const std::string& text, int parts, int stages) {
  std::vector<int> starts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TL_CHECK(used == item.size() && !item.empty(), "pipeline: cut '" + text + "': '" + item +
                                                       "' is not a part index (allowed: 0.." +
                                                       std::to_string(parts - 1) + ", comma-separated, one per stage)");
    starts.push_back(value);
  }
  const std::string allowed = " (allowed: " + std::to_string(stages) + " increasing part indices starting at 0, each " +
                              "below the model's " + std::to_string(parts) + " parts)";
  TL_CHECK(static_cast<int>(starts.size()) == stages, "pipeline: cut '" + text + "' gives " +
                                                          std::to_string(starts.size()) + " stages, the job has " +
                                                          std::to_string(stages) + allowed);
  TL_CHECK(starts.front() == 0, "pipeline: cut '" + text + "' must start at part 0" + allowed);
  for (std::size_t i = 1; i < starts.size(); ++i)
    TL_CHECK(starts[i] > starts[i - 1] && starts[i] < parts,
             "pipeline: cut '" + text + "': " + std::to_string(starts[i]) + " is out of order or range" + allowed);
  return starts;
}

std::vector<int> balanced_cut(const std::vector<double>& part_seconds, int stages) {
  const int n = static_cast<int>(part_seconds.size());
  TL_CHECK(stages >= 1 && n >= stages, "pipeline: " + std::to_string(stages) + " stages need at least as many " +
                                           "parts, the model has " + std::to_string(n));
  std::vector<double> prefix(static_cast<std::size_t>(n + 1), 0.0);
  for (int i = 0; i < n; ++i)
    prefix[static_cast<std::size_t>(i + 1)] =
        prefix[static_cast<std::size_t>(i)] + part_seconds[static_cast<std::size_t>(i)];
  auto span = [&](int a, int b) { return prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)]; };
  // slowest[k][i]: the best slowest stage over parts [0, i) in k stages; from[k][i]: where its last starts.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> slowest(static_cast<std::size_t>(stages + 1),
                                           std::vector<double>(static_cast<std::size_t>(n + 1), inf));
  std::vector<std::vector<int>> from(static_cast<std::size_t>(stages + 1),
                                     std::vector<int>(static_cast<std::size_t>(n + 1), 0));
  slowest[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double cost = std::max(slowest[static_cast<std::size_t>(k - 1)][static_cast<std::size_t>(j)], span(j, i));
        if (cost < slowest[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)]) {
          slowest[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = cost;
          from[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = j;
        }
      }
  std::vector<int> starts(static_cast<std::size_t>(stages), 0);
  int end = n;
  for (int k = stages; k >= 1; --k) {
    end = from[static_cast<std::size_t>(k)][static_cast<std::size_t>(end)];
    starts[static_cast<std::size_t>(k - 1)] = end;
  }
  return starts;
}

std::vector<double> time_parts(Module& model, const Batch& batch, int repeats) {
  using Clock = std::chrono::steady_clock;
  std::vector<ModelPart> parts = model.parts();
  TL_CHECK(!parts.empty(), "pipeline: the model does not describe its parts (Module::parts), so it cannot be cut");
  TL_CHECK(repeats >= 1, "pipeline: time_parts needs repeats >= 1, got " + std::to_string(repeats));
  std::vector<std::vector<double>> runs(parts.size());
  for (int r = 0; r <= repeats; ++r) {  // run 0 is the warm-up
    Tensor x = batch.inputs;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const Tensor in = p == 0 ? x : x.detach().set_requires_grad(true);
      const auto begin = Clock::now();
      Tensor y = parts[p].forward(in);
      if (p + 1 == parts.size()) {
        y = cross_entropy(y, batch.labels.dim() > 1 ? batch.labels.reshape({-1}) : batch.labels);
        y.backward();
      } else {
        y.backward(Tensor::full(y.shape(), 1e-3, y.dtype(), y.backend()));
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
      if (r > 0) runs[p].push_back(seconds);
      x = y.detach();
    }
    model.zero_grad(true);
  }
  std::vector<double> medians;
  for (auto& v : runs) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

// A micro-batch between its forward and its backward: the stage's input (a leaf that collects the
// gradient to send back; the batch itself on the first stage) and its output (the scaled loss on
// the last stage).
struct PipelineStage::InFlight {
  Tensor input, output;
};

PipelineStage::PipelineStage(Communicator& comm, Module& model, const PipelineOptions& options)
    : comm_(comm), model_(model), options_(options), stage_(comm.rank()), stages_(comm.size()) {
  parts_ = model.parts();
  const int parts = static_cast<int>(parts_.size());
  TL_CHECK(parts > 0, "pipeline: the model does not describe its parts (Module::parts), so it cannot be cut");
  TL_CHECK(options.dtype == DType::f32 || options.dtype == DType::bf16,
           std::string("pipeline: dtype ") + dtype_name(options.dtype) +
               " is not supported (allowed: f32, bf16; f16 needs a loss scaler the pipeline does not run)");
  TL_CHECK(options.micro_batches >= 1,
           "pipeline: micro_batches must be >= 1, got " + std::to_string(options.micro_batches));
  TL_CHECK(parts >= stages_, "pipeline: " + std::to_string(stages_) + " stages need at least as many parts; the " +
                                 "model has " + std::to_string(parts) + " (allowed: 1.." + std::to_string(parts) +
                                 " ranks)");
  std::vector<int> starts = options.starts.empty() ? even_cut(parts, stages_) : options.starts;
  if (!options.starts.empty()) {
    std::string text;
    for (int s : starts) {  // appended piece by piece (GCC 12 at -O3 misreads the concatenation: -Wrestrict)
      if (!text.empty()) text += ',';
      text += std::to_string(s);
    }
    starts = parse_cut(text, parts, stages_);  // the same checks for a cut given as numbers
  }
  options_.starts = starts;
  first_part_ = starts[static_cast<std::size_t>(stage_)];
  end_part_ = stage_ + 1 < stages_ ? starts[static_cast<std::size_t>(stage_ + 1)] : parts;
  // Which stage reads each parameter: a name in two stages is a shared weight.
  std::map<std::string, std::set<int>> readers;
  for (int s = 0; s < stages_; ++s) {
    const int end = s + 1 < stages_ ? starts[static_cast<std::size_t>(s + 1)] : parts;
    for (int p = starts[static_cast<std::size_t>(s)]; p < end; ++p)
      for (const std::string& name : parts_[static_cast<std::size_t>(p)].parameters) readers[name].insert(s);
  }
  for (const auto& [name, stages] : readers) {
    TL_CHECK(stages.size() <= 2, "pipeline: parameter " + name + " is read by " + std::to_string(stages.size()) +
                                     " stages (at most two can share one)");
    if (stages.size() == 2 && stages.count(stage_) > 0)
      shared_.emplace_back(name, *stages.begin() == stage_ ? *stages.rbegin() : *stages.begin());
  }
}

NamedTensors PipelineStage::parameters() const {
  std::set<std::string> mine;
  for (int p = first_part_; p < end_part_; ++p)
    for (const std::string& name : parts_[static_cast<std::size_t>(p)].parameters) mine.insert(name);
  NamedTensors out;
  for (const auto& [name, tensor] : model_.named_parameters())
    if (mine.count(name) > 0) out.emplace_back(name, tensor);
  return out;
}

std::string PipelineStage::describe() const {
  std::string names;
  for (int p = first_part_; p < end_part_; ++p)
    names += (names.empty() ? "" : ", ") + parts_[static_cast<std::size_t>(p)].name;
  std::int64_t count = 0;
  for (const auto& [name, tensor] : parameters()) count += tensor.numel();
  return "stage " + std::to_string(stage_) + " of " + std::to_string(stages_) + ": parts " +
         std::to_string(first_part_) + "-" + std::to_string(end_part_ - 1) + " (" + names + "), " +
         std::to_string(count) + " parameters";
}

Tensor PipelineStage::forward_parts(const Tensor& x) {
  Tensor h = x;
  for (int p = first_part_; p < end_part_; ++p) h = parts_[static_cast<std::size_t>(p)].forward(h);
  return h;
}

void PipelineStage::send(const Tensor& t, int peer, const char* what) {
  auto pending = std::make_unique<PendingSend>();
  pending->data = t.contiguous();
  const Tensor& dense = pending->data;
  TL_CHECK(dense.dim() <= 6,
           "pipeline: a tensor of " + std::to_string(dense.dim()) + " dimensions crosses stages " + "(at most 6)");
  pending->header[0] = static_cast<std::int64_t>(dense.dtype());
  pending->header[1] = dense.dim();
  for (std::int64_t d = 0; d < dense.dim(); ++d) pending->header[static_cast<std::size_t>(2 + d)] = dense.size(d);
  pending->requests.push_back(comm_.isend(pending->header.data(), 8 * sizeof(std::int64_t), peer, what));
  pending->requests.push_back(comm_.isend(dense.raw_data(), dense.nbytes(), peer, what));
  sent_bytes_ += static_cast<std::int64_t>(8 * sizeof(std::int64_t) + dense.nbytes());
  sends_.push_back(std::move(pending));
}

void PipelineStage::release_completed_sends() {
  std::erase_if(sends_, [](const std::unique_ptr<PendingSend>& p) {
    return std::all_of(p->requests.begin(), p->requests.end(), [](const auto& r) { return r->test(); });
  });
}

void PipelineStage::wait_for_sends() {
  std::vector<std::unique_ptr<Request>> all;
  for (auto& pending : sends_)
    for (auto& r : pending->requests) all.push_back(std::move(r));
  comm_.wait_all(all);
  sends_.clear();
}

Tensor PipelineStage::receive(int peer, const char* what) {
  std::vector<std::int64_t> header(8, 0);
  std::vector<std::unique_ptr<Request>> wait;
  wait.push_back(comm_.irecv(header.data(), 8 * sizeof(std::int64_t), peer, what));
  comm_.wait_all(wait);
  TL_CHECK(header[1] >= 0 && header[1] <= 6 && header[0] >= 0 && header[0] <= static_cast<std::int64_t>(DType::i64),
           std::string("pipeline: a malformed header from rank ") + std::to_string(peer) + " (" + what + ")");
  Shape shape(header.begin() + 2, header.begin() + 2 + header[1]);
  Tensor t = Tensor::empty(shape, static_cast<DType>(header[0]), model_.parameters().front().backend());
  wait.clear();
  wait.push_back(comm_.irecv(t.raw_data(), t.nbytes(), peer, what));
  comm_.wait_all(wait);
  return t;
}

// A weight two stages read (the GPT's tied embedding and head): both add the two gradients, the
// lower stage's first, so both hold the same sum and make the same update.
void PipelineStage::sum_shared_gradients() {
  const NamedTensors mine = parameters();
  for (const auto& [name, peer] : shared_) {
    Tensor param;
    for (const auto& [n, t] : mine)
      if (n == name) param = t;
    Tensor grad = param.grad();
    if (!grad.defined()) grad = Tensor::zeros(param.shape(), param.dtype(), param.backend());
    const Tensor theirs = Tensor::empty(grad.shape(), grad.dtype(), grad.backend());
    std::vector<std::unique_ptr<Request>> wait;
    const Tensor own = grad.contiguous();
    wait.push_back(comm_.isend(own.raw_data(), own.nbytes(), peer, "pipeline: a shared weight's gradient"));
    sent_bytes_ += static_cast<std::int64_t>(own.nbytes());
    wait.push_back(comm_.irecv(theirs.raw_data(), theirs.nbytes(), peer, "pipeline: a shared weight's gradient"));
    comm_.wait_all(wait);
    NoGradGuard no_grad;
    param.set_grad(stage_ < peer ? add(own, theirs) : add(theirs, own));
  }
}

PipelineStepResult PipelineStage::step(const std::function<Batch()>& next_batch, Optimizer& optimizer) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto since = [start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  PipelineStepResult result;
  const std::int64_t m = options_.micro_batches;
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  std::vector<Batch> batches;
  for (std::int64_t i = 0; i < m; ++i) batches.push_back(next_batch());
  result.schedule_begin_s = since();
  std::vector<InFlight> slots(static_cast<std::size_t>(m));
  std::int64_t in_flight = 0;
  double loss_sum = 0;
  // The activations the schedule holds: what the forwards allocate and keep (the received inputs
  // among them), counted from what was live before, the peak over the schedule and what the first
  // forward left.
  const DeviceType device = batches.front().inputs.device_type();
  reset_memory_peaks(device);
  const std::int64_t live_before = memory_usage(device).live_of(MemoryCategory::activations);
  for (const PipelineOp& op : pipeline_order(options_.schedule, stage_, stages_, m)) {
    InFlight& slot = slots[static_cast<std::size_t>(op.micro)];
    const Batch& batch = batches[static_cast<std::size_t>(op.micro)];
    release_completed_sends();  // a sent activation is freed once its send is done, not at the step's end
    MemoryCategoryScope category(op.kind == 'F' ? MemoryCategory::activations : MemoryCategory::workspaces);
    if (op.kind == 'F') {
      slot.input = first ? batch.inputs : receive(stage_ - 1, "pipeline: an activation");
      if (!first) slot.input.set_requires_grad(true);
      const double begin = since();
      Tensor y;
      {
        // The compute dtype (bf16: autocast over the f32 masters, as StepRunner runs it); the
        // activations cross in whatever dtype the part gave them.
        AutocastGuard autocast(options_.dtype, &optimizer);
        y = forward_parts(slot.input);
        if (last) {
          const Tensor targets = batch.labels.dim() > 1 ? batch.labels.reshape({-1}) : batch.labels;
          y = cross_entropy(y, targets);
          if (m > 1) y = y * (1.0 / static_cast<double>(m));  // as StepRunner's micro-steps: the mean
        }
      }
      result.events.push_back({'F', op.micro, begin, since()});
      if (last) {
        loss_sum += y.item();
      } else {
        send(y, stage_ + 1, "pipeline: an activation");
      }
      slot.output = y;
      result.peak_in_flight = std::max(result.peak_in_flight, ++in_flight);
      if (result.events.size() == 1) {
        const MemoryUsage now = memory_usage(device);
        result.activation_first_micro_bytes = now.live_of(MemoryCategory::activations) - live_before;
        result.activation_first_forward_peak_bytes = now.peak_of(MemoryCategory::activations) - live_before;
        result.activation_received_bytes = first ? 0 : static_cast<std::int64_t>(slot.input.nbytes());
      }
    } else {
      const Tensor dy = last ? Tensor() : receive(stage_ + 1, "pipeline: a gradient");
      const double begin = since();
      if (last) {
        slot.output.backward();
      } else {
        slot.output.backward(dy);
      }
      result.events.push_back({'B', op.micro, begin, since()});
      if (!first) send(slot.input.grad(), stage_ - 1, "pipeline: a gradient");
      slot = InFlight{};
      --in_flight;
    }
  }
  wait_for_sends();
  result.schedule_end_s = since();
  result.activation_peak_bytes = memory_usage(device).peak_of(MemoryCategory::activations) - live_before;
  sum_shared_gradients();
  // The last stage's loss, on every stage.
  comm_.broadcast(&loss_sum, sizeof loss_sum, stages_ - 1);
  if (options_.data_parallel != nullptr) {
    const double before = since();
    average_gradients(*options_.data_parallel, parameters());
    options_.data_parallel->allreduce_native(&loss_sum, 1, DType::f64, ReduceOp::average);
    result.data_parallel_s = since() - before;
    for (const auto& [name, p] : parameters()) result.averaged_bytes += static_cast<std::int64_t>(p.nbytes());
  }
  result.sent_bytes = sent_bytes_;
  sent_bytes_ = 0;
  optimizer.step();
  optimizer.zero_grad();
  for (const PipelineEvent& e : result.events) result.busy_s += e.end_s - e.begin_s;
  result.loss = loss_sum;
  result.seconds = since();
  return result;
}

}  // namespace trainlab::comm
