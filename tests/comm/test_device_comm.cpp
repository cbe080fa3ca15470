// The device path of the comm layer without a GPU: the ring and DDP over a communicator that works
// on (emulated) device memory, stream-ordered, as NCCL does (tests/device_communicator.h). Every
// rank runs every test; ctest runs them at 2, 3 and 4 ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "comm/ddp.h"
#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"
#include "device_communicator.h"
#include "emulated_device.h"
#include "engine/train/trainer.h"
#include "studies/allreduce/allreduce_study.h"
#include "studies/allreduce/routes.h"
#ifdef TRAINLAB_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

using namespace trainlab;
using namespace trainlab::comm;
using trainlab::testing::DeviceStyleCommunicator;

namespace {

Backend& device_backend() { return get_backend(trainlab::testing::emulated_device()); }

std::unique_ptr<DeviceStyleCommunicator> device_world() {
  return std::make_unique<DeviceStyleCommunicator>(MpiCommunicator::world(), device_backend());
}

// Random values of `dtype` (as bytes), different on every rank.
std::vector<unsigned char> random_buffer(DType dtype, std::int64_t count, int rank, unsigned seed) {
  std::mt19937 generator(seed * 7919u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(count) * dtype_size(dtype));
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = uniform(generator);
    void* at = bytes.data() + i * static_cast<std::int64_t>(dtype_size(dtype));
    switch (dtype) {
      case DType::f32:
        std::memcpy(at, &v, sizeof v);
        break;
      case DType::f64: {
        const double d = v;
        std::memcpy(at, &d, sizeof d);
        break;
      }
      case DType::bf16: {
        const bf16 h(v);
        std::memcpy(at, &h, sizeof h);
        break;
      }
      case DType::f16: {
        const f16 h(v);
        std::memcpy(at, &h, sizeof h);
        break;
      }
      default:
        FAIL("unexpected dtype");
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("seed 004's via-host route: device memory through a host staging buffer, the library's sum bit for bit",
          "[device-comm]") {
  auto world = MpiCommunicator::world();
  Backend& device = device_backend();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const std::int64_t count : {1, 1000, 100003}) {
      INFO(dtype_name(dtype) << ", " << count << " elements");
      std::vector<unsigned char> data = random_buffer(dtype, count, world->rank(), 5);
      std::vector<unsigned char> expected = data, staging(data.size()), result(data.size());
      world->allreduce_native(expected.data(), count, dtype, ReduceOp::sum);
      void* on_device = device.allocate(data.size());
      device.copy_from_host(on_device, data.data(), data.size());
      bench::route_via_host(*world, device, on_device, staging.data(), count, dtype);
      device.copy_to_host(result.data(), on_device, result.size());
      device.deallocate(on_device, data.size());
      CHECK(result == expected);
    }
  }
  // Its prediction: the library's all-reduce (modelled as the ring) plus S each way at the copy rate.
  std::vector<bench::RoutePoint> points = {{1 << 20, {{"ring", 1e-3}, {"via_host", 3e-3}}},
                                           {1 << 24, {{"ring", 16e-3}, {"via_host", 40e-3}}}};
  const bench::RouteTable table = bench::route_table(2, points, 10.0, 2.0);
  REQUIRE(table.rows.size() == 4);
  // At 16M: the ring's fit passes through its two points (16 ms), plus 2 x 16 MiB at 2 GB/s.
  CHECK(table.rows[3][1] == "via_host");
  CHECK(std::stod(table.rows[3][3]) == Approx(16e3 + 2 * 16777216 / 2e9 * 1e6).epsilon(1e-3));
  CHECK_THROWS_WITH(bench::route_table(2, points, 10.0), Catch::Contains("via_host needs the device-host copy rate"));
  // bench_allreduce --routes --routes-device on the emulated device: its buffers put and read back
  // through the device's copies, every route's result checked against the exact sum (0: all correct).
  bench::AllreduceOptions options;
  options.routes = true;
  options.routes_device = trainlab::testing::emulated_device();
  options.sizes_spec = "4K,64K";
  options.seconds_per_size = 0.01;
  options.warmup = 1;
  options.min_iters = 2;
  options.max_iters = 3;
  options.no_ledger = true;
  CHECK(bench::run_allreduce_study(options) == 0);
}

TEST_CASE("the ring on device-style buffers, stream-ordered, is bit for bit the ring over MPI", "[device-comm]") {
  auto host = MpiCommunicator::world();
  auto device = device_world();
  const int P = host->size(), r = host->rank();
  RingOptions small;
  small.segment_bytes = 96;  // several segments per chunk, and chunks of different segment counts
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t count :
         {std::int64_t{1}, std::int64_t{P - 1}, std::int64_t{7}, std::int64_t{100}, std::int64_t{1000 + P}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        INFO(dtype_name(dtype) << ", " << count << " elements, " << (op == ReduceOp::sum ? "sum" : "average") << ", "
                               << P << " ranks");
        const auto input = random_buffer(dtype, count, r, static_cast<unsigned>(count));
        const std::size_t bytes = input.size();
        // Over MPI, the pipelined ring on host memory.
        std::vector<unsigned char> expected = input;
        ring_allreduce(*host, expected.data(), count, dtype, op, small);
        // Over the device-style communicator, in its memory, stream-ordered.
        auto memory = device->allocate(std::max<std::size_t>(bytes, 1));
        std::memcpy(memory.get(), input.data(), bytes);
        const std::int64_t steps_before = device->sendrecvs;
        ring_allreduce(*device, memory.get(), count, dtype, op, small);
        CHECK(std::memcmp(memory.get(), expected.data(), bytes) == 0);
        if (P > 1) CHECK(device->sendrecvs > steps_before);  // the stream-ordered path ran

        // Its halves: rank r's chunk after the reduce-scatter, everything after the all-gather.
        std::memcpy(memory.get(), input.data(), bytes);
        ring_reduce_scatter(*device, memory.get(), count, dtype, op, small);
        const ChunkRange mine = shard_chunk(count, P, r);
        const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
        CHECK(std::memcmp(static_cast<unsigned char*>(memory.get()) + mine.begin * elem,
                          expected.data() + mine.begin * elem, static_cast<std::size_t>(mine.count * elem)) == 0);
        ring_allgather(*device, memory.get(), count, dtype, small);
        CHECK(std::memcmp(memory.get(), expected.data(), bytes) == 0);
      }
    }
  }
  // Integer-valued data: exactly MPI_Allreduce's sum.
  std::vector<float> values(999);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97));
  std::vector<float> native = values;
  host->allreduce_native(native.data(), static_cast<std::int64_t>(native.size()), DType::f32, ReduceOp::sum);
  auto memory = device->allocate(values.size() * sizeof(float));
  std::memcpy(memory.get(), values.data(), values.size() * sizeof(float));
  ring_allreduce(*device, memory.get(), static_cast<std::int64_t>(values.size()), DType::f32, ReduceOp::sum, small);
  CHECK(std::memcmp(memory.get(), native.data(), native.size() * sizeof(float)) == 0);
  CHECK(device->host_copies == 0);
}

namespace {

// A DataParallel that forwards to DDP and counts, over each synchronised backward (begin_backward
// to finish_backward) and each finish_step, every copy between the host and the device and every
// host-side wait on the device, on the backend and on the communicator.
class Counting final : public DataParallel {
 public:
  // `backend`: the device whose counters are read; `comm_copies`: the communicator's host copies.
  Counting(Ddp& ddp, Backend& backend, std::function<std::int64_t()> comm_copies)
      : ddp_(ddp), backend_(backend), comm_copies_(std::move(comm_copies)) {}
  int rank() const override { return ddp_.rank(); }
  int world_size() const override { return ddp_.world_size(); }
  void attach(const NamedTensors& parameters) override { ddp_.attach(parameters); }
  void begin_backward(bool sync) override {
    start();
    ddp_.begin_backward(sync);
  }
  DdpStepStats finish_backward() override {
    DdpStepStats stats = ddp_.finish_backward();
    stop();
    ++backwards;
    return stats;
  }
  void finish_step() override {
    start();
    ddp_.finish_step();
    stop();
  }
  void barrier() override { ddp_.barrier(); }
  double max_over_ranks(double value) override { return ddp_.max_over_ranks(value); }
  double sum_over_ranks(double value) override { return ddp_.sum_over_ranks(value); }
  std::vector<std::int64_t> gather(std::int64_t value) override { return ddp_.gather(value); }
  std::string describe() const override { return ddp_.describe(); }
  std::string gradient_reduction() const override { return ddp_.gradient_reduction(); }
  bool shards_optimizer_state() const override { return ddp_.shards_optimizer_state(); }
  NamedTensors optimizer_parameters() const override { return ddp_.optimizer_parameters(); }
  StateDict gather_optimizer_state(const StateDict& local) override { return ddp_.gather_optimizer_state(local); }
  StateDict shard_optimizer_state(const StateDict& full) override { return ddp_.shard_optimizer_state(full); }

  std::map<std::string, std::int64_t> counted;  // summed over every counted window
  int backwards = 0;

 private:
  std::map<std::string, std::int64_t> now() const {
    auto c = backend_.counters();
    return {{"backend copies to the host", c["copies_to_host"]},
            {"backend copies from the host", c["copies_from_host"]},
            {"backend host waits", c["host_waits"]},
            {"communicator host copies", comm_copies_()}};
  }
  void start() { before_ = now(); }
  void stop() {
    for (const auto& [key, value] : now()) counted[key] += value - before_[key];
  }
  Ddp& ddp_;
  Backend& backend_;
  std::function<std::int64_t()> comm_copies_;
  std::map<std::string, std::int64_t> before_;
};

TrainConfig device_config(const std::string& backend) {
  TrainConfig c;
  c.execution.backend = backend;
  c.steps = 3;
  c.batch = 24;  // global: 12, 8 or 6 per rank
  c.data.train_samples = 96;
  c.reporting.eval_at_end = false;
  c.reporting.log_every = 1000;
  c.optimizer.lr = 0.05;
  c.seed = 5;
  c.execution.threads = 1;
  c.reporting.warmup = 1;  // steps 2 and 3 measured: the DDP statistics are theirs
  return c;
}

std::vector<std::vector<float>> parameters_of(Trainer& trainer) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, p] : trainer.model().named_parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("DDP over a device communicator: no gradient or bucket through the host, hooks never wait, MPI's bits",
          "[device-comm]") {
  struct Arm {
    const char* allreduce;
    bool views;
    int zero;
    OptimizerKind optimizer;
    GradCompression compression = GradCompression::none;
  };
  int arm_index = 0;
  for (const Arm arm : {Arm{"ring", true, 0, OptimizerKind::sgd}, Arm{"native", false, 0, OptimizerKind::sgd},
                        Arm{"ring", false, 1, OptimizerKind::adamw}, Arm{"ring", true, 1, OptimizerKind::sgd},
                        Arm{"ring", true, 0, OptimizerKind::sgd, GradCompression::bf16},
                        Arm{"native", true, 0, OptimizerKind::sgd, GradCompression::f16},
                        Arm{"ring", true, 1, OptimizerKind::adamw, GradCompression::bf16},
                        Arm{"halving_doubling", true, 1, OptimizerKind::sgd},
                        Arm{"recursive_doubling", false, 0, OptimizerKind::sgd, GradCompression::bf16}}) {
    // The sanitizer pass (TRAINLAB_TEST_QUICK) runs four arms that reach every path (native with
    // copies, ZeRO-1 with copies, ZeRO-1 with compression and views, halving-doubling's halves on
    // the device's stream); make test runs all 9.
    const char* quick = std::getenv("TRAINLAB_TEST_QUICK");
    const int index = arm_index++;
    if (quick != nullptr && std::string(quick) == "1" &&
        (index == 0 || index == 3 || index == 4 || index == 5 || index == 8))
      continue;
    INFO(arm.allreduce << ", gradient_as_bucket_view " << arm.views << ", zero " << arm.zero << ", "
                       << optimizer_name(arm.optimizer) << ", compression " << static_cast<int>(arm.compression));
    DdpOptions options;
    options.allreduce = parse_algorithm(arm.allreduce);
    options.gradient_as_bucket_view = arm.views;
    options.zero = arm.zero;
    options.grad_compress = arm.compression;
    options.bucket_cap_mb = 0.05;  // several buckets
    options.first_bucket_mb = 0.01;

    // The device path: the emulated device's model, buckets in its memory, the device-style communicator.
    auto device = device_world();
    TrainConfig on_device = device_config(trainlab::testing::emulated_device());
    on_device.optimizer.kind = arm.optimizer;
    Ddp device_ddp(*device, options);
    Counting counting(device_ddp, device_backend(), [&] { return device->host_copies.load(); });
    Trainer device_trainer(on_device, &counting);
    const TrainResult trained = device_trainer.train(nullptr);
    CHECK(trained.ddp.device_clock);
    CHECK(trained.ddp.overlap_s <= trained.ddp.comm_s + 1e-12);
    CHECK(counting.backwards == on_device.steps);
    for (const auto& [what, count] : counting.counted) {
      INFO(what);
      // The step's own phase timer waits for the device once at the end of each backward (its
      // timing rule, engine/train/step.cpp), after every hook has run; DDP adds no wait of its own.
      CHECK(count == (what == "backend host waits" ? counting.backwards : 0));
    }
    // Each bucket's collective waited for its event, on the "device".
    CHECK(device->device_waits >= static_cast<std::int64_t>(device_ddp.buckets().size()) * on_device.steps);
    CHECK_THAT(device_ddp.describe(), Catch::Contains("emulated-device memory") && !Catch::Contains("staged"));
    // The overlap metrics came from events on the two "streams": two per bucket per step.
    CHECK(device->events_recorded == 2 * static_cast<std::int64_t>(device_ddp.buckets().size()) * on_device.steps);
    // DDP's communication thread made the process's device current before its first event,
    // reduction or conversion (on a GPU: cudaSetDevice, or its work lands on device 0).
    CHECK(device->threads_bound >= 1);
    CHECK(device->calls_without_device == 0);

    // The host path: the reference backend over MPI, the same configuration.
    auto host = MpiCommunicator::world();
    TrainConfig on_host = device_config("reference");
    on_host.optimizer = on_device.optimizer;
    Ddp host_ddp(*host, options);
    Trainer host_trainer(on_host, &host_ddp);
    host_trainer.train(nullptr);
    CHECK(parameters_of(device_trainer) == parameters_of(host_trainer));
  }
}

TEST_CASE(
    "DDP over a host communicator that cannot reach the device stages buckets through pinned memory, "
    "MPI's bits",
    "[device-comm]") {
  Backend& device = device_backend();
  auto staging = std::make_unique<DeviceStyleCommunicator>(MpiCommunicator::world(), device, /*host_only=*/true);
  for (const int zero : {0, 1}) {
    INFO("zero " << zero);
    DdpOptions options;
    options.allreduce = Algorithm::ring;
    options.zero = zero;
    options.bucket_cap_mb = 0.05;
    options.first_bucket_mb = 0.01;
    const std::int64_t pinned_before = device.counters()["pinned_blocks"];
    Ddp staged_ddp(*staging, options);
    Trainer staged(device_config(trainlab::testing::emulated_device()), &staged_ddp);
    CHECK(device.counters()["pinned_blocks"] - pinned_before == static_cast<std::int64_t>(staged_ddp.buckets().size()));
    staged.train(nullptr);
    CHECK_THAT(staged_ddp.describe(), Catch::Contains("staged through pinned host memory"));
    auto host = MpiCommunicator::world();
    Ddp host_ddp(*host, options);
    Trainer reference(device_config("reference"), &host_ddp);
    reference.train(nullptr);
    CHECK(parameters_of(staged) == parameters_of(reference));
  }
}

TEST_CASE("DDP refuses a device communicator with a model it cannot reach, naming both", "[device-comm]") {
  auto device = device_world();
  Backend& host = get_backend("reference");
  Tensor p = Tensor::zeros({4}, DType::f32, host).set_requires_grad(true);
  Ddp ddp(*device, DdpOptions{});
  CHECK_THROWS_WITH(ddp.attach({{"w", p}}), Catch::Contains("device-style communicator works on the emulated device") &&
                                                Catch::Contains("backend 'reference'"));
}

#ifdef TRAINLAB_HAVE_NCCL
// On a GPU (ctest gpu.nccl-ddp, one rank per GPU): the real thing. DDP over NCCL on the cuda
// backend copies nothing to or from the host in backward, and at world 1 equals training without
// DDP bit for bit.
TEST_CASE("DDP over NCCL on the cuda backend: no host copies in backward, world 1 equals no DDP", "[nccl]") {
  auto nccl = NcclCommunicator::world();
  Backend& cuda = get_backend("cuda");
  struct Arm {
    const char* allreduce;
    int zero;
    GradCompression compression;
  };
  for (const Arm arm : {Arm{"ring", 0, GradCompression::none}, Arm{"native", 0, GradCompression::none},
                        Arm{"ring", 1, GradCompression::none}, Arm{"native", 0, GradCompression::bf16}}) {
    INFO(arm.allreduce << ", zero " << arm.zero << ", compression " << static_cast<int>(arm.compression));
    DdpOptions options;
    options.allreduce = parse_algorithm(arm.allreduce);
    options.zero = arm.zero;
    options.grad_compress = arm.compression;
    options.bucket_cap_mb = 0.05;
    options.first_bucket_mb = 0.01;
    TrainConfig config = device_config("cuda");
    Ddp ddp(*nccl, options);
    Counting counting(ddp, cuda, [&] { return nccl->host_copies(); });
    Trainer replica(config, &ddp);
    replica.train(nullptr);
    for (const auto& [what, count] : counting.counted) {
      INFO(what);
      CHECK(count == (what == "backend host waits" ? counting.backwards : 0));
    }
    CHECK_THAT(ddp.describe(), Catch::Contains("cuda memory") && !Catch::Contains("staged"));
    if (nccl->size() == 1 && arm.compression == GradCompression::none) {
      Trainer single(config);
      single.train(nullptr);
      CHECK(parameters_of(replica) == parameters_of(single));
    }
  }
}
#endif
