// The CPU pinning study (seed 000): does confining training and its loader workers to cores help,
// and does the effect survive its own noise floor?
//
//   build/bin/pinning [--repeats 7] [--contend N] [--quick]
//
// Five arms (bench/pinning_study.h): default twice (calibration A and B), threads_capped,
// pinned_split and pinned_half_shared, on a workload where loader work competes with compute
// (workers > 0, a per-sample decode cost). The halves come from the machine's topology (hwloc).
// Every repeat of every arm is its own process, started with its CPU mask already set (so that
// the compute library sizes and places its thread pool inside it), repeats interleaved across arms;
// the loader workers are confined by the trainer's worker hook, and every thread's mask is read
// back during the measured steps and recorded. With --contend N the same rounds also run with N
// busy threads of unpinned background load, so one command shows the quiet and the contended
// machine side by side, each with its own noise floor.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "apps/cli_parse.h"
#include "backends/registry.h"
#include "bench/measure/affinity.h"
#include "bench/measure/ledger.h"
#include "engine/fileio.h"
#include "engine/trainer.h"
#include "studies/pinning/pinning_study.h"

using namespace trainlab;
using namespace trainlab::bench;

namespace {

constexpr const char* kResultTag = "PINNING_RESULT ";

struct Workload {
  std::int64_t batch = 32, decode_cost = 60, steps = 40, warmup = 5;
  int workers = 0;  // 0: the physical cores of the workers' half
};

struct Options {
  int repeats = 7, contend = 0;
  bool quick = false, no_ledger = false;
  Workload workload;
  std::string ledger_path, trace_path, backend;
  double timeout = 300;
  // The child's side (one arm's one repeat, started by the study itself).
  std::string child_arm, child_workers_cpus;
  int child_threads = 0;
};

// ---- the child: one arm, one repeat ----------------------------------------------------------

std::string joined(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += "; ";
    out += s;
  }
  return out;
}

int run_child(const Options& o) {
  const CpuSet worker_cpus = o.child_workers_cpus == "all" ? CpuSet{} : parse_cpu_list(o.child_workers_cpus);
  TrainConfig config;
  config.execution.backend = o.backend;
  config.batch = o.workload.batch;
  config.data.decode_cost = o.workload.decode_cost;
  config.data.workers = o.workload.workers;
  config.data.persistent_workers = true;  // alive through the measured steps, where their masks are read
  config.data.prefetch = 2;
  config.execution.threads = o.child_threads;
  config.data.train_samples = 2048;
  config.data.eval_samples = 10;
  config.data.eval_batch = 10;
  config.reporting.eval_at_end = false;
  config.reporting.warmup = o.workload.warmup;
  config.steps = o.workload.warmup + o.workload.steps;
  config.reporting.log_every = 1 << 30;
  config.reporting.trace = o.trace_path;

  std::mutex mutex;
  std::set<int> worker_tids;
  json readback;
  Trainer trainer(config);
  TrainCallbacks callbacks;
  callbacks.on_loader_worker_start = [&](int) {
    if (!worker_cpus.empty()) set_thread_affinity(0, worker_cpus);
    std::lock_guard lock(mutex);
    worker_tids.insert(current_tid());
  };
  callbacks.on_step = [&](const StepReport& report) {
    if (!report.measured || !readback.is_null()) return;
    // Every thread's mask, once the compute pool and every worker exist (a worker that has not run
    // its hook yet is waited for, a step at a time; one that never does leaves the read-back empty).
    std::set<std::string> main, workers, compute;
    const int pid = static_cast<int>(::getpid());
    std::lock_guard lock(mutex);
    if (static_cast<int>(worker_tids.size()) < config.data.workers) return;
    for (const auto& t : process_threads()) {
      const std::string cpus = cpu_list(t.cpus);
      if (t.tid == pid)
        main.insert(cpus);
      else if (worker_tids.count(t.tid))
        workers.insert(cpus);
      else
        compute.insert(cpus);
    }
    readback = {{"main", joined(main)},
                {"workers", joined(workers)},
                {"other_threads", joined(compute)},
                {"worker_threads", worker_tids.size()}};
  };
  trainer.set_callbacks(callbacks);
  const TrainResult result = trainer.train(nullptr);
  const double total = result.measured.total();
  const json out = {{"samples_per_s", result.samples_per_s},
                    {"threads", trainer.backend().num_threads()},
                    {"measured_steps", result.measured_steps},
                    {"warmup_steps_excluded", result.warmup_steps},
                    {"data_wait_share", total > 0 ? result.measured.data_wait_s / total : 0.0},
                    {"step_seconds", result.step_seconds},
                    {"readback", readback}};
  std::printf("%s%s\n", kResultTag, out.dump().c_str());
  std::fflush(stdout);
  return 0;
}

// N threads that spin until the process is killed (the --contend load).
int run_spinners(int threads) {
  std::vector<std::thread> spinners;
  for (int i = 0; i < threads; ++i) {
    spinners.emplace_back([] {
      volatile double x = 1.0;
      while (true) x = x * 1.0000001 + 1e-9;
    });
  }
  for (auto& t : spinners) t.join();
  return 0;
}

// ---- the parent: the study -------------------------------------------------------------------

struct ArmPlan {
  std::string name;
  CpuSet main, workers;  // empty: unconfined
  int threads = 0;       // 0: the backend's default
};

struct ChildResult {
  bool ok = false;
  std::string error;
  json value;
};

// The child's side of fork(), before exec: only async-signal-safe calls (the parent may have
// threads). Ends with the parent (PR_SET_PDEATHSIG), confines itself, execs this program.
[[noreturn]] void exec_child(pid_t parent, int stdout_fd, const cpu_set_t* mask, char* const* argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent is already gone
  if (stdout_fd >= 0) ::dup2(stdout_fd, STDOUT_FILENO);
  if (mask != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), mask) != 0) {
    static const char message[] = "pinning: cannot set the arm's CPU mask before exec\n";
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, message, sizeof message - 1);
    ::_exit(126);
  }
  ::execv("/proc/self/exe", argv);
  static const char message[] = "pinning: cannot exec /proc/self/exe\n";
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, message, sizeof message - 1);
  ::_exit(127);
}

// Starts this program as one arm's child, its CPU mask set before exec, and reads its result.
ChildResult run_arm(const Options& o, const ArmPlan& arm, int workers, const std::string& trace) {
  std::vector<std::string> args = {"/proc/self/exe",
                                   "--child-arm",
                                   arm.name,
                                   "--child-threads",
                                   std::to_string(arm.threads),
                                   "--child-worker-cpus",
                                   arm.workers.empty() ? "all" : cpu_list(arm.workers),
                                   "--workers",
                                   std::to_string(workers),
                                   "--batch",
                                   std::to_string(o.workload.batch),
                                   "--decode-cost",
                                   std::to_string(o.workload.decode_cost),
                                   "--steps",
                                   std::to_string(o.workload.steps),
                                   "--warmup",
                                   std::to_string(o.workload.warmup)};
  if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
  if (!trace.empty()) args.insert(args.end(), {"--trace", trace});
  // Everything the child needs is made here: after fork it may not allocate.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : arm.main) CPU_SET(c, &mask);
  int fds[2];
  TL_CHECK(::pipe2(fds, O_CLOEXEC) == 0, std::string("pinning: pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("pinning: fork: ") + std::strerror(errno));
  }
  if (pid == 0) exec_child(parent, fds[1], arm.main.empty() ? nullptr : &mask, argv.data());
  ::close(fds[1]);
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout);
  bool timed_out = false;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;  // the pipe is unusable: the child's status says the rest
    if (ready == 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ChildResult r;
  if (timed_out) {
    r.error = fmt::format("arm {} ran past --timeout {} s and was ended", arm.name, o.timeout);
    return r;
  }
  const auto at = output.rfind(kResultTag);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos) {
    r.error = fmt::format("arm {} exited with {} (see its error above)", arm.name,
                          WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status)));
    return r;
  }
  try {
    r.value = json::parse(output.substr(at + std::strlen(kResultTag)));
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = std::string("arm ") + arm.name + " printed an unreadable result: " + e.what();
  }
  return r;
}

// N busy threads that nobody pins, in a process of their own (this program, exec'd); ended by
// stop(), and with this process if it dies first.
class Contention {
 public:
  explicit Contention(int threads) {
    if (threads <= 0) return;
    std::string count = std::to_string(threads);
    std::string self = "/proc/self/exe", flag = "--child-spin";
    char* argv[] = {self.data(), flag.data(), count.data(), nullptr};
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    TL_CHECK(pid_ >= 0, std::string("pinning: fork (contention): ") + std::strerror(errno));
    if (pid_ == 0) exec_child(parent, -1, nullptr, argv);
    // A load that failed to start would make the "contended" condition a quiet one: check.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw Error("pinning: the contention process (--contend) exited at once; nothing was measured under load");
    }
  }
  ~Contention() { stop(); }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
};

int run_study(const Options& o) {
  const Topology topology = machine_topology();
  const auto [half_a, half_b] = topology.halves();
  const CpuSet all = topology.all();
  auto cores_in = [&](const CpuSet& cpus) {
    int n = 0;
    for (const auto& core : topology.cores)
      n += std::includes(cpus.begin(), cpus.end(), core.begin(), core.end()) ? 1 : 0;
    return std::max(1, n);
  };
  const int workers = o.workload.workers > 0 ? o.workload.workers : cores_in(half_b);
  const std::vector<ArmPlan> arms = {{"default", {}, {}, 0},
                                     {"default_b", {}, {}, 0},
                                     {"threads_capped", {}, {}, topology.physical_cores()},
                                     {"pinned_split", half_a, half_b, cores_in(half_a)},
                                     {"pinned_half_shared", half_a, half_a, cores_in(half_a)}};
  std::vector<std::string> conditions = {"quiet"};
  if (o.contend > 0)
    conditions.push_back(fmt::format("contended: {} busy thread{}", o.contend, o.contend == 1 ? "" : "s"));

  Backend& backend = get_backend(o.backend.empty() ? default_backend_name() : o.backend);
  const Environment env = current_environment(backend);
  TL_CHECK(env.device.type == "cpu", "pinning: backend '" + backend.name() + "' is not a CPU backend");
  const std::string run_id = new_run_id();
  const Ledger ledger(o.ledger_path.empty() ? default_ledger_path("cpu") : o.ledger_path);
  std::cout << fmt::format(
      "# pinning: {} physical cores ({} logical CPUs: {}), halves {} | {} (hwloc); {} arms x {} repeats interleaved, "
      "each repeat its own process; workload: batch {}, decode cost {}, {} loader worker(s), {} warm-up + {} measured "
      "steps; conditions: {}\n",
      topology.physical_cores(), all.size(), cpu_list(all), cpu_list(half_a), cpu_list(half_b), arms.size(), o.repeats,
      o.workload.batch, o.workload.decode_cost, workers, o.workload.warmup, o.workload.steps,
      o.contend > 0 ? "quiet and contended, alternating each round" : "quiet");
  std::cout << fmt::format("# device: {}, backend {}, timer {}, engine {}; run {}\n", env.device.name, env.backend,
                           env.timer, env.engine(), run_id);
  // threads_capped is default's configuration when the default thread count (this process's, as
  // unconfined as default's children) is the physical core count.
  const bool capped_equals_default = env.threads == topology.physical_cores();
  if (half_a == half_b)
    std::cout << "# one core: pinned_split and pinned_half_shared are the same arm here (nothing to split)\n";
  std::cout.flush();
  // The trace (a profiled run is slower): an extra pinned_split repeat before the rounds, not counted.
  std::string trace_error;
  if (!o.trace_path.empty()) {
    const ChildResult traced = run_arm(o, arms[3], workers, o.trace_path);
    if (!traced.ok) trace_error = traced.error;
    std::cout << (traced.ok ? "# trace of pinned_split (an extra repeat, not counted): " + o.trace_path
                            : "# trace of pinned_split failed: " + traced.error)
              << "\n";
  }

  // results[condition][arm]
  std::vector<std::vector<PinningArm>> results(conditions.size(), std::vector<PinningArm>(arms.size()));
  for (int round = 0; round < o.repeats; ++round) {
    for (std::size_t c = 0; c < conditions.size(); ++c) {
      Contention contention(c == 0 ? 0 : o.contend);
      for (std::size_t a = 0; a < arms.size(); ++a) {
        const ArmPlan& arm = arms[a];
        const ChildResult r = run_arm(o, arm, workers, "");
        const std::string main_expected = arm.main.empty() ? cpu_list(all) : cpu_list(arm.main);
        const std::string workers_expected = arm.workers.empty() ? main_expected : cpu_list(arm.workers);
        json row = env.to_json();
        row["run_id"] = run_id;
        row["kind"] = "pinning_repeat";
        row["condition"] = conditions[c];
        row["contend_threads"] = c == 0 ? 0 : o.contend;
        row["arm"] = arm.name;
        row["calibration"] = a < 2;
        row["round"] = round;
        row["workers"] = workers;
        row["batch"] = o.workload.batch;
        row["decode_cost"] = o.workload.decode_cost;
        row["capped_equals_default"] = capped_equals_default;
        row["default_threads"] = env.threads;
        row["physical_cores"] = topology.physical_cores();
        row["requested"] = {{"main", arm.main.empty() ? "unconfined" : cpu_list(arm.main)},
                            {"workers", arm.workers.empty() ? "unconfined" : cpu_list(arm.workers)},
                            {"threads", arm.threads}};
        PinningArm& out = results[c][a];
        out.name = arm.name;
        out.workers = workers;
        if (!r.ok) {
          row["status"] = "failed";
          row["error"] = r.error;
          row["threads"] = arm.threads;
          std::cout << fmt::format("round {}/{} {:<28} {:<20} FAILED: {}\n", round + 1, o.repeats, conditions[c],
                                   arm.name, r.error);
        } else {
          const json& rb = r.value.at("readback");
          // Every worker started its hook and has the arm's mask; every other thread has main's.
          const bool as_set = !rb.is_null() && rb.at("main") == main_expected && rb.at("worker_threads") == workers &&
                              rb.at("workers") == workers_expected &&
                              (rb.at("other_threads") == "" || rb.at("other_threads") == main_expected);
          row["status"] = "ok";
          row["threads"] = r.value.at("threads");
          row["samples_per_s"] = r.value.at("samples_per_s");
          row["measured_steps"] = r.value.at("measured_steps");
          row["warmup_steps_excluded"] = r.value.at("warmup_steps_excluded");
          row["data_wait_share"] = r.value.at("data_wait_share");
          row["step_seconds"] = r.value.at("step_seconds");
          row["applied"] = {{"main", rb.is_null() ? "?" : rb.at("main")},
                            {"workers", rb.is_null() ? "?" : rb.at("workers")},
                            {"other_threads", rb.is_null() ? "?" : rb.at("other_threads")},
                            {"expected_main", main_expected},
                            {"expected_workers", workers_expected},
                            {"as_set", as_set}};
          out.samples_per_s.push_back(r.value.at("samples_per_s").get<double>());
          out.threads = r.value.at("threads").get<int>();
          out.main_cpus = rb.is_null() ? "?" : rb.at("main").get<std::string>();
          out.worker_cpus = rb.is_null() ? "?" : rb.at("workers").get<std::string>();
          if (!as_set) ++out.affinity_mismatches;
          std::cout << fmt::format("round {}/{} {:<28} {:<20} {:>8.1f} samples/s  threads {}  main {}  workers {}{}\n",
                                   round + 1, o.repeats, conditions[c], arm.name, out.samples_per_s.back(), out.threads,
                                   out.main_cpus, out.worker_cpus, as_set ? "" : "  AFFINITY NOT AS SET");
        }
        std::cout.flush();
        if (!o.no_ledger) ledger.append(row);
      }
    }
  }
  std::vector<PinningAnalysis> analyses;
  for (std::size_t c = 0; c < conditions.size(); ++c) {
    analyses.push_back(analyse_pinning(conditions[c], results[c], capped_equals_default));
    std::cout << fmt::format("\nPinning, {} ({} repeats per arm, each its own process):\n\n", conditions[c], o.repeats);
    std::cout << pinning_table(analyses.back(), true) << "\n" << pinning_findings(analyses.back());
  }
  if (analyses.size() > 1) std::cout << "\nQuiet and contended side by side:\n\n" << pinning_comparison(analyses, true);
  if (!o.no_ledger) std::cout << "\nrows: " << ledger.path() << " (run " << run_id << ")\n";
  if (!trace_error.empty()) {
    std::fprintf(stderr, "pinning: error: the trace (--trace %s) was not written: %s\n", o.trace_path.c_str(),
                 trace_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pinning: CPU affinity arms against their own noise floor (seed 000)", "pinning"};
  Options o;
  app.add_option("--repeats", o.repeats, "repeats per arm, interleaved (the seed: 3 is too few to read)")
      ->check(FiniteRange(1, 100))
      ->capture_default_str();
  app.add_option("--contend", o.contend, "also run every round with N busy threads of unpinned background load")
      ->check(FiniteRange(0, 1024));
  app.add_flag("--quick", o.quick, "3 repeats of 10 measured steps (make test's form)");
  app.add_option("--batch", o.workload.batch, "batch size")->check(FiniteRange(1, 65536))->capture_default_str();
  app.add_option("--decode-cost", o.workload.decode_cost, "per-sample loader work")
      ->check(FiniteRange(0, 100000))
      ->capture_default_str();
  app.add_option("--workers", o.workload.workers, "loader workers (default: the physical cores of the workers' half)")
      ->check(FiniteRange(1, 64));
  app.add_option("--steps", o.workload.steps, "measured steps per repeat")
      ->check(FiniteRange(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", o.workload.warmup, "warm-up steps per repeat (excluded)")
      ->check(FiniteRange(0, 1000))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "CPU backend (default: the best one)");
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)");
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  app.add_option("--trace", o.trace_path,
                 "a Chrome trace of pinned_split, an extra repeat before the rounds (not counted)");
  app.add_option("--timeout", o.timeout, "seconds one repeat may take before it is ended")
      ->check(FiniteRange(1.0, 86400.0));
  // The child's side: set by the study when it starts an arm.
  app.add_option("--child-arm", o.child_arm)->group("");
  app.add_option("--child-threads", o.child_threads)->group("");
  app.add_option("--child-worker-cpus", o.child_workers_cpus)->group("");
  int spin = 0;
  app.add_option("--child-spin", spin)->group("");
  if (const auto status = parse_command_line(app, argc, argv, "pinning")) return *status;
  try {
    if (!o.child_arm.empty()) return run_child(o);
    if (spin > 0) return run_spinners(spin);
    // Refused before any arm runs (a directory as --trace printed its error and went on, exit 0).
    if (!o.trace_path.empty()) check_output_file(o.trace_path, "--trace");
    if (o.quick) {
      if (app.count("--repeats") == 0) o.repeats = 3;
      if (app.count("--steps") == 0) o.workload.steps = 10;
      if (app.count("--warmup") == 0) o.workload.warmup = 2;
    }
    return run_study(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pinning: error: %s\n", e.what());
    return 2;
  }
}
