// The two-level run of bench_allreduce (--node-size): the hierarchical all-reduce measured against
// the flat ring and against what seed 001's model (trainlab collective-cost --node-size) predicts
// from the two links measured in the same run: inside a node (the `within_nodes` arm: every node's
// reduce-scatter and all-gather at once, fitted as a ring of node_size ranks) and across nodes (the
// `across_nodes` arm: every local rank's all-reduce of its S / node_size chunk at once, fitted as a
// ring of `nodes` ranks; where one line does not fit a link, each size takes its regime's line, as
// collective-cost --fit splits them). The bench prints it at the end of a run; the report (block
// allreduce-hierarchical) draws the same table from the ledger rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/cost_model.h"

namespace trainlab::bench {

// One size S (bytes per rank): the medians of its arms, seconds.
struct HierarchicalPoint {
  std::int64_t bytes = 0;
  double flat_s = 0;          // the hand-written flat ring over every rank
  double hierarchical_s = 0;  // the two-level all-reduce
  double within_s = 0;        // within_nodes, the all-reduce inside every node at once
  double across_s = 0;        // across_nodes, of S / node_size bytes
};

// A link's alpha and B for a message of `bytes`: its one line when that fits (within 20% at every
// size), else the regime the size falls in (below or from the split: cache against memory).
comm::RingModel link_model(const comm::FitAnalysis& fit, double bytes);

struct HierarchicalPrediction {
  int nodes = 0, node_size = 0;
  comm::FitAnalysis within, across;  // the links' fits; each size predicted with link_model
  struct Line {
    std::int64_t bytes = 0;
    double flat_s = 0, measured_s = 0, predicted_s = 0;
    comm::Hierarchical predicted;                                             // the model's three phases
    double error() const { return (predicted_s - measured_s) / measured_s; }  // + : the model is slower
  };
  std::vector<Line> lines;
  bool all_within(double tolerance) const;
};
// Throws Error when there is nothing to predict (a single node, or nodes of one rank) or fewer than
// two sizes.
HierarchicalPrediction predict_hierarchical(int nodes, int node_size, const std::vector<HierarchicalPoint>& points);

// The table (size, flat ring, hierarchical, predicted, error, within 25%) and the fits as text, with
// the collective-cost command that gives the largest size's prediction.
std::vector<std::string> hierarchical_head();
std::vector<std::vector<std::string>> hierarchical_table(const HierarchicalPrediction& p);
std::string hierarchical_fit_text(const HierarchicalPrediction& p);

}  // namespace trainlab::bench
