// Fuzz target: the command lines. The input is split at NUL bytes into arguments for `trainlab
// train ... --dry-run` (every flag parsed and checked, nothing trained) or `trainlab
// collective-cost ...` (the first byte picks which); cli_main must return a status, never crash.
// The tools' own output goes to /dev/null while fuzzing.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "apps/trainlab/cli.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) ::dup2(null, 1);  // stdout only: the driver reports on stderr
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool train = data[0] % 4 != 0;
  std::vector<std::string> args = {"trainlab", train ? "train" : "collective-cost"};
  std::string current;
  for (std::size_t i = 1; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else if (current.size() < 512) {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  if (train) {
    // Only ever a dry run (no --dry-run=false from the input): a fuzzed run must not train. The
    // flag goes first: last, it could be taken as the value of a fuzzed flag before it ("--save
    // --dry-run" trained a whole run and saved it to ./--dry-run).
    std::erase_if(args, [](const std::string& a) { return a.rfind("--dry-run", 0) == 0; });
    args.insert(args.begin() + 2, "--dry-run");
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // stderr is the tools' too: quieted around the call, restored for the driver's reports.
  static const int saved_stderr = ::dup(2);
  const int null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 2);
  trainlab::cli_main(static_cast<int>(args.size()), argv.data());
  ::dup2(saved_stderr, 2);
  ::close(null);
  return 0;
}
