#include "comm/hierarchical_allreduce.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/error.h"
#include "comm/ring_allreduce.h"

namespace trainlab::comm {

NodeMap node_map_by_size(const Communicator& comm, int node_size) {
  const int P = comm.size();
  TL_CHECK(
      node_size >= 1 && node_size <= P && P % node_size == 0,
      fmt::format("node size {} must divide the world's {} ranks (ranks per node, each node alike)", node_size, P));
  NodeMap m;
  m.node_size = node_size;
  m.nodes = P / node_size;
  m.node = comm.rank() / node_size;
  m.local = comm.rank() % node_size;
  m.source = fmt::format("node size {}", node_size);
  return m;
}

NodeMap node_map_by_host(Communicator& comm) {
  const std::vector<std::string> hosts = gather_host_names(comm);
  std::map<std::string, int> node_of, ranks_of;
  std::vector<std::string> order;
  NodeMap m;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    const std::string& h = hosts[static_cast<std::size_t>(r)];
    if (!node_of.count(h)) {
      node_of[h] = static_cast<int>(order.size());
      order.push_back(h);
    }
    if (r == comm.rank()) {
      m.node = node_of[h];
      m.local = ranks_of[h];
    }
    ++ranks_of[h];
  }
  m.nodes = static_cast<int>(order.size());
  m.node_size = ranks_of[order.front()];
  for (const std::string& h : order)
    TL_CHECK(ranks_of[h] == m.node_size, fmt::format("the hosts hold different numbers of ranks ({}: {}, {}: {}): a "
                                                     "hierarchical all-reduce needs every node alike",
                                                     order.front(), m.node_size, h, ranks_of[h]));
  m.source = "host names";
  return m;
}

const char* intra_node_name(IntraNode intra) {
  return intra == IntraNode::shared_memory ? "shared_memory" : "point_to_point";
}

IntraNode parse_intra_node(const std::string& name) {
  if (name == "shared_memory") return IntraNode::shared_memory;
  if (name == "point_to_point") return IntraNode::point_to_point;
  throw Error("inside a node: '" + name + "' is not one of shared_memory, point_to_point");
}

Hierarchy::Hierarchy(Communicator& world, const NodeMap& map, IntraNode intra) : map_(map), intra_(intra) {
  TL_CHECK(map.nodes * map.node_size == world.size(),
           fmt::format("node map of {} nodes x {} ranks for a world of {}", map.nodes, map.node_size, world.size()));
  node_ = world.split(map.node, world.rank());
  across_ = world.split(map.local, map.node);
  // The world's deadline holds inside and across (a stalled rank ends the job as on the world).
  if (node_) node_->set_timeout(world.timeout());
  if (across_) across_->set_timeout(world.timeout());
  TL_CHECK(node_ && node_->size() == map.node_size && across_ && across_->size() == map.nodes,
           fmt::format("rank {}: the node map disagrees between ranks (node {} of {} ranks, local rank {} of {} nodes)",
                       world.rank(), map.node, map.node_size, map.local, map.nodes));
  // Shared memory only where every rank of every node can map it (the answer is the world's).
  if (intra_ == IntraNode::shared_memory && map.node_size > 1) {
    shared_ = node_->share_memory(2 * 4096);
    std::int64_t missing = shared_ ? 0 : 1;
    world.allreduce_native(&missing, 1, DType::i64, ReduceOp::sum);
    if (missing > 0) {
      shared_.reset();
      intra_ = IntraNode::point_to_point;
    }
  }
}

Hierarchy::~Hierarchy() = default;

std::string Hierarchy::describe() const {
  return fmt::format("{} node{} x {} rank{} ({}); inside a node: {}; across nodes: {}", map_.nodes,
                     map_.nodes == 1 ? "" : "s", map_.node_size, map_.node_size == 1 ? "" : "s", map_.source,
                     map_.node_size == 1                  ? "nothing to do"
                     : intra_ == IntraNode::shared_memory ? "shared memory (loads and stores)"
                                                          : "the ring's halves over " + node_->backend(),
                     across_->backend());
}

unsigned char* Hierarchy::slot(int local_rank) {
  const std::size_t half = shared_->bytes() / 2;
  return static_cast<unsigned char*>(shared_->segment(local_rank)) + (turn_ % 2) * half;
}

ChunkRange node_chunk(const Hierarchy& hierarchy, std::int64_t count) {
  return shard_chunk(count, hierarchy.map().node_size, hierarchy.map().local);
}

void Hierarchy::reserve(std::size_t bytes) {
  if (shared_->bytes() >= 2 * bytes) return;
  std::size_t half = 4096;  // grown in powers of two
  while (half < bytes) half *= 2;
  shared_.reset();  // freed on every rank of the node together (MPI_Win_free is a collective)
  shared_ = node_->share_memory(2 * half);
  TL_CHECK(shared_ != nullptr, "hierarchical all-reduce: the node's shared memory could not grow");
}

void Hierarchy::reduce_scatter_inside(void* data, std::int64_t count, DType dtype, ReduceOp op) {
  const int g = map_.node_size;
  if (g == 1 || count == 0) return;  // every rank passes the same count: none of them fences
  if (intra_ == IntraNode::point_to_point) {
    ring_reduce_scatter(*node_, data, count, dtype, op);
    return;
  }
  const std::size_t elem = dtype_size(dtype), bytes = static_cast<std::size_t>(count) * elem;
  reserve(bytes);
  auto* own = static_cast<unsigned char*>(data);
  std::memcpy(slot(map_.local), own, bytes);
  shared_->fence();
  // The owner adds the node's copies of its chunk in local-rank order, scaling at the last addition.
  const ChunkRange c = node_chunk(*this, count);
  const std::size_t at = static_cast<std::size_t>(c.begin) * elem;
  if (map_.local != 0) std::memcpy(own + at, slot(0) + at, static_cast<std::size_t>(c.count) * elem);
  for (int j = 1; j < g; ++j) {
    const double scale = (j == g - 1 && op == ReduceOp::average) ? 1.0 / g : 1.0;
    node_->reduce_local(dtype, own + at, slot(j) + at, c.count, scale);
  }
  ++turn_;
}

void Hierarchy::allgather_inside(void* data, std::int64_t count, DType dtype) {
  const int g = map_.node_size;
  if (g == 1 || count == 0) return;
  if (intra_ == IntraNode::point_to_point) {
    ring_allgather(*node_, data, count, dtype);
    return;
  }
  const std::size_t elem = dtype_size(dtype), bytes = static_cast<std::size_t>(count) * elem;
  reserve(bytes);
  auto* own = static_cast<unsigned char*>(data);
  const ChunkRange mine = node_chunk(*this, count);
  std::memcpy(slot(map_.local) + mine.begin * elem, own + mine.begin * elem,
              static_cast<std::size_t>(mine.count) * elem);
  shared_->fence();
  for (int j = 0; j < g; ++j) {
    if (j == map_.local) continue;
    const ChunkRange c = shard_chunk(count, g, j);
    const std::size_t at = static_cast<std::size_t>(c.begin) * elem;
    std::memcpy(own + at, slot(j) + at, static_cast<std::size_t>(c.count) * elem);
  }
  ++turn_;
}

void hierarchical_allreduce(Hierarchy& h, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm across,
                            const AlgorithmThresholds& thresholds, HierarchicalPhases* phases) {
  TL_CHECK(
      dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16 || dtype == DType::f16,
      std::string("hierarchical all-reduce: dtype ") + dtype_name(dtype) + " is not supported (f32, f64, bf16, f16)");
  TL_CHECK(count >= 0, "hierarchical all-reduce: negative count " + std::to_string(count));
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  h.reduce_scatter_inside(data, count, dtype, op);
  const auto t1 = clock::now();
  if (h.map().nodes > 1) {
    const ChunkRange c = node_chunk(h, count);
    auto* chunk = static_cast<unsigned char*>(data) + static_cast<std::size_t>(c.begin) * dtype_size(dtype);
    allreduce(h.across(), chunk, c.count, dtype, op, across, thresholds);
  }
  const auto t2 = clock::now();
  h.allgather_inside(data, count, dtype);
  if (phases != nullptr) {
    phases->reduce_scatter_inside_s = std::chrono::duration<double>(t1 - t0).count();
    phases->across_s = std::chrono::duration<double>(t2 - t1).count();
    phases->allgather_inside_s = std::chrono::duration<double>(clock::now() - t2).count();
  }
}

}  // namespace trainlab::comm
