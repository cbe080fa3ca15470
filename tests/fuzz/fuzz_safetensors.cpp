// Fuzz target: the safetensors reader (model weights, optimiser state, grad-dump's inputs).
#include "backends/registry.h"
#include "engine/io/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static trainlab::Backend& host = trainlab::get_backend("reference");
  trainlab::fuzz::expect_error_or_success([&] { trainlab::decode_safetensors(data, size, "fuzz.safetensors", host); });
  return 0;
}
