// The bucket sweep's ledger rows: one `allreduce_buckets` row per bucket size (bench_buckets). The
// single all-reduces its model is fitted to are `allreduce` rows (studies/allreduce/rows.h) with
// tool "bench_buckets".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

struct BucketsConfig {
  int ranks = 0;
  std::int64_t total_bytes = 0;   // the gradient buffer, per rank
  std::int64_t bucket_bytes = 0;  // one bucket (the last one may be shorter)
  std::int64_t buckets = 0;       // ceil(total / bucket)
  std::string dtype;
  std::string algorithm;  // "ring" | "native"
  std::string gradient;   // whose gradient: the model's label ("SmallCNN", "MLP (hidden=64)") | "--params"
  template <class F>
  void fields(F& f) {
    f.optional("ranks", ranks);
    f.optional("total_bytes", total_bytes);
    f("bucket_bytes", bucket_bytes);
    f.optional("buckets", buckets);
    f.optional("dtype", dtype);
    f.optional("algorithm", algorithm);
    f.optional("gradient", gradient);
  }
};

// The alpha-beta model fitted in the same run, of the regime the whole buffer falls in.
struct BucketsFit {
  bool one_line_fits = false;
  double alpha_s = 0, bandwidth_Bps = 0;
  double split_bytes = 0;  // 0: one regime
  template <class F>
  void fields(F& f) {
    f("one_line_fits", one_line_fits);
    f("alpha_s", alpha_s);
    f("bandwidth_Bps", bandwidth_Bps);
    f("split_bytes", split_bytes);
  }
};

struct AllreduceBucketsRow {
  static constexpr const char* kKind = "allreduce_buckets";
  RowHeader header;
  BucketsConfig config;
  std::vector<double> repeats;  // seconds to all-reduce the whole buffer in buckets, every sample
  Summary stats;
  int warmup_iterations_excluded = 0;
  double predicted_s = 0;  // the fitted model's time of the same buckets
  double ideal_s = 0;      // the fitted bandwidth term of the whole buffer (no latency)
  BucketsFit fit;
  bool correct = false;  // bucketed and one-shot all-reduces agreed bit for bit
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("config", config);
    f.optional("repeats", repeats);
    f("stats", stats);
    f.optional("warmup_iterations_excluded", warmup_iterations_excluded);
    f("predicted_s", predicted_s);
    f("ideal_s", ideal_s);
    f.optional("fit", fit);
    f.optional("correct", correct);
  }
};

}  // namespace trainlab::bench
