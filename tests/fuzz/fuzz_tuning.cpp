// Fuzz target: the all-reduce tuning file (`allreduce_tuning`, `bench_allreduce --write-tuning`;
// comm/tuning.h). The input is the file; it is read whole, its thresholds taken for worlds 1, 2
// and 4 (as DDP does), and, when it reads, written back and read again: the same entries.
#include <fstream>

#include "comm/tuning.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainlab;
  const auto path = (fuzz::scratch() / "tuning.json").string(), copy = (fuzz::scratch() / "copy.json").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  fuzz::expect_error_or_success([&] {
    const comm::TuningFile file = comm::read_tuning(path);
    std::string note;
    for (int world : {1, 2, 4}) (void)comm::thresholds_for(path, world, &note);
    std::filesystem::remove(copy);
    comm::write_tuning(copy, file);
    const comm::TuningFile back = comm::read_tuning(copy);
    if (back.entries.size() != file.entries.size()) __builtin_trap();  // a file that does not survive its own write
  });
  return 0;
}
