#include "studies/pinning/arm_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "backends/error.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

namespace {

constexpr const char* kResultTag = "PINNING_RESULT ";

std::string joined(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += "; ";
    out += s;
  }
  return out;
}

TrainConfig child_config(const PinningOptions& o) {
  TrainConfig config;
  config.model = o.workload.model;
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
  return config;
}

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

// The child's command line: its arm, its mask for the workers, the workload.
std::vector<std::string> child_args(const PinningOptions& o, const ArmPlan& arm, int workers,
                                    const std::string& trace) {
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
                                   std::to_string(o.workload.warmup),
                                   "--model",
                                   o.workload.model.name};
  if (!o.workload.model.options.empty())
    args.insert(args.end(), {"--model-options", model_options_text(o.workload.model.options)});
  if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
  if (!trace.empty()) args.insert(args.end(), {"--trace", trace});
  return args;
}

// Everything the child writes to `fd` until it closes it or `timeout` seconds pass (then
// `timed_out`).
std::string read_until_closed(int fd, double timeout, bool& timed_out) {
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  timed_out = false;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;  // the pipe is unusable: the child's status says the rest
    if (ready == 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  return output;
}

// The child's result from what it printed and how it ended.
ChildResult child_result(const PinningOptions& o, const ArmPlan& arm, const std::string& output, int status,
                         bool timed_out) {
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
    r.value = from_json<PinningChildReport>(json::parse(output.substr(at + std::strlen(kResultTag))));
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = std::string("arm ") + arm.name + " printed an unreadable result: " + e.what();
  }
  return r;
}

}  // namespace

int run_pinning_child(const PinningOptions& o) {
  const CpuSet worker_cpus = o.child_workers_cpus == "all" ? CpuSet{} : parse_cpu_list(o.child_workers_cpus);
  const TrainConfig config = child_config(o);
  std::mutex mutex;
  std::set<int> worker_tids;
  std::optional<PinningReadBack> readback;
  Trainer trainer(config);
  TrainCallbacks callbacks;
  callbacks.on_loader_worker_start = [&](int) {
    if (!worker_cpus.empty()) set_thread_affinity(0, worker_cpus);
    std::lock_guard lock(mutex);
    worker_tids.insert(current_tid());
  };
  callbacks.on_step = [&](const StepReport& report) {
    if (!report.measured || readback) return;
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
    readback =
        PinningReadBack{joined(main), joined(workers), joined(compute), static_cast<std::int64_t>(worker_tids.size())};
  };
  trainer.set_callbacks(callbacks);
  const TrainResult result = trainer.train(nullptr);
  const double total = result.measured.total();
  PinningChildReport out;
  out.samples_per_s = result.samples_per_s;
  out.threads = trainer.backend().num_threads();
  out.measured_steps = result.measured_steps;
  out.warmup_steps_excluded = result.warmup_steps;
  out.data_wait_share = total > 0 ? result.measured.data_wait_s / total : 0.0;
  out.step_seconds = result.step_seconds;
  out.readback = readback;
  std::printf("%s%s\n", kResultTag, to_json(out).dump().c_str());
  std::fflush(stdout);
  return 0;
}

int run_pinning_spinners(int threads) {
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

ChildResult run_arm(const PinningOptions& o, const ArmPlan& arm, int workers, const std::string& trace) {
  std::vector<std::string> args = child_args(o, arm, workers, trace);
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
  bool timed_out = false;
  const std::string output = read_until_closed(fds[0], o.timeout, timed_out);
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return child_result(o, arm, output, status, timed_out);
}

Contention::Contention(int threads) {
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

void Contention::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

}  // namespace trainlab::bench
