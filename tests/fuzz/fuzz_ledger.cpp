// Fuzz target: the ledger readers. The input is a ledger file; it is loaded, turned into a report
// (bench_report) and read for the cost model's fit (collective-cost --fit), then appended to.
#include <fstream>

#include "bench/measure/ledger.h"
#include "bench/report/report.h"
#include "comm/cost_model.h"
#include "fuzz_util.h"
#include "studies/allreduce/rows.h"
#include "studies/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace bench = trainlab::bench;
  const auto dir = trainlab::fuzz::scratch();
  const std::string path = (dir / "ledger.jsonl").string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  trainlab::fuzz::expect_error_or_success([&] { bench::Ledger(path).load(); });
  trainlab::fuzz::expect_error_or_success([&] {
    bench::ReportOptions options;
    options.ledger_path = path;
    options.out_path = (dir / "REPORT.md").string();
    bench::write_report(options, bench::report_sections());
  });
  for (const char* algorithm : {"ring", "native"}) {
    trainlab::fuzz::expect_error_or_success([&] {
      const bench::LedgerPoints points = bench::allreduce_points(path, "", algorithm);
      trainlab::comm::fit_report(trainlab::comm::analyse_fit(points.ranks, points.points), points.points);
    });
  }
  // A new run still appends after whatever the file held.
  trainlab::fuzz::expect_error_or_success([&] {
    bench::Ledger(path).append(bench::json{{"device", {{"type", "cpu"}, {"name", "fuzz"}}}, {"kind", "note"}});
  });
  return 0;
}
