// The thresholds `allreduce: auto` chooses by (comm::AlgorithmThresholds), measured: bench_allreduce
// --write-tuning times the three hand-written all-reduces size by size, derives the thresholds from the
// medians (derive_thresholds) and writes them to a JSON file, one entry per world size (a --write-tuning at
// another world size adds its entry; at the same size it replaces it). The config's
// `allreduce_tuning` names the file; DDP reads the entry of its world size (thresholds_for).
//
//   {"format": "trainlab-allreduce-tuning/1",
//    "entries": [{"world": 2, "recursive_doubling_below": 8192, "ring_from": 33554432,
//                 "run_id": "...", "communicator": "mpi", "library": "Open MPI v4.1.4",
//                 "measured": [{"bytes": 4096, "best": "ring",
//                               "median_us": {"ring": 4.0, "recursive_doubling": 5.8, ...}}, ...]}]}
//
// null means never: "ring_from": null, the ring is never chosen (it won no size at the top);
// "recursive_doubling_below": null, recursive doubling is chosen at every size (it won them all). A file that is
// not such a file, or holds a value out of range, is refused with one line naming the file and the
// value; nothing of it is used.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace trainlab::comm {

inline constexpr const char* kTuningFormat = "trainlab-allreduce-tuning/1";

// One measured size: each hand-written algorithm's median seconds, and the fastest of them.
struct TuningPoint {
  std::int64_t bytes = 0;
  std::map<std::string, double> median_s;  // by algorithm name
  std::string best;
};

struct TuningEntry {
  int world = 0;
  std::int64_t recursive_doubling_below = 0, ring_from = 0;  // INT64_MAX for never
  // Where the ranks shared a window and single_copy was timed: from where it wins to the largest
  // size (INT64_MAX: never, and where the file has no "single_copy_from": it was not measured).
  std::int64_t single_copy_from = INT64_MAX;
  std::string run_id, communicator, library;
  std::vector<TuningPoint> measured;
};

struct TuningFile {
  std::vector<TuningEntry> entries;  // by world size, each once
};

// The fastest algorithm of a point (by median; ties to the earlier name of ring,
// recursive_doubling, halving_doubling), and the thresholds that follow from points sorted by
// size: recursive doubling below the end of the run of sizes it wins from the smallest, the ring
// from the start of the run it wins to the largest (each boundary the geometric mean of the two
// sizes beside it), halving-doubling between. A size inside the middle that another algorithm won
// is a disagreement, described in `disagreements` (what the thresholds give up there). Where
// single_copy was timed at every size (the ranks shared a window), single_copy_from is where
// single-copy from there to the largest size, the fastest of the three below, takes the least time
// summed over the sizes (a size it loses inside its range is a disagreement); the three's
// thresholds are the path without a window.
//   {"world": 2, ..., "single_copy_from": 0}   (optional; null or absent: never)
std::string fastest(const TuningPoint& point);
TuningEntry derive_thresholds(int world, const std::vector<TuningPoint>& points,
                              std::vector<std::string>* disagreements);

// Reads and checks the whole file; throws Error, one line naming the file and what is wrong.
TuningFile read_tuning(const std::string& path);
// The entry replacing any of the same world size, entries kept sorted by world.
void merge_entry(TuningFile& file, const TuningEntry& entry);
// Writes the file (engine/io/fileio.h's atomic rule). An existing regular file is replaced only if it
// is a tuning file itself (read_tuning): never a file that was not ours.
void write_tuning(const std::string& path, const TuningFile& file);

// The thresholds for `world` ranks: the built-in ones when `path` is empty; else the file's entry
// for that world. A file without one: the built-in thresholds, and `note` says so (naming the
// worlds it has).
AlgorithmThresholds thresholds_for(const std::string& path, int world, std::string* note);
AlgorithmThresholds thresholds_of(const TuningEntry& entry, const std::string& path);

}  // namespace trainlab::comm
