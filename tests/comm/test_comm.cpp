// The comm layer under mpirun (np 2 and 4; the latency-optimal algorithms and the hierarchical one at
// np 5 too): the ring all-reduce, recursive doubling, halving-doubling and the two-level all-reduce
// against MPI_Allreduce and each other, exactly on
// integer-valued data and within a tolerance on random data, the single-copy all-reduce in its shared window, uneven
// lengths, every dtype, sum and average, sub-communicators, and bitwise identity of the result across ranks.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/hierarchical_allreduce.h"
#include "comm/latency_allreduce.h"
#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"
#include "comm/single_copy_allreduce.h"
#include "engine/core/rng.h"

using namespace trainlab;
using namespace trainlab::comm;

namespace {

// Values of dtype T from doubles.
template <typename T>
std::vector<T> make(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(static_cast<float>(v[i]));
  return out;
}
template <>
std::vector<double> make<double>(const std::vector<double>& v) {
  return v;
}

std::vector<double> integers(std::int64_t n, std::uint64_t seed, int lo, int hi) {
  Generator gen(seed);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = lo + static_cast<double>(gen.below(static_cast<std::uint64_t>(hi - lo + 1)));
  return v;
}

std::vector<double> normals(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = gen.normal();
  return v;
}

// A 64-bit hash of a buffer, equal on every rank iff the bytes are (checked with MPI_MAX/MIN).
std::uint64_t fnv(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Within `comm`: rank 0's hash broadcast, each rank compares, the mismatches summed.
bool same_on_every_rank(Communicator& comm, const void* data, std::size_t bytes) {
  std::uint64_t root_hash = fnv(data, bytes);
  const std::uint64_t mine = root_hash;
  comm.broadcast(&root_hash, sizeof root_hash, 0);
  double mismatches = root_hash == mine ? 0.0 : 1.0;
  comm.allreduce_native(&mismatches, 1, DType::f64, ReduceOp::sum);
  return mismatches == 0.0;
}

template <typename T>
void check_exact(Communicator& comm, DType dtype, std::int64_t n, ReduceOp op, int bound) {
  INFO("dtype " << dtype_name(dtype) << " n " << n << " op " << (op == ReduceOp::sum ? "sum" : "average") << " ranks "
                << comm.size());
  const auto values =
      integers(n, 1000 + static_cast<std::uint64_t>(comm.rank()) * 7 + static_cast<std::uint64_t>(n), -bound, bound);
  auto ring = make<T>(values), native = make<T>(values);
  ring_allreduce(comm, ring.data(), n, dtype, op, RingOptions{4096});  // small segments: many pipeline steps
  comm.allreduce_native(native.data(), n, dtype, op);
  CHECK((ring.empty() || std::memcmp(ring.data(), native.data(), ring.size() * sizeof(T)) == 0));
  CHECK(same_on_every_rank(comm, ring.data(), ring.size() * sizeof(T)));
}

}  // namespace

TEST_CASE("ring equals MPI_Allreduce exactly on integer-valued data", "[comm]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{P - 1}, std::int64_t{7}, std::int64_t{1000},
                         std::int64_t{12345}, std::int64_t{(1 << 18) + 3}}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
      check_exact<float>(*world, DType::f32, n, op, 1000);
      check_exact<double>(*world, DType::f64, n, op, 1000);
      // Partial sums stay exactly representable: bf16 holds integers to 256, f16 to 2048.
      check_exact<bf16>(*world, DType::bf16, n, op, 256 / (2 * P));
      check_exact<f16>(*world, DType::f16, n, op, 2048 / (2 * P));
    }
  }
}

TEST_CASE("ring matches MPI_Allreduce on random data within tolerance, identically on every rank", "[comm]") {
  auto world = MpiCommunicator::world();
  for (std::int64_t n : {std::int64_t{5}, std::int64_t{100003}, std::int64_t{1 << 20}}) {
    INFO("n " << n);
    const auto values = normals(n, 77 + static_cast<std::uint64_t>(world->rank()));
    std::vector<float> ring(values.begin(), values.end()), native = ring;
    ring_allreduce(*world, ring.data(), n, DType::f32, ReduceOp::sum);
    world->allreduce_native(native.data(), n, DType::f32, ReduceOp::sum);
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      diff += (ring[i] - native[i]) * static_cast<double>(ring[i] - native[i]);
      norm += native[i] * static_cast<double>(native[i]);
    }
    CHECK(std::sqrt(diff / norm) < 1e-6);  // f32 sums of P terms in another order
    CHECK(same_on_every_rank(*world, ring.data(), ring.size() * sizeof(float)));
    // bf16: each hop adds in f32 and rounds to bf16.
    auto ring16 = make<bf16>(values), native16 = ring16;
    ring_allreduce(*world, ring16.data(), n, DType::bf16, ReduceOp::average);
    world->allreduce_native(native16.data(), n, DType::bf16, ReduceOp::average);
    double diff16 = 0, norm16 = 0;
    for (std::size_t i = 0; i < ring16.size(); ++i) {
      const double a = static_cast<float>(ring16[i]), b = static_cast<float>(native16[i]);
      diff16 += (a - b) * (a - b);
      norm16 += b * b;
    }
    CHECK(std::sqrt(diff16 / norm16) < 1e-2);
    CHECK(same_on_every_rank(*world, ring16.data(), ring16.size() * sizeof(bf16)));
  }
}

TEST_CASE("reduce-scatter and all-gather, ring and native: chunk r at rank r, exact, the all-reduce's halves",
          "[comm]") {
  auto world = MpiCommunicator::world();
  const int P = world->size(), r = world->rank();
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{P - 1}, std::int64_t{P}, std::int64_t{7}, std::int64_t{1000},
                         std::int64_t{(1 << 18) + 3}}) {
    INFO("n " << n << ", " << P << " ranks");
    // The chunks tile the buffer, the first n % P one longer.
    std::int64_t next = 0;
    for (int c = 0; c < P; ++c) {
      const ChunkRange chunk = shard_chunk(n, P, c);
      CHECK(chunk.begin == next);
      CHECK(chunk.count == n / P + (c < n % P ? 1 : 0));
      next += chunk.count;
    }
    CHECK(next == n);
    const ChunkRange mine = shard_chunk(n, P, r);
    const auto values =
        integers(n, 500 + static_cast<std::uint64_t>(r) * 13 + static_cast<std::uint64_t>(n), -100, 100);
    std::vector<float> expected(values.begin(), values.end());
    world->allreduce_native(expected.data(), n, DType::f32, ReduceOp::average);
    for (Algorithm algorithm : {Algorithm::ring, Algorithm::native}) {
      INFO(algorithm_name(algorithm));
      std::vector<float> data(values.begin(), values.end());
      reduce_scatter(*world, data.data(), n, DType::f32, ReduceOp::average, algorithm);
      // Integer sums are exact; the average's 1/P scaling is one rounding, the same in both.
      CHECK(std::memcmp(data.data() + mine.begin, expected.data() + mine.begin,
                        static_cast<std::size_t>(mine.count) * sizeof(float)) == 0);
      // The all-gather: every rank contributes its chunk (garbage elsewhere must not leak in).
      for (std::int64_t i = 0; i < n; ++i) {
        if (i < mine.begin || i >= mine.begin + mine.count) data[static_cast<std::size_t>(i)] = -12345.0f;
      }
      allgather(*world, data.data(), n, DType::f32, algorithm);
      CHECK(data == expected);
    }
    // On random data the ring's reduce-scatter is bit for bit its all-reduce's first half.
    const auto noise = normals(n, 900 + static_cast<std::uint64_t>(r));
    std::vector<float> whole(noise.begin(), noise.end()), half = whole;
    ring_allreduce(*world, whole.data(), n, DType::f32, ReduceOp::average, RingOptions{4096});
    ring_reduce_scatter(*world, half.data(), n, DType::f32, ReduceOp::average, RingOptions{4096});
    CHECK(std::memcmp(half.data() + mine.begin, whole.data() + mine.begin,
                      static_cast<std::size_t>(mine.count) * sizeof(float)) == 0);
    ring_allgather(*world, half.data(), n, DType::f32, RingOptions{4096});
    CHECK(half == whole);
    // bf16 through the ring: f32 accumulation, rounded per hop, as the all-reduce does.
    auto whole16 = make<bf16>(noise), half16 = whole16;
    ring_allreduce(*world, whole16.data(), n, DType::bf16, ReduceOp::sum);
    ring_reduce_scatter(*world, half16.data(), n, DType::bf16, ReduceOp::sum);
    ring_allgather(*world, half16.data(), n, DType::bf16);
    CHECK(std::memcmp(half16.data(), whole16.data(), half16.size() * sizeof(bf16)) == 0);
  }
}

namespace {

// The latency-optimal algorithms on integer-valued data: the ring's result bit for bit, the same
// bits on every rank.
template <typename T>
void check_latency_exact(Communicator& comm, DType dtype, std::int64_t n, ReduceOp op, int bound) {
  INFO("dtype " << dtype_name(dtype) << " n " << n << " op " << (op == ReduceOp::sum ? "sum" : "average") << " ranks "
                << comm.size());
  const auto values =
      integers(n, 3000 + static_cast<std::uint64_t>(comm.rank()) * 13 + static_cast<std::uint64_t>(n), -bound, bound);
  auto ring = make<T>(values), doubling = make<T>(values), halving = make<T>(values);
  ring_allreduce(comm, ring.data(), n, dtype, op);
  recursive_doubling_allreduce(comm, doubling.data(), n, dtype, op);
  halving_doubling_allreduce(comm, halving.data(), n, dtype, op);
  const std::size_t bytes = ring.size() * sizeof(T);
  CHECK((bytes == 0 || std::memcmp(doubling.data(), ring.data(), bytes) == 0));
  CHECK((bytes == 0 || std::memcmp(halving.data(), ring.data(), bytes) == 0));
  CHECK(same_on_every_rank(comm, doubling.data(), bytes));
  CHECK(same_on_every_rank(comm, halving.data(), bytes));
  // The halves (ZeRO-1): the reduce-scatter leaves this rank its chunk as the ring does; the
  // all-gather brings every rank's chunk, and what lies elsewhere in the buffer must not leak in.
  const ChunkRange mine = shard_chunk(n, comm.size(), comm.rank());
  auto halves = make<T>(values);
  halving_doubling_reduce_scatter(comm, halves.data(), n, dtype, op);
  const auto at = static_cast<std::size_t>(mine.begin);
  CHECK((mine.count == 0 || std::memcmp(halves.data() + at, ring.data() + at, mine.count * sizeof(T)) == 0));
  for (std::int64_t i = 0; i < n; ++i)
    if (i < mine.begin || i >= mine.begin + mine.count) halves[static_cast<std::size_t>(i)] = T(-77.0f);
  recursive_doubling_allgather(comm, halves.data(), n, dtype);
  CHECK((bytes == 0 || std::memcmp(halves.data(), ring.data(), bytes) == 0));
}

}  // namespace

TEST_CASE(
    "recursive doubling and halving-doubling equal the ring bit for bit at every group size and so do their halves",
    "[comm][np5]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  // Every group of the first k ranks: powers of two and the folded sizes between them.
  for (int k = 1; k <= P; ++k) {
    auto group = world->split(world->rank() < k ? 0 : -1, world->rank());
    if (group == nullptr) continue;
    // 1009 and 3001 elements: messages cut into 2-4 eager pieces over shared memory (uneven, some
    // mid-element), 1001: one piece, 2^16 + 3: too many pieces, one message.
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{k - 1}, std::int64_t{7}, std::int64_t{1001},
                           std::int64_t{1009}, std::int64_t{3001}, std::int64_t{(1 << 16) + 3}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        check_latency_exact<float>(*group, DType::f32, n, op, 1000);
        check_latency_exact<double>(*group, DType::f64, n, op, 1000);
        check_latency_exact<bf16>(*group, DType::bf16, n, op, 256 / (2 * k));
        check_latency_exact<f16>(*group, DType::f16, n, op, 2048 / (2 * k));
      }
    }
    // Random data: not the ring's bits (another order of additions), but the same bits on every rank
    // and the same sum within rounding.
    const auto values = normals(4099, 91 + static_cast<std::uint64_t>(group->rank()));
    std::vector<float> ring(values.begin(), values.end()), doubling = ring, halving = ring;
    ring_allreduce(*group, ring.data(), 4099, DType::f32, ReduceOp::average);
    recursive_doubling_allreduce(*group, doubling.data(), 4099, DType::f32, ReduceOp::average);
    halving_doubling_allreduce(*group, halving.data(), 4099, DType::f32, ReduceOp::average);
    for (std::size_t i = 0; i < ring.size(); ++i) {
      REQUIRE(doubling[i] == Approx(ring[i]).margin(1e-5));
      REQUIRE(halving[i] == Approx(ring[i]).margin(1e-5));
    }
    CHECK(same_on_every_rank(*group, doubling.data(), doubling.size() * sizeof(float)));
    CHECK(same_on_every_rank(*group, halving.data(), halving.size() * sizeof(float)));
    auto bf_doubling = make<bf16>(values), bf_halving = bf_doubling;
    recursive_doubling_allreduce(*group, bf_doubling.data(), 4099, DType::bf16, ReduceOp::sum);
    halving_doubling_allreduce(*group, bf_halving.data(), 4099, DType::bf16, ReduceOp::sum);
    CHECK(same_on_every_rank(*group, bf_doubling.data(), bf_doubling.size() * sizeof(bf16)));
    CHECK(same_on_every_rank(*group, bf_halving.data(), bf_halving.size() * sizeof(bf16)));
    // On random data each algorithm's reduce-scatter then all-gather is bit for bit its all-reduce
    // (what makes a ZeRO-1 run's gradients plain DDP's), auto's choice by size included.
    AlgorithmThresholds thresholds;
    thresholds.recursive_doubling_below = 4099 * 4;  // 4099 floats: halving-doubling; 4000: recursive doubling
    thresholds.ring_from = 5000 * 4;                 // 5003: the ring
    const auto more = normals(5003, 191 + static_cast<std::uint64_t>(group->rank()));
    for (std::int64_t n : {std::int64_t{4000}, std::int64_t{4099}, std::int64_t{5003}}) {
      for (Algorithm algorithm :
           {Algorithm::ring, Algorithm::recursive_doubling, Algorithm::halving_doubling, Algorithm::automatic}) {
        INFO(algorithm_name(algorithm) << " n " << n << " group " << k);
        std::vector<float> whole(more.begin(), more.begin() + n), halves = whole;
        allreduce(*group, whole.data(), n, DType::f32, ReduceOp::average, algorithm, thresholds);
        reduce_scatter(*group, halves.data(), n, DType::f32, ReduceOp::average, algorithm, thresholds);
        allgather(*group, halves.data(), n, DType::f32, algorithm, thresholds);
        CHECK(std::memcmp(halves.data(), whole.data(), whole.size() * sizeof(float)) == 0);
      }
    }
  }
  world->barrier();
}

TEST_CASE("ring on sub-communicators", "[comm]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  // The scaling study's groups: the first k ranks, for every k that fits.
  for (int k = 1; k <= P; k *= 2) {
    INFO("group of the first " << k << " ranks");
    auto group = world->split(world->rank() < k ? 0 : -1, world->rank());
    if (world->rank() >= k) {
      CHECK(group == nullptr);
      continue;
    }
    REQUIRE(group != nullptr);
    CHECK(group->size() == k);
    CHECK(group->rank() == world->rank());
    check_exact<float>(*group, DType::f32, 999, ReduceOp::sum, 100);
  }
  world->barrier();
}

TEST_CASE("the eager limit: the same on every rank and both ways, none to itself; shared memory's, or none over TCP",
          "[comm]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  std::vector<double> mine(static_cast<std::size_t>(P)), all(static_cast<std::size_t>(P * P));
  for (int q = 0; q < P; ++q) mine[static_cast<std::size_t>(q)] = static_cast<double>(world->eager_limit(q));
  MPI_Allgather(mine.data(), P, MPI_DOUBLE, all.data(), P, MPI_DOUBLE, world->handle());
  const auto at = [&](int r, int q) { return all[static_cast<std::size_t>(r * P + q)]; };
  const char* btl = std::getenv("OMPI_MCA_btl");
  const bool tcp_only = btl != nullptr && std::strstr(btl, "tcp") != nullptr && std::strstr(btl, "vader") == nullptr;
  for (int r = 0; r < P; ++r) {
    CHECK(at(r, r) == 0.0);
    for (int q = 0; q < P; ++q) {
      INFO("rank " << r << " to " << q << (tcp_only ? " over TCP" : ""));
      CHECK(at(r, q) == at(q, r));
      if (q != r) CHECK(at(r, q) == (tcp_only ? 0.0 : at(0, P - 1)));  // one host in these tests
    }
  }
  // Open MPI's shared memory by default: btl_vader_eager_limit 4096, less the header's allowance.
  if (!tcp_only && P > 1 && world->library_version().find("Open MPI") != std::string::npos) CHECK(at(0, 1) > 0.0);
}

TEST_CASE("broadcast and barrier", "[comm]") {
  auto world = MpiCommunicator::world();
  std::vector<double> v(1000, world->rank() == 0 ? 3.5 : -1.0);
  world->broadcast(v.data(), v.size() * sizeof(double), 0);
  for (double x : v) CHECK(x == 3.5);
  world->barrier();
  CHECK(parse_algorithm("ring") == Algorithm::ring);
  CHECK_THROWS_WITH(parse_algorithm("tree"), Catch::Contains("unknown all-reduce 'tree'"));
}

namespace {

// The hierarchical all-reduce on integer-valued data: the ring's result bit for bit, the same bits
// on every rank; its phases alone: the node's sum.
template <typename T>
void check_hierarchical_exact(Communicator& world, Hierarchy& h, DType dtype, std::int64_t n, ReduceOp op, int bound) {
  INFO("dtype " << dtype_name(dtype) << " n " << n << " op " << (op == ReduceOp::sum ? "sum" : "average") << " "
                << h.describe());
  const auto values =
      integers(n, 5000 + static_cast<std::uint64_t>(world.rank()) * 17 + static_cast<std::uint64_t>(n), -bound, bound);
  auto ring = make<T>(values), two = make<T>(values), node = make<T>(values), node_native = make<T>(values);
  ring_allreduce(world, ring.data(), n, dtype, op);
  hierarchical_allreduce(h, two.data(), n, dtype, op);
  const std::size_t bytes = ring.size() * sizeof(T);
  CHECK((bytes == 0 || std::memcmp(two.data(), ring.data(), bytes) == 0));
  CHECK(same_on_every_rank(world, two.data(), bytes));
  h.reduce_scatter_inside(node.data(), n, dtype, op);
  h.allgather_inside(node.data(), n, dtype);
  h.node().allreduce_native(node_native.data(), n, dtype, op);
  CHECK((bytes == 0 || std::memcmp(node.data(), node_native.data(), bytes) == 0));
}

}  // namespace

TEST_CASE("the hierarchical all-reduce equals the ring bit for bit at every node size and both ways inside a node",
          "[comm][hierarchical][np5]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  for (int g = 1; g <= P; ++g) {
    if (P % g != 0) {
      CHECK_THROWS_WITH(node_map_by_size(*world, g),
                        Catch::Contains("node size " + std::to_string(g) + " must divide the world's"));
      continue;
    }
    const NodeMap map = node_map_by_size(*world, g);
    CHECK(map.node == world->rank() / g);
    CHECK(map.local == world->rank() % g);
    for (IntraNode intra : {IntraNode::shared_memory, IntraNode::point_to_point}) {
      Hierarchy h(*world, map, intra);
      // One host: shared memory whenever it is asked for, whatever transport carries the messages.
      CHECK(h.intra() == intra);
      for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{g - 1}, std::int64_t{7}, std::int64_t{1001},
                             std::int64_t{(1 << 16) + 3}}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
          check_hierarchical_exact<float>(*world, h, DType::f32, n, op, 1000);
          check_hierarchical_exact<double>(*world, h, DType::f64, n, op, 1000);
          check_hierarchical_exact<bf16>(*world, h, DType::bf16, n, op, 256 / (4 * P));
          check_hierarchical_exact<f16>(*world, h, DType::f16, n, op, 2048 / (4 * P));
        }
      }
      // Random data: another order of additions than the ring's, the same bits on every rank, the
      // same average within rounding; repeated calls (the shared buffers used by turns) agree.
      const auto values = normals(4099, 77 + static_cast<std::uint64_t>(world->rank()));
      std::vector<float> ring(values.begin(), values.end()), two = ring, again = ring;
      ring_allreduce(*world, ring.data(), 4099, DType::f32, ReduceOp::average);
      hierarchical_allreduce(h, two.data(), 4099, DType::f32, ReduceOp::average);
      hierarchical_allreduce(h, again.data(), 4099, DType::f32, ReduceOp::average);
      for (std::size_t i = 0; i < ring.size(); ++i) REQUIRE(two[i] == Approx(ring[i]).margin(1e-5));
      CHECK(two == again);
      CHECK(same_on_every_rank(*world, two.data(), two.size() * sizeof(float)));
      auto bf = make<bf16>(values);
      hierarchical_allreduce(h, bf.data(), 4099, DType::bf16, ReduceOp::sum, Algorithm::automatic);
      CHECK(same_on_every_rank(*world, bf.data(), bf.size() * sizeof(bf16)));
    }
  }
  world->barrier();
}

namespace {

// The single-copy all-reduce on integer-valued data written into its buffer: MPI_Allreduce's
// result bit for bit, the same bits on every rank.
template <typename T>
void check_single_copy_exact(Communicator& world, SingleCopyAllreduce& sc, DType dtype, std::int64_t n, ReduceOp op,
                             int bound, std::uint64_t seed) {
  INFO("dtype " << dtype_name(dtype) << " n " << n << " op " << (op == ReduceOp::sum ? "sum" : "average") << " "
                << sc.describe());
  const auto values = integers(n, seed + static_cast<std::uint64_t>(world.rank()) * 31, -bound, bound);
  auto native = make<T>(values);
  const auto mine = make<T>(values);
  const std::size_t bytes = mine.size() * sizeof(T);
  if (bytes > 0) std::memcpy(sc.buffer(), mine.data(), bytes);
  sc.allreduce(n, dtype, op);
  world.allreduce_native(native.data(), n, dtype, op);
  CHECK((bytes == 0 || std::memcmp(sc.buffer(), native.data(), bytes) == 0));
  CHECK(same_on_every_rank(world, sc.buffer(), bytes));
}

}  // namespace

TEST_CASE("the single-copy all-reduce equals MPI_Allreduce bit for bit in its shared window, and the ring without one",
          "[comm]") {
  auto world = MpiCommunicator::world();
  const int P = world->size();
  for (bool share : {true, false}) {
    SingleCopyAllreduce sc(*world, ((1 << 16) + 3) * sizeof(double), share);
    CHECK(sc.shared() == share);  // every rank on this host: a window whenever it is asked for
    CHECK_THAT(sc.describe(), Catch::Contains(share ? "single-copy over a shared window" : "the ring"));
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{P - 1}, std::int64_t{7}, std::int64_t{1001},
                           std::int64_t{(1 << 16) + 3}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        check_single_copy_exact<float>(*world, sc, DType::f32, n, op, 1000, 7000);
        check_single_copy_exact<double>(*world, sc, DType::f64, n, op, 1000, 7001);
        check_single_copy_exact<bf16>(*world, sc, DType::bf16, n, op, 256 / (2 * P), 7002);
        check_single_copy_exact<f16>(*world, sc, DType::f16, n, op, 2048 / (2 * P), 7003);
      }
    }
    // Back to back with new data each time: a rank that refills its segment early must not reach
    // into a call its peers are still reading (the closing fence).
    for (std::uint64_t round = 0; round < 20; ++round)
      check_single_copy_exact<float>(*world, sc, DType::f32, 4099 + static_cast<std::int64_t>(round), ReduceOp::sum,
                                     1000, 9000 + round);
    CHECK_THROWS_WITH(sc.allreduce((1 << 16) + 4, DType::f64, ReduceOp::sum),
                      Catch::Contains("65540 elements of f64") && Catch::Contains("do not fit"));
    CHECK_THROWS_WITH(sc.allreduce(4, DType::i64, ReduceOp::sum), Catch::Contains("dtype i64"));
  }
  world->barrier();
}
