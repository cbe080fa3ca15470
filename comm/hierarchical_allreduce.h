// The two-level (hierarchical) all-reduce of seed 001's model and `trainlab collective-cost
// --node-size`: the ranks are grouped into nodes; a reduce-scatter inside each node leaves local
// rank l the node's partial of chunk l (the buffer cut into node_size chunks, shard_chunk); the
// partials of chunk l are all-reduced across the nodes, between the ranks of local rank l (one
// all-reduce of S / node_size bytes per local rank, all at once); an all-gather inside each node
// gives every rank every chunk. Only S / node_size bytes per rank cross the slow link between
// nodes, where a flat ring over every rank sends 2(P-1)/P x S per rank over it.
//
// Which ranks share a node comes from a node map: node_size consecutive ranks per node (what a
// test or a benchmark sets: `bench_allreduce --node-size`), or the ranks' host names. The world is
// split twice (Communicator::split): by node (colour: node, key: rank) and across (colour: local
// rank, key: node).
//
// Inside a node the data moves one of two ways:
//   shared_memory   the node's ranks map one window (Communicator::share_memory): each rank copies
//                   its buffer into its segment, the owner of chunk l adds the node's copies of it
//                   (local rank 0's first, in order), and after the exchange across nodes each
//                   rank copies the other chunks from their owners' segments. Messages only cross
//                   nodes, so a run forced onto TCP (`--mca btl tcp,self`) on one host is two
//                   "nodes" of shared memory joined by TCP: the stand-in for a cluster.
//   point_to_point  the ring's halves (ring_reduce_scatter, ring_allgather) over the node's
//                   communicator: whatever transport the library picks inside a host. Where the
//                   ranks of a node cannot share memory (NCCL; a node map that spans hosts) this is
//                   what runs.
//
// Every element is summed in one fixed order (inside the node in local-rank order, then across
// the nodes along the chosen algorithm's order) on one rank and then copied, so every rank ends
// with the same bits; on integer-valued data they equal the flat ring's and MPI_Allreduce's. An
// average is the node's sum scaled by 1/node_size, then averaged across the nodes (exact scaling
// where both are powers of two).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace trainlab::comm {

struct NodeMap {
  int node = 0, local = 0;           // this rank's node and its rank inside it
  int nodes = 1, node_size = 1;      // every node has node_size ranks
  std::string source = "node size";  // "node size N" or "host names"
};
// node_size consecutive ranks per node: ranks [k n, (k + 1) n) are node k. Throws Error when
// node_size does not divide the world (naming both).
NodeMap node_map_by_size(const Communicator& comm, int node_size);
// A node per host (in order of each host's first rank), from the ranks' host names: a collective.
// Throws Error when the hosts hold different numbers of ranks.
NodeMap node_map_by_host(Communicator& comm);

enum class IntraNode { shared_memory, point_to_point };
const char* intra_node_name(IntraNode intra);
IntraNode parse_intra_node(const std::string& name);  // throws naming the allowed

// The split world, made once (a collective over every rank of `world`) and reused.
class Hierarchy {
 public:
  // `intra` is what to use inside a node; shared_memory falls back to point_to_point (on every rank)
  // where the node's ranks cannot share memory: intra() says which runs.
  Hierarchy(Communicator& world, const NodeMap& map, IntraNode intra = IntraNode::shared_memory);
  ~Hierarchy();
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;

  const NodeMap& map() const { return map_; }
  IntraNode intra() const { return intra_; }
  Communicator& node() { return *node_; }      // the ranks of this rank's node
  Communicator& across() { return *across_; }  // the ranks with this local rank, one per node
  // "2 nodes x 2 ranks (node size 2); inside a node: shared memory; across nodes: mpi"
  std::string describe() const;

  // The phases, in place over `count` elements of `data` (every rank the same count): inside each
  // node, local rank l ends with the node's sum of chunk l (times 1/node_size for an average); the
  // all-gather gives every rank every owner's chunk.
  void reduce_scatter_inside(void* data, std::int64_t count, DType dtype, ReduceOp op);
  void allgather_inside(void* data, std::int64_t count, DType dtype);

 private:
  // Each rank's shared segment holds two buffers, used by turns (a phase's writes never meet the
  // previous phase's reads): room for `bytes` each, grown as needed (a collective of the node).
  void reserve(std::size_t bytes);
  unsigned char* slot(int local_rank);  // local_rank's buffer of this turn
  NodeMap map_;
  IntraNode intra_;
  std::unique_ptr<Communicator> node_, across_;
  std::unique_ptr<SharedMemory> shared_;
  std::uint64_t turn_ = 0;  // which of the two segments this call uses
};

// Seconds this rank spent in each phase of one call (a profile: bench_allreduce --node-size).
struct HierarchicalPhases {
  double reduce_scatter_inside_s = 0, across_s = 0, allgather_inside_s = 0;
};
// The hierarchical all-reduce in place: the reduce-scatter inside, `across` (any algorithm, auto
// by the size of the chunk) between the nodes, the all-gather inside; `phases`, when given, gets
// this rank's time in each.
void hierarchical_allreduce(Hierarchy& hierarchy, void* data, std::int64_t count, DType dtype, ReduceOp op,
                            Algorithm across = Algorithm::ring, const AlgorithmThresholds& thresholds = {},
                            HierarchicalPhases* phases = nullptr);
// The chunk of `count` elements local rank `local` owns inside a node.
ChunkRange node_chunk(const Hierarchy& hierarchy, std::int64_t count);

}  // namespace trainlab::comm
