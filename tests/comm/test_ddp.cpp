// DDP under MPI (every rank runs every test; ctest runs them at 2 and 4 ranks).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "comm/ddp.h"
#include "comm/mpi_communicator.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/train/trainer.h"

using namespace trainlab;
using namespace trainlab::comm;
namespace fs = std::filesystem;

namespace {

// SmallCNN's parameter sizes in registration order (conv1 w, b, conv2 w, b, fc1 w, b, fc2 w, b).
const std::vector<std::int64_t> kSmallCnnBytes = {864 * 4,     32 * 4,  18432 * 4, 64 * 4,
                                                  1048576 * 4, 256 * 4, 2560 * 4,  10 * 4};

TrainConfig ddp_config() {
  TrainConfig c;
  c.execution.backend = "reference";  // deterministic at any thread count: differences come from DDP alone
  c.steps = 6;
  c.batch = 16;               // global; 8 per rank at 2 ranks, 4 at 4
  c.data.train_samples = 64;  // 4 batches an epoch: 6 steps cross an epoch boundary
  c.data.eval_samples = 20;
  c.data.eval_batch = 20;
  c.reporting.eval_at_end = false;
  c.reporting.log_every = 1000;
  c.optimizer.lr = 0.05;
  c.seed = 11;
  c.execution.threads = 1;
  return c;
}

double max_relative_difference(Trainer& a, Trainer& b) {
  const auto pa = a.model().named_parameters(), pb = b.model().named_parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto x = pa[i].second.to_vector<float>(), y = pb[i].second.to_vector<float>();
    double diff = 0, norm = 0;
    for (std::size_t j = 0; j < x.size(); ++j) {
      diff += (static_cast<double>(x[j]) - y[j]) * (static_cast<double>(x[j]) - y[j]);
      norm += static_cast<double>(y[j]) * y[j];
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
  }
  return worst;
}

// The sanitizer pass sets TRAINLAB_TEST_QUICK (CMakePresets.json): the long matrices run a subset
// there that still reaches every code path; make test runs them whole.
bool quick_tests() {
  const char* quick = std::getenv("TRAINLAB_TEST_QUICK");
  return quick != nullptr && std::string(quick) == "1";
}

// A directory every rank names the same way (rank 0's pid).
std::string shared_directory(Communicator& comm, const std::string& what) {
  long pid = static_cast<long>(getpid());
  comm.broadcast(&pid, sizeof pid, 0);
  return (fs::temp_directory_path() / ("trainlab_ddp_" + what + "_" + std::to_string(pid))).string();
}

}  // namespace

TEST_CASE("DDP buckets: reverse registration order, a 1 MiB first bucket, then the cap", "[ddp]") {
  // PyTorch's rule: a bucket closes once it reaches its cap. fc2 and fc1 fill the first bucket
  // (fc1.weight alone is 4 MiB), the convolutions the second.
  const auto buckets = assign_buckets(kSmallCnnBytes, 1 << 20, 25 << 20);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0] == std::vector<int>{7, 6, 5, 4});
  CHECK(buckets[1] == std::vector<int>{3, 2, 1, 0});
  // A 1 KiB cap: a bucket closes as soon as it holds 1 KiB (the small biases ride with the next weight).
  const auto small = assign_buckets(kSmallCnnBytes, 1024, 1024);
  CHECK(small == std::vector<std::vector<int>>{{7, 6}, {5}, {4}, {3, 2}, {1, 0}});
  CHECK(assign_buckets({}, 1, 1).empty());
}

TEST_CASE("DDP averages gradients exactly on integer-valued data, with no_sync accumulating locally", "[ddp]") {
  auto world = MpiCommunicator::world();
  const int P = world->size(), r = world->rank();
  for (Algorithm algorithm : {Algorithm::native, Algorithm::ring, Algorithm::recursive_doubling,
                              Algorithm::halving_doubling, Algorithm::automatic, Algorithm::single_copy}) {
    // The sanitizer pass (TRAINLAB_TEST_QUICK) leaves out recursive doubling and auto (their
    // reductions are the same loops); make test runs all five.
    if (quick_tests() && (algorithm == Algorithm::recursive_doubling || algorithm == Algorithm::automatic)) continue;
    INFO("all-reduce " << algorithm_name(algorithm) << ", " << P << " ranks");
    Backend& be = get_backend("reference");
    // Three parameters; with a 64-byte cap they fall into several buckets.
    std::vector<Tensor> params = {Tensor::zeros({5}, DType::f32, be).set_requires_grad(true),
                                  Tensor::zeros({40}, DType::f32, be).set_requires_grad(true),
                                  Tensor::zeros({3}, DType::f32, be).set_requires_grad(true)};
    NamedTensors named = {{"a", params[0]}, {"b", params[1]}, {"c", params[2]}};
    DdpOptions options;
    options.bucket_cap_mb = 64.0 / (1024 * 1024);
    options.first_bucket_mb = 16.0 / (1024 * 1024);
    options.allreduce = algorithm;
    options.rendezvous = algorithm == Algorithm::ring;  // the sleeping rendezvous before each bucket, too
    Ddp ddp(*world, options);
    ddp.attach(named);
    REQUIRE(ddp.buckets().size() >= 2);
    // Rank r's gradient of element j is (r + 1) * (j + 1): integers, exact sums.
    auto backward = [&] {
      Tensor loss;
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::vector<float> c(static_cast<std::size_t>(params[i].numel()));
        for (std::size_t j = 0; j < c.size(); ++j) c[j] = static_cast<float>((r + 1) * (j + 1));
        const Tensor term = sum(mul(params[i], Tensor::from_vector(c, params[i].shape(), be)));
        loss = loss.defined() ? add(loss, term) : term;
      }
      loss.backward();
    };
    // A no_sync micro-step, then a synchronised one: the local sum (2 (r+1)(j+1)) is averaged.
    ddp.begin_backward(false);
    backward();
    ddp.finish_backward();
    CHECK(params[1].grad().to_vector<float>()[3] == static_cast<float>((r + 1) * 4));  // untouched by no_sync
    ddp.begin_backward(true);
    backward();
    const DdpStepStats stats = ddp.finish_backward();
    CHECK(stats.bucket_bytes.size() == ddp.buckets().size());
    const double mean_factor = static_cast<double>(P + 1) / 2.0;  // mean over ranks of (r + 1)
    for (const Tensor& p : params) {
      const auto g = p.grad().to_vector<float>();
      for (std::size_t j = 0; j < g.size(); ++j) {
        REQUIRE(g[j] == static_cast<float>(2.0 * mean_factor * static_cast<double>(j + 1)));
      }
    }
    world->barrier();
  }
}

TEST_CASE("DDP gradient compression (bf16, fp16): the average within the 16-bit type's rounding, half the bytes",
          "[ddp]") {
  auto world = MpiCommunicator::world();
  const int P = world->size(), r = world->rank();
  Backend& be = get_backend("reference");
  for (GradCompression compression : {GradCompression::bf16, GradCompression::f16}) {
    for (Algorithm algorithm :
         {Algorithm::ring, Algorithm::native, Algorithm::recursive_doubling, Algorithm::halving_doubling}) {
      for (int zero : {0, 1}) {
        // The sanitizer pass: the ring and native both ways, halving-doubling's halves (zero 1) once.
        const bool latency = algorithm == Algorithm::recursive_doubling || algorithm == Algorithm::halving_doubling;
        if (quick_tests() && latency &&
            !(algorithm == Algorithm::halving_doubling && zero == 1 && compression == GradCompression::bf16))
          continue;
        INFO("compression " << static_cast<int>(compression) << ", " << algorithm_name(algorithm) << ", zero " << zero
                            << ", " << P << " ranks");
        Tensor w = Tensor::zeros({300}, DType::f32, be).set_requires_grad(true);
        Tensor b = Tensor::zeros({7}, DType::f32, be).set_requires_grad(true);
        DdpOptions options;
        options.allreduce = algorithm;
        options.grad_compress = compression;
        options.zero = zero;
        options.bucket_cap_mb = 512.0 / (1024 * 1024);
        options.first_bucket_mb = 64.0 / (1024 * 1024);
        Ddp ddp(*world, options);
        ddp.attach({{"w", w}, {"b", b}});
        // Rank r's gradient of element j: sin(j) * (r + 1) / 3, not representable in 16 bits.
        auto gradient = [&](const Tensor& p, int rank) {
          std::vector<float> g(static_cast<std::size_t>(p.numel()));
          for (std::size_t j = 0; j < g.size(); ++j) g[j] = static_cast<float>(std::sin(double(j)) * (rank + 1) / 3.0);
          return g;
        };
        ddp.begin_backward(true);
        Tensor loss = add(sum(mul(w, Tensor::from_vector(gradient(w, r), w.shape(), be))),
                          sum(mul(b, Tensor::from_vector(gradient(b, r), b.shape(), be))));
        loss.backward();
        const DdpStepStats stats = ddp.finish_backward();
        std::int64_t wire = 0;
        for (std::int64_t bytes : stats.bucket_bytes) wire += bytes;
        CHECK(wire == 307 * 2);  // 16 bits an element on the wire
        // The exact average, and the bound: one rounding into the 16-bit type, one per ring hop.
        const double unit = compression == GradCompression::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
        const NamedTensors checked = zero == 1 ? ddp.optimizer_parameters() : NamedTensors{{"w", w}, {"b", b}};
        for (const auto& [name, p] : checked) {
          const auto g = p.grad().to_vector<float>();
          // A ZeRO-1 piece "w[a:b]" covers elements a.. of w.
          const std::string parameter = name.substr(0, name.find('['));
          const std::int64_t first =
              name.find('[') == std::string::npos ? 0 : std::stoll(name.substr(name.find('[') + 1));
          for (std::size_t j = 0; j < g.size(); ++j) {
            const double x = std::sin(double(first + static_cast<std::int64_t>(j)));
            const double exact = x * (P + 1) / 2.0 / 3.0;
            REQUIRE(std::abs(g[j] - exact) <= (P + 1) * unit * std::abs(x) * (P + 1) / 3.0 + 1e-30);
          }
          CHECK((parameter == "w" || parameter == "b"));
        }
        CHECK_THAT(ddp.gradient_reduction(), Catch::Contains("compressed to"));
        world->barrier();
      }
    }
  }
}

TEST_CASE("DDP refuses a step in which a parameter received no gradient, naming it", "[ddp]") {
  auto world = MpiCommunicator::world();
  Backend& be = get_backend("reference");
  Tensor used = Tensor::zeros({4}, DType::f32, be).set_requires_grad(true);
  Tensor unused = Tensor::zeros({4}, DType::f32, be).set_requires_grad(true);
  DdpOptions options;
  options.bucket_cap_mb = 8.0 / (1024 * 1024);
  options.first_bucket_mb = 8.0 / (1024 * 1024);
  Ddp ddp(*world, options);
  ddp.attach({{"used", used}, {"never_used", unused}});
  ddp.begin_backward(true);
  sum(used).backward();
  REQUIRE_THROWS_WITH(ddp.finish_backward(), Catch::Contains("never_used"));
  world->barrier();
}

TEST_CASE("DDP at world N equals one process with the whole batch, bitwise across ranks", "[ddp]") {
  // The sanitizer pass (TRAINLAB_TEST_QUICK) leaves this case out: its DDP paths (the ring over
  // several buckets, replicas checked) run there in the ZeRO matrix's plain DDP arms; CI time.
  if (quick_tests()) return;
  auto world = MpiCommunicator::world();
  const int P = world->size();
  for (const char* allreduce : {"native", "ring"}) {
    INFO("all-reduce " << allreduce << ", " << P << " ranks");
    TrainConfig config = ddp_config();
    DdpOptions options;
    options.allreduce = parse_algorithm(allreduce);
    options.bucket_cap_mb = 0.05;  // several buckets
    options.first_bucket_mb = 0.01;
    Ddp ddp(*world, options);
    Trainer replica(config, &ddp);
    replica.train(nullptr);
    Trainer single(config);  // world 1, batch 16
    single.train(nullptr);
    // Summation order differs (per-rank means, then the average): f32 rounding, nothing more.
    const double difference = max_relative_difference(replica, single);
    INFO("max relative difference " << difference);
    if (world->rank() == 0)
      std::cout << "ddp " << allreduce << " world " << P << ": max relative parameter difference " << difference
                << " against world 1" << std::endl;
    CHECK(difference < 1e-5);
    // The replicas never drift: every rank holds the same bits.
    const auto checksums_high = ddp.gather(static_cast<double>(ddp.parameter_checksum() >> 32));
    const auto checksums_low = ddp.gather(static_cast<double>(ddp.parameter_checksum() & 0xffffffffULL));
    for (int q = 1; q < P; ++q) {
      CHECK(checksums_high[static_cast<std::size_t>(q)] == checksums_high[0]);
      CHECK(checksums_low[static_cast<std::size_t>(q)] == checksums_low[0]);
    }
  }
}

TEST_CASE("DDP gradient accumulation equals the large batch; checkpoints resume at another world size", "[ddp]") {
  // The sanitizer pass leaves this case out: accumulation under DDP and a resume at another world
  // run there in the ZeRO-2, ZeRO-3 and ZeRO-1 checkpoint cases; CI time.
  if (quick_tests()) return;
  auto world = MpiCommunicator::world();
  const int P = world->size();
  const std::string dir = shared_directory(*world, "resume");
  TrainConfig config = ddp_config();
  Trainer single(config);  // the reference: world 1, 6 steps straight
  single.train(nullptr);
  {
    // World P, two micro-steps of half the batch each, stopping at step 3 with a checkpoint.
    TrainConfig half = config;
    half.batch = config.batch / 2;
    half.execution.accumulate = 2;
    half.stop_at = 3;
    half.checkpoint.save = dir;
    Ddp ddp(*world, DdpOptions{});
    Trainer first(half, &ddp);
    first.train(nullptr);
    // Accumulating two half batches is the full batch (as far as f32 rounding goes).
    TrainConfig config3 = config;
    config3.stop_at = 3;
    Trainer single3(config3);
    single3.train(nullptr);
    CHECK(max_relative_difference(first, single3) < 1e-5);
  }
  {
    // The same checkpoint continues at world 1 (the state is replicated) with the same data order.
    TrainConfig rest = config;
    rest.batch = config.batch / 2;
    rest.execution.accumulate = 2;
    rest.checkpoint.resume = dir;
    Trainer resumed(rest);
    REQUIRE(resumed.step() == 3);
    resumed.train(nullptr);
    CHECK(max_relative_difference(resumed, single) < 1e-5);
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
  (void)P;
}

namespace {

std::uint64_t checksum(const NamedTensors& params) {
  std::uint64_t hash = 1469598103934665603ULL;
  for (const auto& [name, p] : params) {
    std::vector<unsigned char> host(p.nbytes());
    p.copy_to_host(host.data());
    for (unsigned char byte : host) hash = (hash ^ byte) * 1099511628211ULL;
  }
  return hash;
}

// Every rank's checksum of the model equals rank 0's.
bool same_on_every_rank(Ddp& ddp, Trainer& trainer) {
  const std::uint64_t mine = checksum(trainer.model().named_parameters());
  const auto high = ddp.gather(static_cast<double>(mine >> 32)),
             low = ddp.gather(static_cast<double>(mine & 0xffffffffULL));
  for (std::size_t q = 1; q < high.size(); ++q) {
    if (high[q] != high[0] || low[q] != low[0]) return false;
  }
  return true;
}

std::int64_t optimizer_state_elements(Trainer& trainer) {
  std::int64_t elements = 0;
  for (const auto& [key, tensor] : trainer.optimizer().state_dict().tensors) elements += tensor.numel();
  return elements;
}

}  // namespace

TEST_CASE("ZeRO-1, 2 and 3 equal DDP (SGD and AdamW, f32 and bf16, every all-reduce), bitwise across ranks", "[ddp]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  for (OptimizerKind optimizer : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (const char* allreduce : {"ring", "native", "recursive_doubling", "halving_doubling", "auto"}) {
        // The sanitizer pass (TRAINLAB_TEST_QUICK) runs four of the twenty: SGD f32 ring, AdamW bf16
        // ring (the buffered pieces), AdamW f32 native, SGD f32 halving-doubling; make test runs all 20.
        const std::string arm = std::string(optimizer_name(optimizer)) + " " + dtype_name(dtype) + " " + allreduce;
        if (quick_tests() && arm != "sgd f32 ring" && arm != "adamw bf16 ring" && arm != "adamw f32 native" &&
            arm != "sgd f32 halving_doubling")
          continue;
        INFO(optimizer_name(optimizer) << " " << dtype_name(dtype) << " " << allreduce << ", " << P << " ranks");
        TrainConfig config = ddp_config();
        config.steps = 3;   // momentum and both AdamW moments in play; 16 runs (the sanitizer's time)
        config.batch = 12;  // 1-4 ranks (ctest: 2 and 4; 3 by hand)
        config.data.train_samples = 48;
        config.optimizer.kind = optimizer;
        config.optimizer.momentum = 0.9;
        config.optimizer.weight_decay = 0.01;
        config.optimizer.lr = config.optimizer.kind == OptimizerKind::adamw ? 1e-3 : 0.05;
        config.execution.dtype = dtype;
        // bf16 runs channels_last: its convolution gradients are not row-major, so their pieces
        // get buffers of their own instead of views of the local gradient.
        if (dtype == DType::bf16) config.execution.layout = MemoryFormat::channels_last;
        DdpOptions options;
        options.allreduce = parse_algorithm(allreduce);
        options.bucket_cap_mb = 0.05;  // several buckets, parameters cut across chunks
        options.first_bucket_mb = 0.01;
        Ddp plain_ddp(*world, options);
        Trainer plain(config, &plain_ddp);
        plain.train(nullptr);
        for (int stage : {1, 2, 3}) {
          // The sanitizer pass runs ZeRO-2 on the ring arms (its buckets' lives, views and buffered
          // pieces) and ZeRO-3 on the first (the gathers; its own case below runs the rest).
          if (stage == 2 && quick_tests() && std::string(allreduce) != "ring") continue;
          if (stage == 3 && quick_tests() && arm != "sgd f32 ring") continue;
          INFO("zero " << stage);
          options.zero = stage;
          Ddp zero_ddp(*world, options);
          Trainer sharded(config, &zero_ddp);
          sharded.train(nullptr);
          // ZeRO-3's parameters are shards between steps: whole for the comparison (a collective).
          const std::int64_t parameter_bytes = zero_ddp.parameter_bytes_held();
          FullParameters whole_parameters(&zero_ddp);
          const double difference = max_relative_difference(sharded, plain);
          if (world->rank() == 0)
            std::cout << "zero-" << stage << " " << optimizer_name(optimizer) << " " << dtype_name(dtype) << " "
                      << allreduce << " world " << P << ": max relative parameter difference " << difference
                      << " against DDP" << std::endl;
          // The same gradients (bit for bit with a hand-written algorithm, whose reduce-scatter is
          // its all-reduce's first half, auto choosing the same one for the same bucket; MPI's
          // reduce-scatter may sum in another order than its all-reduce) and the same elementwise
          // update on a slice of the vector (the reference backend's loop). ZeRO-3's buckets are the
          // model's parts, not DDP's: beyond 2 ranks a ring sums an element in another rank order.
          // DDP under auto keeps its buckets in the host's shared window from the built-in
          // single_copy_from (0): single-copy sums each element in rank order, the same bits at 2.
          const bool same_order = options.allreduce != Algorithm::automatic || P <= 2;
          if (options.allreduce != Algorithm::native && same_order && (stage < 3 || P <= 2)) {
            CHECK(difference == 0.0);
          } else {
            CHECK(difference < 1e-5);
          }
          CHECK(same_on_every_rank(zero_ddp, sharded));
          // The optimiser state is cut: each rank holds its pieces' (a ~1/P share; SGD without
          // state before a step has none).
          const std::int64_t whole = optimizer_state_elements(plain), mine = optimizer_state_elements(sharded);
          const auto everyone = zero_ddp.gather(mine);
          std::int64_t total = 0;
          for (std::int64_t e : everyone) total += e;
          CHECK(total == whole);
          CHECK(static_cast<double>(mine) <=
                static_cast<double>(whole) / P + 64.0 * static_cast<double>(plain_ddp.buckets().size()));
          // Between steps ZeRO-1 holds every gradient (the buckets), ZeRO-2 none: its buckets went
          // after their reduce-scatters, its shards after the step.
          std::int64_t gradient_bytes = 0;
          for (const auto& [name, p] : plain.model().named_parameters())
            gradient_bytes += static_cast<std::int64_t>(p.nbytes());
          const auto held = zero_ddp.gather(zero_ddp.gradient_bytes_held());
          std::int64_t held_total = 0;
          for (std::int64_t bytes : held) held_total += bytes;
          CHECK(held_total == (stage >= 2 ? 0 : P * gradient_bytes));
          // ZeRO-3 held 1/W of the parameters between steps: the shards add up to the whole.
          if (stage == 3) {
            std::int64_t shards_total = 0;
            for (std::int64_t bytes : zero_ddp.gather(parameter_bytes)) shards_total += bytes;
            CHECK(shards_total == gradient_bytes);
            CHECK(static_cast<double>(parameter_bytes) <= static_cast<double>(gradient_bytes) / P + 64.0 * 4);
          }
        }
      }
    }
  }
}

TEST_CASE("DDP's buckets in the host's shared window (single_copy, auto) equal the ring's; the gradients outlive DDP",
          "[ddp]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  TrainConfig config = ddp_config();
  config.steps = 3;
  config.batch = 12;  // 1-4 ranks
  config.data.train_samples = 48;
  const auto options_for = [](Algorithm algorithm, int zero) {
    DdpOptions options;
    options.allreduce = algorithm;
    options.zero = zero;
    options.bucket_cap_mb = 0.05;  // several buckets, each at its offset in the window
    options.first_bucket_mb = 0.01;
    return options;
  };
  Ddp ring_ddp(*world, options_for(Algorithm::ring, 0));
  Trainer ring(config, &ring_ddp);
  ring.train(nullptr);
  for (Algorithm algorithm : {Algorithm::single_copy, Algorithm::automatic}) {
    // The sanitizer pass runs single_copy (auto's window is the same code, its choice unit-tested).
    if (quick_tests() && algorithm == Algorithm::automatic) continue;
    INFO(algorithm_name(algorithm) << ", " << P << " ranks");
    auto ddp = std::make_unique<Ddp>(*world, options_for(algorithm, 0));
    Trainer replica(config, ddp.get());
    replica.train(nullptr);
    // MPI with every rank on this host: every bucket in the window (auto: from the built-in 0 bytes).
    if (P > 1)
      CHECK_THAT(ddp->describe(), Catch::Contains(fmt::format("{0} of {0} buckets single-copy (single-copy "
                                                              "over a shared window",
                                                              ddp->buckets().size())));
    // At 2 ranks one addition and the 1/2 scale: the ring's bits. Beyond, each element summed in
    // rank order, the ring's in another: f32's rounding.
    const double difference = max_relative_difference(replica, ring);
    INFO("max relative difference " << difference);
    if (P <= 2) {
      CHECK(difference == 0.0);
    } else {
      CHECK(difference < 1e-5);
    }
    CHECK(same_on_every_rank(*ddp, replica));
    // The gradients were views of the window; DDP's end frees it (a collective) and they keep
    // their values in this process's own memory.
    std::vector<std::vector<float>> before;
    for (const auto& [name, p] : replica.model().named_parameters()) before.push_back(p.grad().to_vector<float>());
    ddp.reset();
    const auto after = replica.model().named_parameters();
    for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].second.grad().to_vector<float>() == before[i]);
  }
  // Where the buckets cannot lie in the window, single_copy says why and runs the ring: the same bits.
  if (quick_tests()) return;
  Ddp zero_ddp(*world, options_for(Algorithm::single_copy, 1));
  Trainer sharded(config, &zero_ddp);
  sharded.train(nullptr);
  if (P > 1)
    CHECK_THAT(zero_ddp.describe(),
               Catch::Contains("single_copy: ZeRO-1 reduce-scatters its buckets; the ring reduces"));
  CHECK(max_relative_difference(sharded, ring) == 0.0);
}

TEST_CASE("ZeRO-1 checkpoints hold the whole state: resume sharded, unsharded or at world 1, bit for bit", "[ddp]") {
  auto world = MpiCommunicator::world();
  const std::string dir = shared_directory(*world, "zero");
  TrainConfig config = ddp_config();
  config.optimizer.kind = OptimizerKind::adamw;
  config.optimizer.lr = 1e-3;
  DdpOptions options;
  options.bucket_cap_mb = 0.05;
  options.first_bucket_mb = 0.01;
  options.allreduce = Algorithm::ring;
  options.zero = 1;
  // Straight through, sharded: the reference.
  Ddp straight_ddp(*world, options);
  Trainer straight(config, &straight_ddp);
  straight.train(nullptr);
  {
    TrainConfig first = config;
    first.stop_at = 3;
    first.checkpoint.save = dir;
    Ddp ddp(*world, options);
    Trainer trainer(first, &ddp);
    trainer.train(nullptr);
  }
  // The checkpoint is the unsharded state: every AdamW moment whole, as a single process writes it.
  {
    Trainer probe(config);
    probe.resume(dir);
    std::int64_t parameters = 0;
    for (const auto& [name, p] : probe.model().named_parameters()) parameters += p.numel();
    CHECK(optimizer_state_elements(probe) == 2 * parameters);
  }
  {
    // Resumed sharded at the same world: the same bits as straight through.
    TrainConfig rest = config;
    rest.checkpoint.resume = dir;
    Ddp ddp(*world, options);
    Trainer resumed(rest, &ddp);
    REQUIRE(resumed.step() == 3);
    resumed.train(nullptr);
    CHECK(checksum(resumed.model().named_parameters()) == checksum(straight.model().named_parameters()));
  }
  // The sanitizer pass leaves out the resumes as plain DDP and at world 1 (the ZeRO-2 and ZeRO-3
  // cases resume across stages, the accumulation case at world 1): CI time.
  if (!quick_tests()) {
    // Resumed as plain DDP (zero 0), and at world 1: the same run, as f32 rounding allows.
    TrainConfig rest = config;
    rest.checkpoint.resume = dir;
    DdpOptions plain = options;
    plain.zero = 0;
    Ddp ddp(*world, plain);
    Trainer unsharded(rest, &ddp);
    unsharded.train(nullptr);
    CHECK(max_relative_difference(unsharded, straight) < 1e-5);
    Trainer single(rest);
    single.train(nullptr);
    CHECK(max_relative_difference(single, straight) < 1e-5);
  }
  if (world->size() >= 4) {
    // Saved sharded over 4 ranks, resumed sharded over 2: the whole state is cut anew.
    auto pair = world->split(world->rank() < 2 ? 0 : -1, world->rank());
    if (pair) {
      TrainConfig rest = config;
      rest.checkpoint.resume = dir;
      Ddp ddp(*pair, options);
      Trainer resumed(rest, &ddp);
      resumed.train(nullptr);
      CHECK(max_relative_difference(resumed, straight) < 1e-5);
    }
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("ZeRO-1, 2 and 3 refuse f16 (its loss scaler would see one shard) and an unknown stage", "[ddp]") {
  auto world = MpiCommunicator::world();
  DdpOptions options;
  for (int stage : {4, -1}) {
    options.zero = stage;
    REQUIRE_THROWS_WITH(Ddp(*world, options),
                        Catch::Contains(fmt::format("zero {}", stage)) && Catch::Contains("0: replicated"));
  }
  for (int stage : {1, 2, 3}) {
    options.zero = stage;
    TrainConfig config = ddp_config();
    config.execution.dtype = DType::f16;
    Ddp ddp(*world, options);
    REQUIRE_THROWS_WITH(Trainer(config, &ddp), Catch::Contains("f16 with zero: 1, 2 or 3"));
  }
  world->barrier();
}

TEST_CASE("ZeRO-2 holds 1/W of the gradients from the reduce-scatters to the step, and none after", "[ddp]") {
  auto world = MpiCommunicator::world();
  const int P = world->size(), r = world->rank();
  Backend& be = get_backend("reference");
  // 1001 and 7 elements: neither divides by 2 or 4, so the last shards are shorter.
  Tensor w = Tensor::zeros({1001}, DType::f32, be).set_requires_grad(true);
  Tensor b = Tensor::zeros({7}, DType::f32, be).set_requires_grad(true);
  DdpOptions options;
  options.zero = 2;
  options.bucket_cap_mb = 2048.0 / (1024 * 1024);  // two buckets: b with w's tail, and w's head
  options.first_bucket_mb = 64.0 / (1024 * 1024);
  Ddp ddp(*world, options);
  ddp.attach({{"w", w}, {"b", b}});
  CHECK(ddp.gradient_bytes_held() == 0);  // nothing before the first backward
  ddp.begin_backward(true);
  // Rank r's gradient is (r + 1) everywhere: the average is (P + 1) / 2.
  const double factor = r + 1.0;
  Tensor loss = add(mul_scalar(sum(w), factor), mul_scalar(sum(b), factor));
  loss.backward();
  ddp.finish_backward();
  CHECK(!w.grad().defined());  // the buckets and the parameters' gradients went after their reduce-scatters
  CHECK(!b.grad().defined());
  const auto held = ddp.gather(ddp.gradient_bytes_held());
  std::int64_t total = 0;
  for (std::int64_t bytes : held) {
    CHECK(bytes <= (1008 / P + 2) * 4);  // this rank's chunk of each bucket
    total += bytes;
  }
  CHECK(total == 1008 * 4);  // the ranks' shards: one copy of the gradients
  for (const auto& [name, piece] : ddp.optimizer_parameters()) {
    for (float g : piece.grad().to_vector<float>()) REQUIRE(g == static_cast<float>((P + 1) / 2.0));
  }
  ddp.finish_step();
  CHECK(ddp.gradient_bytes_held() == 0);
  world->barrier();
}

TEST_CASE("ZeRO-2 under gradient accumulation and without bucket views equals DDP; its checkpoint resumes as ZeRO-1",
          "[ddp]") {
  auto world = MpiCommunicator::world();
  const std::string dir = shared_directory(*world, "zero2");
  TrainConfig config = ddp_config();
  config.steps = 4;
  config.batch = 12;                // 1-4 ranks (ctest: 2 and 4)
  config.execution.accumulate = 2;  // no_sync micro-steps: whole local gradients, then the buckets
  config.optimizer.kind = OptimizerKind::adamw;
  config.optimizer.lr = 1e-3;
  DdpOptions options;
  options.bucket_cap_mb = 0.05;
  options.first_bucket_mb = 0.01;
  options.allreduce = Algorithm::ring;
  Ddp plain_ddp(*world, options);
  Trainer plain(config, &plain_ddp);
  plain.train(nullptr);
  for (bool views : {true, false}) {
    if (quick_tests() && !views) continue;  // the sanitizer pass: the bucket views only
    INFO("gradient_as_bucket_view " << views);
    DdpOptions sharded_options = options;
    sharded_options.zero = 2;
    sharded_options.gradient_as_bucket_view = views;
    Ddp ddp(*world, sharded_options);
    Trainer sharded(config, &ddp);
    sharded.train(nullptr);
    CHECK(max_relative_difference(sharded, plain) == 0.0);
    CHECK(same_on_every_rank(ddp, sharded));
  }
  {
    TrainConfig first = config;
    first.stop_at = 2;
    first.checkpoint.save = dir;
    DdpOptions sharded_options = options;
    sharded_options.zero = 2;
    Ddp ddp(*world, sharded_options);
    Trainer trainer(first, &ddp);
    trainer.train(nullptr);
  }
  {
    // The checkpoint is the whole state, whatever the stage: resumed under ZeRO-1, the same bits.
    TrainConfig rest = config;
    rest.checkpoint.resume = dir;
    DdpOptions sharded_options = options;
    sharded_options.zero = 1;
    Ddp ddp(*world, sharded_options);
    Trainer resumed(rest, &ddp);
    REQUIRE(resumed.step() == 2);
    resumed.train(nullptr);
    CHECK(checksum(resumed.model().named_parameters()) == checksum(plain.model().named_parameters()));
    // And at world 1, unsharded: the same run as f32 rounding allows.
    Trainer single(rest);
    single.train(nullptr);
    CHECK(max_relative_difference(single, plain) < 1e-5);
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE(
    "ZeRO-3 under accumulation, recompute and without bucket views equals DDP; evaluates; checkpoints cross "
    "stages both ways",
    "[ddp]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  const std::string dir = shared_directory(*world, "zero3");
  TrainConfig config = ddp_config();
  config.steps = 4;
  config.batch = 12;                // 1-4 ranks (ctest: 2 and 4)
  config.execution.accumulate = 2;  // no_sync micro-steps: the parameters gathered and released in each
  config.optimizer.kind = OptimizerKind::adamw;
  config.optimizer.lr = 1e-3;
  DdpOptions options;
  options.allreduce = Algorithm::ring;
  Ddp plain_ddp(*world, options);
  Trainer plain(config, &plain_ddp);
  plain.train(nullptr);
  const EvalResult plain_eval = plain.evaluate();
  // ZeRO-3's buckets are the model's parts, DDP's are not: beyond 2 ranks the ring sums an
  // element in another rank order (equal within f32's rounding); at 2 ranks the same bits.
  const double tolerance = P <= 2 ? 0.0 : 1e-5;
  DdpOptions zero3 = options;
  zero3.zero = 3;
  for (bool views : {true, false}) {
    for (Recompute recompute : {Recompute::none, Recompute::all}) {
      if (quick_tests() && (!views || recompute != Recompute::none)) continue;  // the sanitizer pass: one arm
      INFO("gradient_as_bucket_view " << views << ", recompute " << recompute_name(recompute));
      TrainConfig c = config;
      c.execution.recompute = recompute;
      DdpOptions o = zero3;
      o.gradient_as_bucket_view = views;
      Ddp ddp(*world, o);
      Trainer sharded(c, &ddp);
      sharded.train(nullptr);
      // Evaluation runs the parts as the step does: gathered and released one by one, nothing left.
      const EvalResult eval = sharded.evaluate();
      CHECK(std::abs(eval.loss - plain_eval.loss) <= tolerance * std::abs(plain_eval.loss) + (P <= 2 ? 0.0 : 1e-6));
      CHECK(ddp.gradient_bytes_held() == 0);
      std::int64_t whole = 0;
      for (const auto& [name, p] : plain.model().named_parameters()) whole += static_cast<std::int64_t>(p.nbytes());
      CHECK(static_cast<double>(ddp.parameter_bytes_held()) <= static_cast<double>(whole) / P + 64.0);
      FullParameters whole_parameters(&ddp);
      if (tolerance == 0.0) {
        CHECK(max_relative_difference(sharded, plain) == 0.0);
      } else {
        CHECK(max_relative_difference(sharded, plain) < tolerance);
      }
      CHECK(same_on_every_rank(ddp, sharded));
    }
  }
  // A ZeRO-3 checkpoint resumed under ZeRO-1, and a ZeRO-1 one under ZeRO-3: the whole state both ways.
  for (int saved_stage : {3, 1}) {
    if (quick_tests() && saved_stage == 1) continue;  // the sanitizer pass: one direction (the gathers on save)
    const int resumed_stage = saved_stage == 3 ? 1 : 3;
    INFO("saved under zero " << saved_stage << ", resumed under zero " << resumed_stage);
    {
      TrainConfig first = config;
      first.stop_at = 2;
      first.checkpoint.save = dir;
      DdpOptions o = options;
      o.zero = saved_stage;
      Ddp ddp(*world, o);
      Trainer trainer(first, &ddp);
      trainer.train(nullptr);
    }
    TrainConfig rest = config;
    rest.checkpoint.resume = dir;
    DdpOptions o = options;
    o.zero = resumed_stage;
    Ddp ddp(*world, o);
    Trainer resumed(rest, &ddp);
    REQUIRE(resumed.step() == 2);
    resumed.train(nullptr);
    FullParameters whole_parameters(&ddp);
    if (tolerance == 0.0) {
      CHECK(max_relative_difference(resumed, plain) == 0.0);
    } else {
      CHECK(max_relative_difference(resumed, plain) < tolerance);
    }
    world->barrier();
    if (world->rank() == 0) fs::remove_all(dir);
    world->barrier();
  }
}

TEST_CASE("recompute under DDP and ZeRO-1: the gradient hooks fire through recomputed blocks, same bits", "[ddp]") {
  auto world = MpiCommunicator::world();
  for (int zero : {0, 1}) {
    // The sanitizer pass (TRAINLAB_TEST_QUICK) runs ZeRO-1 only: its hooks are DDP's, then the shards.
    if (quick_tests() && zero == 0) continue;
    INFO("zero " << zero);
    TrainConfig config = ddp_config();
    config.steps = 3;
    DdpOptions options;
    options.allreduce = Algorithm::ring;
    options.bucket_cap_mb = 0.05;
    options.first_bucket_mb = 0.01;
    options.zero = zero;
    Ddp plain_ddp(*world, options);
    Trainer plain(config, &plain_ddp);
    plain.train(nullptr);
    config.execution.recompute = Recompute::all;
    Ddp recomputed_ddp(*world, options);
    Trainer recomputed(config, &recomputed_ddp);
    recomputed.train(nullptr);
    CHECK(checksum(recomputed.model().named_parameters()) == checksum(plain.model().named_parameters()));
  }
}

TEST_CASE("ZeRO-1 with communication off (bench_scaling's paired runs) still updates every rank's pieces", "[ddp]") {
  auto world = MpiCommunicator::world();
  TrainConfig config = ddp_config();
  config.steps = 2;
  DdpOptions options;
  options.zero = 1;
  Ddp ddp(*world, options);
  ddp.set_communication(false);
  Trainer trainer(config, &ddp);
  const NamedTensors before = [&] {
    NamedTensors copy;
    for (const auto& [name, p] : trainer.model().named_parameters()) copy.emplace_back(name, p.clone());
    return copy;
  }();
  trainer.train(nullptr);
  // This rank's pieces moved (its own gradient, no all-gather); the others' did not, here.
  std::int64_t moved = 0;
  const auto after = trainer.model().named_parameters();
  for (std::size_t i = 0; i < after.size(); ++i) {
    const auto a = after[i].second.to_vector<float>(), b = before[i].second.to_vector<float>();
    for (std::size_t j = 0; j < a.size(); ++j) moved += a[j] != b[j] ? 1 : 0;
  }
  std::int64_t owned = 0;
  for (const auto& [name, piece] : ddp.optimizer_parameters()) owned += piece.numel();
  CHECK(moved > 0);
  CHECK(moved <= owned);
  world->barrier();
}
