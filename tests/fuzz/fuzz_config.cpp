// Fuzz target: the YAML readers (a train config; a ladder spec and a cost study file) and the
// config's cross-field checks. The first byte picks the config or the two study readers; the rest is
// the file.
#include <string>

#include "engine/train/config.h"
#include "fuzz_util.h"
#include "studies/cost_to_accuracy/cost_study.h"
#include "studies/ladder/ladder.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    trainlab::fuzz::expect_error_or_success([&] {
      trainlab::TrainConfig config;
      trainlab::apply_config_text(config, text, "fuzz.yaml");
      trainlab::validate_config(config);
    });
  } else {
    trainlab::fuzz::expect_error_or_success([&] { trainlab::bench::load_ladder_text(text, "fuzz-ladder.yaml"); });
    trainlab::fuzz::expect_error_or_success([&] { trainlab::bench::load_cost_study_text(text, "fuzz-cost.yaml"); });
  }
  return 0;
}
