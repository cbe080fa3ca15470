#include "engine/core/rng.h"

#include <cmath>
#include <cstdio>
#include <numbers>

#include "backends/error.h"

namespace trainlab {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  std::uint64_t state = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
  splitmix64(state);
  return splitmix64(state);
}

void Generator::reseed(std::uint64_t seed) {
  std::uint64_t s = seed;
  for (auto& word : state_) word = splitmix64(s);
}

static inline std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::uint64_t Generator::next_u64() {
  auto& s = state_;
  const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

double Generator::normal() {
  // 1 - uniform() is in (0, 1], so the log is finite.
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t Generator::below(std::uint64_t n) {
  TL_CHECK(n > 0, "Generator::below needs n > 0");
  // Rejection sampling on the top of the range keeps every value equally likely.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

void Generator::set_state(const State& state) {
  TL_CHECK(state[0] | state[1] | state[2] | state[3], "generator state must not be all zeros");
  state_ = state;
}

std::string Generator::state_string() const {
  char buffer[16 * 4 + 1];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(buffer + 16 * i, 17, "%016llx", static_cast<unsigned long long>(state_[i]));
  }
  return std::string("xoshiro256**:") + buffer;
}

void Generator::set_state_string(const std::string& text) {
  const std::string prefix = "xoshiro256**:";
  TL_CHECK(text.size() == prefix.size() + 64 && text.compare(0, prefix.size(), prefix) == 0,
           "malformed generator state '" + text + "' (expected 'xoshiro256**:' and 64 hex digits)");
  State state{};
  for (int i = 0; i < 4; ++i) {
    std::uint64_t word = 0;
    for (int j = 0; j < 16; ++j) {
      const char c = text[prefix.size() + 16 * i + j];
      int digit;
      if (c >= '0' && c <= '9')
        digit = c - '0';
      else if (c >= 'a' && c <= 'f')
        digit = c - 'a' + 10;
      else
        throw Error("malformed generator state '" + text + "': '" + std::string(1, c) + "' is not a hex digit");
      word = word << 4 | static_cast<std::uint64_t>(digit);
    }
    state[i] = word;
  }
  set_state(state);
}

CounterStream& dropout_stream() {
  static CounterStream stream;
  return stream;
}

}  // namespace trainlab
