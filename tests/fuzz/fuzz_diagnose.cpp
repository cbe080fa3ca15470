// Fuzz target: what diagnose reads of a run. With the first byte even, the input is a ledger: its
// train_progress and train_run rows (the run record) are read for run "fuzz" (compared with run
// "fuzz0" when the byte's second bit is set) and the diagnosis is printed. With it odd, the input is
// a Chrome trace: diagnosed on its own, and as the trace a recorded run names. The clock is fixed,
// so a verdict depends on the input alone.
#include <unistd.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/measure/diagnosis.h"
#include "fuzz_util.h"

namespace {

using namespace trainlab;
namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string hostname() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof buffer - 1);
  return buffer;
}

// A run's summary row naming `trace` (absolute, on this host, as a run record holds it).
std::string run_naming(const std::string& trace) {
  nlohmann::json row = {{"device", {{"name", "fuzz cpu"}, {"type", "cpu"}}},
                        {"run_id", "fuzz"},
                        {"kind", "train_run"},
                        {"status", "ok"},
                        {"host", hostname()},
                        {"pid", 1},
                        {"cores", 2},
                        {"unix_time", 1.7e9},
                        {"config", {{"trace", trace}, {"workers", "2"}, {"batch", "32"}}},
                        {"last_step", 10}};
  return row.dump() + "\n";
}

void diagnose_and_print(const bench::DiagnoseOptions& options) {
  fuzz::expect_error_or_success([&] { bench::diagnosis_text(bench::diagnose(options)); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const fs::path& dir = fuzz::scratch();
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  bench::DiagnoseOptions options;
  options.now = 1.7e9 + 60;
  if (data[0] % 2 == 0) {
    options.ledger = (dir / "ledger.jsonl").string();
    write_text(options.ledger, body);
    options.target = "fuzz";
    if ((data[0] & 2) != 0) options.against = "fuzz0";
    diagnose_and_print(options);
    return 0;
  }
  const std::string trace = (dir / "trace.json").string();
  write_text(trace, body);
  options.target = trace;
  diagnose_and_print(options);
  options.ledger = (dir / "run.jsonl").string();
  write_text(options.ledger, run_naming(trace));
  options.target = "fuzz";
  diagnose_and_print(options);
  return 0;
}
