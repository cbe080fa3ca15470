// A deterministic mutation loop for the fuzz targets, for builds without libFuzzer (GCC, the
// sanitizer build CI runs): the same LLVMFuzzerTestOneInput targets, fed inputs derived from a seed
// corpus by seeded mutations (bit flips, byte and block edits, splices, dictionary tokens, nesting).
// Deterministic: the same --seed gives the same inputs in the same order, so a failure in CI is
// reproduced by running the same command.
//
//   fuzz_<target> --corpus DIR [--dict FILE] [--seconds 10] [--seed 1] [--max-len 65536] [--timeout-ms 5000]
//   fuzz_<target> FILE...                 replay inputs (a crash artifact)
//
// A crash (a sanitizer report, an abort, a signal) or an input that runs longer than --timeout-ms
// (a hang) writes the input to ./fuzz-<target>-<kind>-<seed>-<iteration>.bin, says so on stderr and
// exits non-zero; leaks are reported by LeakSanitizer at exit. `make fuzz` runs the same targets
// under libFuzzer (clang) instead, coverage-guided.
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));
// Present when the sanitizers are linked in: called on a sanitizer's fatal report.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

const char* g_target = "target";
std::vector<std::uint8_t> g_input;  // the input being run (for the crash artifact)
unsigned long long g_seed = 1, g_iteration = 0;
volatile sig_atomic_t g_dumped = 0;

// Async-signal-safe: formats with nothing but write().
void write_number(char* buffer, std::size_t& at, unsigned long long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (n > 0) buffer[at++] = digits[--n];
}

void dump_input(const char* kind) {
  if (g_dumped) return;
  g_dumped = 1;
  char path[256];
  std::size_t at = 0;
  for (const char* p : {"fuzz-", g_target, "-", kind, "-"}) {
    for (; *p && at < 200; ++p) path[at++] = *p;
  }
  write_number(path, at, g_seed);
  path[at++] = '-';
  write_number(path, at, g_iteration);
  for (const char* p = ".bin"; *p; ++p) path[at++] = *p;
  path[at] = '\0';
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    std::size_t done = 0;
    while (done < g_input.size()) {
      const ssize_t n = ::write(fd, g_input.data() + done, g_input.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  const char* msg = "\nfuzz: the failing input was written to ";
  [[maybe_unused]] ssize_t w = ::write(2, msg, std::strlen(msg));
  w = ::write(2, path, at);
  w = ::write(2, "\n", 1);
}

void on_death() { dump_input("crash"); }

void on_signal(int signal) {
  dump_input(signal == SIGALRM ? "hang" : "crash");
  if (signal == SIGALRM) {
    const char* msg = "fuzz: an input ran past --timeout-ms (a hang)\n";
    [[maybe_unused]] ssize_t w = ::write(2, msg, std::strlen(msg));
    _exit(3);
  }
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

struct Rng {
  std::uint64_t state;
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
};

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A libFuzzer dictionary: one "token" per line (with \xNN and \" escapes); other lines ignored.
std::vector<std::string> read_dictionary(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto open = line.find('"'), close = line.rfind('"');
    if (open == std::string::npos || close <= open || line[0] == '#') continue;
    std::string token;
    for (std::size_t i = open + 1; i < close; ++i) {
      if (line[i] == '\\' && i + 1 < close) {
        if (line[i + 1] == 'x' && i + 3 < close) {
          token.push_back(static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
          i += 3;
        } else {
          token.push_back(line[++i]);
        }
      } else {
        token.push_back(line[i]);
      }
    }
    out.push_back(token);
  }
  return out;
}

void mutate(std::vector<std::uint8_t>& x, Rng& rng, const std::vector<std::vector<std::uint8_t>>& corpus,
            const std::vector<std::string>& dict, std::size_t max_len) {
  const int edits = 1 + static_cast<int>(rng.below(6));
  for (int e = 0; e < edits; ++e) {
    const std::size_t at = rng.below(x.size() + 1);
    switch (rng.below(10)) {
      case 0:  // flip a bit
        if (!x.empty()) x[rng.below(x.size())] ^= static_cast<std::uint8_t>(1u << rng.below(8));
        break;
      case 1:  // set a byte to an interesting value
        if (!x.empty()) {
          const std::uint8_t values[] = {0, 1, 0x7f, 0x80, 0xff, '0', '9', '-', '.', 'e', '"', '\n', '\\', ' '};
          x[rng.below(x.size())] = values[rng.below(sizeof values)];
        }
        break;
      case 2:  // insert random bytes
        for (std::size_t n = 1 + rng.below(8); n > 0; --n)
          x.insert(x.begin() + static_cast<long>(at), rng.next() & 0xff);
        break;
      case 3:  // delete a block
        if (!x.empty()) {
          const std::size_t begin = rng.below(x.size());
          const std::size_t n = 1 + rng.below(std::min<std::size_t>(64, x.size() - begin));
          x.erase(x.begin() + static_cast<long>(begin), x.begin() + static_cast<long>(begin + n));
        }
        break;
      case 4:  // duplicate a block
        if (!x.empty()) {
          const std::size_t begin = rng.below(x.size());
          const std::size_t n = 1 + rng.below(std::min<std::size_t>(64, x.size() - begin));
          std::vector<std::uint8_t> block(x.begin() + static_cast<long>(begin),
                                          x.begin() + static_cast<long>(begin + n));
          x.insert(x.begin() + static_cast<long>(rng.below(x.size() + 1)), block.begin(), block.end());
        }
        break;
      case 5:
      case 6:  // a dictionary token
        if (!dict.empty()) {
          const std::string& t = dict[rng.below(dict.size())];
          x.insert(x.begin() + static_cast<long>(at), t.begin(), t.end());
        }
        break;
      case 7:  // splice in part of another corpus entry
        if (!corpus.empty()) {
          const auto& other = corpus[rng.below(corpus.size())];
          if (!other.empty()) {
            const std::size_t begin = rng.below(other.size());
            const std::size_t n = 1 + rng.below(std::min<std::size_t>(256, other.size() - begin));
            x.insert(x.begin() + static_cast<long>(at), other.begin() + static_cast<long>(begin),
                     other.begin() + static_cast<long>(begin + n));
          }
        }
        break;
      case 8: {  // deep nesting (the parsers' stack)
        const char* open = rng.below(2) ? "[" : "{\"a\":";
        const std::size_t depth = 1 + rng.below(rng.below(4) == 0 ? 200000 : 64);
        std::string nest;
        for (std::size_t d = 0; d < depth && nest.size() < max_len; ++d) nest += open;
        x.insert(x.begin() + static_cast<long>(at), nest.begin(), nest.end());
        break;
      }
      default:  // overwrite with a decimal number, large or odd
        if (!x.empty()) {
          const char* numbers[] = {
              "-1",  "0",          "1e308",      "-1e-300", "9223372036854775807", "18446744073709551616", "nan",
              "inf", "4294967296", "2147483648", "0.5"};
          const std::string n = numbers[rng.below(sizeof numbers / sizeof numbers[0])];
          const std::size_t begin = rng.below(x.size());
          x.erase(x.begin() + static_cast<long>(begin),
                  x.begin() + static_cast<long>(std::min(x.size(), begin + n.size())));
          x.insert(x.begin() + static_cast<long>(begin), n.begin(), n.end());
        }
        break;
    }
  }
  if (x.size() > max_len) x.resize(max_len);
}

void run_one(const std::vector<std::uint8_t>& input, long timeout_ms) {
  g_input = input;
  if (timeout_ms > 0) {
    itimerval timer{};
    timer.it_value.tv_sec = timeout_ms / 1000;
    timer.it_value.tv_usec = (timeout_ms % 1000) * 1000;
    ::setitimer(ITIMER_REAL, &timer, nullptr);
  }
  LLVMFuzzerTestOneInput(input.data(), input.size());
  if (timeout_ms > 0) {
    itimerval off{};
    ::setitimer(ITIMER_REAL, &off, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_target = std::strrchr(argv[0], '/') ? std::strrchr(argv[0], '/') + 1 : argv[0];
  if (std::strncmp(g_target, "fuzz_", 5) == 0) g_target += 5;
  std::string corpus_dir, dict_path;
  double seconds = 10;
  std::size_t max_len = 1 << 16;
  long timeout_ms = 5000;
  std::vector<std::string> replay;
  if (const char* env = std::getenv("FUZZ_SECONDS")) seconds = std::atof(env);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fuzz: %s needs a value\n", name);
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (arg == "--corpus") {
      corpus_dir = value("--corpus");
    } else if (arg == "--dict") {
      dict_path = value("--dict");
    } else if (arg == "--seconds") {
      seconds = std::atof(value("--seconds").c_str());
    } else if (arg == "--seed") {
      g_seed = std::strtoull(value("--seed").c_str(), nullptr, 10);
    } else if (arg == "--max-len") {
      max_len = std::strtoull(value("--max-len").c_str(), nullptr, 10);
    } else if (arg == "--timeout-ms") {
      timeout_ms = std::atol(value("--timeout-ms").c_str());
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr,
                   "fuzz: unknown flag '%s' (allowed: --corpus, --dict, --seconds, --seed, --max-len, "
                   "--timeout-ms, or input files to replay)\n",
                   arg.c_str());
      return 2;
    } else {
      replay.push_back(arg);
    }
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_death);
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGALRM}) ::signal(s, on_signal);

  if (!replay.empty()) {
    for (const auto& path : replay) {
      std::fprintf(stderr, "fuzz %s: replaying %s\n", g_target, path.c_str());
      run_one(read_bytes(path), timeout_ms);
    }
    std::fprintf(stderr, "fuzz %s: %zu inputs replayed, no crash\n", g_target, replay.size());
    return 0;
  }
  std::vector<std::vector<std::uint8_t>> corpus;
  if (!corpus_dir.empty()) {
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(corpus_dir)) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());  // a directory's order is not the same everywhere
    for (const auto& f : files) corpus.push_back(read_bytes(f));
  }
  if (corpus.empty()) corpus.push_back({});
  const std::vector<std::string> dict = dict_path.empty() ? std::vector<std::string>{} : read_dictionary(dict_path);

  Rng rng{g_seed};
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // Every seed as it is first, then mutations until the time is up.
  for (const auto& seed : corpus) {
    ++g_iteration;
    run_one(seed, timeout_ms);
  }
  double next_report = 5;
  while (elapsed() < seconds) {
    ++g_iteration;
    std::vector<std::uint8_t> x = corpus[rng.below(corpus.size())];
    mutate(x, rng, corpus, dict, max_len);
    run_one(x, timeout_ms);
    if (elapsed() >= next_report) {
      std::fprintf(stderr, "fuzz %s: %llu inputs in %.0f s\n", g_target, g_iteration, elapsed());
      next_report += 5;
    }
  }
  std::fprintf(stderr, "fuzz %s: %llu inputs (%zu seeds, seed %llu) in %.1f s: no crash, no hang\n", g_target,
               g_iteration, corpus.size(), g_seed, elapsed());
  return 0;
}
