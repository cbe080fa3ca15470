#include "bench/measure/comm_bench.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/affinity.h"
#include "bench/measure/stats.h"
#include "comm/mpi_communicator.h"
#include "engine/io/fileio.h"

namespace trainlab::bench {

std::int64_t parse_byte_size(const std::string& text, const std::string& what) {
  TL_CHECK(!text.empty(), what + ": empty size (use e.g. 4096, 4K, 2M, 1G)");
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    TL_CHECK(false, what + ": '" + text + "' is not a size (use e.g. 4096, 4K, 2M, 1G)");
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "K" || unit == "KiB")
    scale = 1024.0;
  else if (unit == "M" || unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else
    TL_CHECK(unit.empty() || unit == "B", what + ": unknown unit in '" + text + "' (allowed: B, K, M, G)");
  const double bytes = number * scale;
  TL_CHECK(std::isfinite(bytes) && bytes >= 1 && bytes <= 64.0 * 1024 * 1024 * 1024,
           what + ": size '" + text + "' is out of range (1 byte to 64G)");
  return static_cast<std::int64_t>(bytes);
}

std::vector<std::int64_t> parse_byte_sizes(const std::string& spec, const std::string& what) {
  std::vector<std::int64_t> sizes;
  const auto dots = spec.find("..");
  if (dots != std::string::npos) {
    const std::int64_t lo = parse_byte_size(spec.substr(0, dots), what);
    const std::int64_t hi = parse_byte_size(spec.substr(dots + 2), what);
    TL_CHECK(lo <= hi, what + ": range '" + spec + "' is empty (LO must be <= HI)");
    for (std::int64_t s = lo; s <= hi; s *= 2) sizes.push_back(s);
  } else {
    std::size_t start = 0;
    while (start <= spec.size()) {
      const auto comma = spec.find(',', start);
      sizes.push_back(parse_byte_size(spec.substr(start, comma - start), what));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return sizes;
}

void check_message_sizes(const std::vector<std::int64_t>& sizes, std::int64_t element_bytes, const std::string& dtype,
                         int buffers_per_rank, const std::string& what) {
  std::int64_t largest = 0;
  for (const std::int64_t bytes : sizes) {
    TL_CHECK(bytes % element_bytes == 0,
             fmt::format("{}: {} bytes is not a whole number of {} elements ({} bytes each); use a multiple of {}",
                         what, bytes, dtype, element_bytes, element_bytes));
    largest = std::max(largest, bytes);
  }
  int local_ranks = 1;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* value = std::getenv(name)) {
      local_ranks = std::max(1, std::atoi(value));
      break;
    }
  }
  const auto needed = static_cast<std::uint64_t>(largest) * static_cast<std::uint64_t>(buffers_per_rank) *
                      static_cast<std::uint64_t>(local_ranks);
  check_host_memory(needed,
                    fmt::format("{}: the largest size, {}, in {} buffers on each of this host's {} rank{},", what,
                                human_bytes(largest), buffers_per_rank, local_ranks, local_ranks == 1 ? "" : "s"),
                    "use smaller sizes");
}

std::string human_bytes(std::int64_t bytes) {
  if (bytes >= (1 << 30) && bytes % (1 << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}B", bytes);
}

double memcpy_gbps() {
  using clock_type = std::chrono::steady_clock;
  const std::size_t bytes = 64u << 20;
  std::vector<unsigned char> a(bytes, 1), b(bytes, 2);
  std::vector<double> rates;
  for (int i = 0; i < 12; ++i) {
    const auto t = clock_type::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(clock_type::now() - t).count();
    if (i >= 2) rates.push_back(static_cast<double>(bytes) / s * 1e-9);
    std::swap(a, b);
  }
  return summarize(rates).median;
}

Environment mpi_environment(Backend& backend) {
  Environment env = current_environment(backend);
  env.versions["mpi"] = comm::mpi_library_version();
  return env;
}

CommSetup comm_setup(comm::MpiCommunicator& world) {
  CommSetup setup;
  if (world.rank() == 0) setup.memcpy_gbps = memcpy_gbps();
  world.broadcast(&setup.memcpy_gbps, sizeof setup.memcpy_gbps, 0);
  Backend& host = get_backend(default_backend_name());
  host.set_num_threads(1);
  setup.env = mpi_environment(host);
  return setup;
}

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::allgather:
      return "all_gather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::allreduce:
      break;
  }
  return "all_reduce";
}

Collective parse_collective(const std::string& name) {
  for (Collective c : {Collective::allreduce, Collective::reduce_scatter, Collective::allgather, Collective::broadcast})
    if (name == collective_name(c)) return c;
  throw Error("unknown collective '" + name + "' (allowed: all_reduce, reduce_scatter, all_gather, broadcast)");
}

double busbw_factor(Collective collective, int ranks) {
  const double p = ranks;
  switch (collective) {
    case Collective::allreduce:
      return 2.0 * (p - 1) / p;
    case Collective::reduce_scatter:
    case Collective::allgather:
      return (p - 1) / p;
    case Collective::broadcast:
      break;
  }
  return 1.0;
}

CommHarness::CommHarness(comm::MpiCommunicator& world, Collective collective)
    : world_(world), ranks_(world.size()), factor_(bench::busbw_factor(collective, world.size())) {}

double CommHarness::time_one(const std::function<void()>& call) {
  using clock_type = std::chrono::steady_clock;
  world_.barrier();
  const auto t = clock_type::now();
  call();
  return world_.max_over_ranks(std::chrono::duration<double>(clock_type::now() - t).count());
}

std::int64_t CommHarness::sum_over_ranks(std::int64_t count) {
  std::int64_t total = count;
  world_.allreduce_native(&total, 1, DType::i64, comm::ReduceOp::sum);
  return total;
}

bool CommHarness::on_every_rank(bool ok) {
  double failed = ok ? 0 : 1;
  world_.allreduce_native(&failed, 1, DType::f64, comm::ReduceOp::sum);
  return failed == 0;
}

ArmTiming CommHarness::summarise(const CommArm& arm, int warmup_calls, std::vector<double> seconds) const {
  ArmTiming t;
  t.name = arm.name;
  t.bytes = arm.bytes;
  t.warmup_calls = warmup_calls;
  t.seconds = std::move(seconds);
  t.stats = summarize(t.seconds);
  std::vector<double> even, odd;
  for (std::size_t i = 0; i < t.seconds.size(); ++i) (i % 2 ? odd : even).push_back(t.seconds[i]);
  if (!odd.empty()) t.noise_floor = calibrate(even, odd);
  t.algbw_gbps = algbw_gbps(arm.bytes, t.stats.median);
  t.busbw_gbps = t.algbw_gbps * factor_;
  return t;
}

std::vector<ArmTiming> CommHarness::time(const std::vector<CommArm>& arms, const CommSchedule& schedule) {
  const int warmup = std::max(schedule.warmup, 1);
  std::vector<double> warm(arms.size(), 0.0);
  const auto one = [&](std::size_t a, int sample) { return time_one([&] { arms[a].call(sample); }); };
  if (schedule.paired) {
    for (int i = 0; i < warmup; ++i)
      for (std::size_t a = 0; a < arms.size(); ++a) warm[a] = std::max(warm[a], one(a, 0));
  } else {
    for (std::size_t a = 0; a < arms.size(); ++a)
      for (int i = 0; i < warmup; ++i) warm[a] = std::max(warm[a], one(a, 0));
  }
  const auto count = [&](double seconds) {  // clamped before the cast: a huge budget is the maximum, never UB
    const double fits = schedule.seconds_per_arm / std::max(seconds, 1e-6);
    return static_cast<int>(
        std::clamp(fits, static_cast<double>(schedule.min_iters), static_cast<double>(schedule.max_iters)));
  };
  std::vector<int> iterations(arms.size());
  const double slowest = warm.empty() ? 0.0 : *std::max_element(warm.begin(), warm.end());
  for (std::size_t a = 0; a < arms.size(); ++a) iterations[a] = count(schedule.paired ? slowest : warm[a]);
  const int rounds = iterations.empty() ? 0 : *std::max_element(iterations.begin(), iterations.end());
  std::vector<std::vector<double>> seconds(arms.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t a = 0; a < arms.size(); ++a)
      if (round < iterations[a]) seconds[a].push_back(one(a, static_cast<int>(seconds[a].size())));
    if (schedule.after_round) schedule.after_round(round, rounds);
  }
  std::vector<ArmTiming> out;
  for (std::size_t a = 0; a < arms.size(); ++a) out.push_back(summarise(arms[a], warmup, std::move(seconds[a])));
  return out;
}

std::vector<SizeTiming> CommHarness::sweep(const std::vector<std::int64_t>& sizes,
                                           const std::function<SizeCase(std::int64_t bytes)>& prepare,
                                           const CommSchedule& schedule,
                                           const std::function<void(const SizeTiming&)>& done) {
  std::vector<SizeTiming> out;
  for (const std::int64_t bytes : sizes) {
    const SizeCase size = prepare(bytes);
    SizeTiming t;
    t.bytes = bytes;
    t.wrong = sum_over_ranks(size.check ? size.check() : 0);
    t.correct = t.wrong == 0;
    t.arms = time(size.arms, schedule);
    if (done) done(t);
    out.push_back(std::move(t));
  }
  return out;
}

JobCpus::JobCpus(comm::MpiCommunicator& world) {
  constexpr int kMaxCpus = 4096;
  std::vector<double> seen(kMaxCpus, 0.0);
  for (int cpu : thread_affinity(0))
    if (cpu >= 0 && cpu < kMaxCpus) seen[static_cast<std::size_t>(cpu)] = 1;
  world.allreduce_native(seen.data(), kMaxCpus, DType::f64, comm::ReduceOp::sum);
  for (int cpu = 0; cpu < kMaxCpus; ++cpu)
    if (seen[static_cast<std::size_t>(cpu)] > 0) cpus_.push_back(cpu);
}

void JobCpus::on_every_cpu(const std::function<void()>& work) const {
  // Afterwards every thread gets its mask back; one the work started (an OpenMP worker) gets the
  // calling thread's.
  struct Restore {
    std::vector<ThreadAffinity> before = process_threads();
    CpuSet own = thread_affinity(0);
    ~Restore() {
      for (const ThreadAffinity& now : process_threads()) {
        const CpuSet* mask = &own;
        for (const ThreadAffinity& t : before)
          if (t.tid == now.tid) mask = &t.cpus;
        try {
          set_thread_affinity(now.tid, *mask);
        } catch (const Error&) {  // a thread that ended meanwhile
        }
      }
    }
  } restore;
  set_process_affinity(cpus_);
  work();
}

}  // namespace trainlab::bench
