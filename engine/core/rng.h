// An explicit, seeded random number generator (xoshiro256** seeded through splitmix64) whose
// complete state can be saved and restored, so a resumed run draws the same numbers.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace trainlab {

// splitmix64: used to seed and to derive independent streams from (seed, index) pairs.
std::uint64_t splitmix64(std::uint64_t& state);
// A well-mixed 64-bit hash of two values, for per-(seed, index) determinism.
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b);

class Generator {
 public:
  using State = std::array<std::uint64_t, 4>;

  explicit Generator(std::uint64_t seed = 0) { reseed(seed); }
  void reseed(std::uint64_t seed);

  std::uint64_t next_u64();
  double uniform();                      // [0, 1), 53 random bits
  double uniform(double lo, double hi);  // [lo, hi)
  double normal();                       // standard normal (Box-Muller, no cached second value)
  std::uint64_t below(std::uint64_t n);  // uniform in [0, n), unbiased

  const State& state() const { return state_; }
  void set_state(const State& state);
  // Hex text form for checkpoints: "xoshiro256**:<64 hex digits>".
  std::string state_string() const;
  void set_state_string(const std::string& text);  // throws Error on malformed text

 private:
  State state_{};
};

// The stream dropout draws from (backends/counter_rng.h): a seed and the index of its next draw;
// each dropout call takes as many indices as it has elements. The run seeds it (make_run), a
// checkpoint keeps it (so a resumed run draws what the uninterrupted one would), and activation
// recomputation replays a block's forward from the position its first forward started at.
struct CounterStream {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  bool operator==(const CounterStream&) const = default;
};
CounterStream& dropout_stream();

}  // namespace trainlab
