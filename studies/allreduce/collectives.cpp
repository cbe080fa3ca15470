#include "studies/allreduce/collectives.h"

#include <cstring>
#include <memory>

#include "backends/error.h"
#include "comm/latency_allreduce.h"
#include "engine/core/rng.h"

namespace trainlab::bench {

namespace {

using comm::ReduceOp;

// One arm's call on a buffer of the communicator's memory.
void call_arm(Collective collective, const std::string& arm, const CaseInputs& in, void* data, std::int64_t count) {
  comm::Communicator& c = in.comm;
  switch (collective) {
    case Collective::reduce_scatter:
      if (arm == "ring") return comm::ring_reduce_scatter(c, data, count, in.dtype, ReduceOp::sum, in.ring_options);
      if (arm == "halving_doubling")
        return comm::halving_doubling_reduce_scatter(c, data, count, in.dtype, ReduceOp::sum);
      return c.reduce_scatter_native(data, count, in.dtype, ReduceOp::sum);
    case Collective::allgather:
      if (arm == "ring") return comm::ring_allgather(c, data, count, in.dtype, in.ring_options);
      if (arm == "recursive_doubling") return comm::recursive_doubling_allgather(c, data, count, in.dtype);
      return c.allgather_native(data, count, in.dtype);
    case Collective::broadcast:
      return c.broadcast(data, static_cast<std::size_t>(count * in.elem), 0);
    case Collective::allreduce:
      break;
  }
  throw Error("collective_case: the all-reduce has its own (bench_allreduce's size_case)");
}

// This rank's input and the answer it must end with (the part of it that is checked: [begin, begin + n)).
struct Expected {
  std::vector<unsigned char> input, answer;
  std::int64_t begin = 0, n = 0;
};
Expected expected_of(Collective collective, const CaseInputs& in, std::int64_t count) {
  const int P = in.world.size(), r = in.world.rank();
  const auto bytes = static_cast<std::size_t>(count * in.elem);
  Expected e;
  e.input.resize(bytes);
  e.answer.resize(bytes);
  fill_integers(e.input, count, in.dtype, r, P);
  std::vector<unsigned char> other(bytes);
  switch (collective) {
    case Collective::reduce_scatter: {  // this rank's chunk of the exact sum
      e.answer = e.input;
      in.world.allreduce_native(e.answer.data(), count, in.dtype, ReduceOp::sum);
      const comm::ChunkRange mine = comm::shard_chunk(count, P, r);
      e.begin = mine.begin;
      e.n = mine.count;
      break;
    }
    case Collective::allgather: {  // chunk c from rank c's data; this rank holds stale values elsewhere
      std::vector<unsigned char> stale(bytes);
      fill_integers(stale, count, in.dtype, P + r + 1, P);
      for (int c = 0; c < P; ++c) {
        fill_integers(other, count, in.dtype, c, P);
        const comm::ChunkRange chunk = comm::shard_chunk(count, P, c);
        const auto at = static_cast<std::size_t>(chunk.begin * in.elem);
        const auto n = static_cast<std::size_t>(chunk.count * in.elem);
        std::memcpy(e.answer.data() + at, other.data() + at, n);
        if (c != r) std::memcpy(e.input.data() + at, stale.data() + at, n);
      }
      e.n = count;
      break;
    }
    default:  // broadcast: rank 0's data everywhere
      fill_integers(e.answer, count, in.dtype, 0, P);
      e.n = count;
      break;
  }
  return e;
}

}  // namespace

void fill_integers(std::vector<unsigned char>& data, std::int64_t count, DType dtype, int rank, int ranks) {
  Generator gen(static_cast<std::uint64_t>(rank) * 977 + 11);
  const int bound = dtype == DType::bf16 ? 256 / (2 * ranks) : dtype == DType::f16 ? 2048 / (2 * ranks) : 1000;
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(static_cast<int>(gen.below(static_cast<std::uint64_t>(2 * bound + 1))) - bound);
    switch (dtype) {
      case DType::f32:
        reinterpret_cast<float*>(data.data())[i] = v;
        break;
      case DType::f64:
        reinterpret_cast<double*>(data.data())[i] = v;
        break;
      case DType::bf16:
        reinterpret_cast<bf16*>(data.data())[i] = bf16(v);
        break;
      default:
        reinterpret_cast<f16*>(data.data())[i] = f16(v);
        break;
    }
  }
}

std::int64_t count_wrong(const std::vector<unsigned char>& got, const std::vector<unsigned char>& expected,
                         std::int64_t begin, std::int64_t count, std::int64_t elem) {
  std::int64_t wrong = 0;
  for (std::int64_t i = begin; i < begin + count; ++i)
    if (std::memcmp(got.data() + i * elem, expected.data() + i * elem, static_cast<std::size_t>(elem)) != 0) ++wrong;
  return wrong;
}

std::vector<std::string> hand_written_arms(Collective collective) {
  switch (collective) {
    case Collective::reduce_scatter:
      return {"ring", "halving_doubling"};
    case Collective::allgather:
      return {"ring", "recursive_doubling"};
    default:
      return {};
  }
}

SizeCase collective_case(Collective collective, const CaseInputs& in, std::int64_t count) {
  std::vector<std::string> arms = hand_written_arms(collective);
  arms.push_back("native");
  const auto bytes = static_cast<std::size_t>(count * in.elem);
  std::vector<std::shared_ptr<void>> memory;
  for (std::size_t i = 0; i < arms.size(); ++i) memory.push_back(in.comm.allocate(bytes));
  SizeCase size;
  size.check = [collective, in, count, bytes, arms, memory] {
    const Expected e = expected_of(collective, in, count);
    std::vector<unsigned char> got(bytes), zeros(bytes, 0);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < arms.size(); ++i) {
      in.comm.copy_in(memory[i].get(), e.input.data(), bytes);
      call_arm(collective, arms[i], in, memory[i].get(), count);
      in.comm.copy_out(got.data(), memory[i].get(), bytes);
      wrong += count_wrong(got, e.answer, e.begin, e.n, in.elem);
      in.comm.copy_in(memory[i].get(), zeros.data(), bytes);  // the timing runs on zeros
    }
    return wrong;
  };
  for (std::size_t i = 0; i < arms.size(); ++i) {
    std::shared_ptr<void> m = memory[i];
    const std::string arm = arms[i];
    size.arms.push_back({arm, count * in.elem,
                         [collective, arm, in, m, count](int) { call_arm(collective, arm, in, m.get(), count); }});
  }
  return size;
}

}  // namespace trainlab::bench
