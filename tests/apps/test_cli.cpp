// The trainlab binary: bad input of every kind exits 2 with exactly one line on stderr naming the
// problem; a good run trains, saves and resumes.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/measure/stats.h"
#include "studies/allreduce/rows.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

struct Run {
  int exit_code;
  std::string out;  // stdout and stderr, kept apart
  std::string err;
};

Run run(const std::string& args) {
  const auto err_path = fs::temp_directory_path() / ("trainlab-cli-err-" + std::to_string(::getpid()));
  const std::string command = std::string(TRAINLAB_CLI) + " " + args + " 2>" + err_path.string();
  std::FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  std::ifstream err_file(err_path);
  std::string err((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
  fs::remove(err_path);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err};
}

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

void expect_bad_input(const std::string& args, std::initializer_list<const char*> fragments) {
  INFO("trainlab " << args);
  const Run r = run(args);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.rfind("trainlab: error: ", 0) == 0);
  for (const char* fragment : fragments) CHECK(r.err.find(fragment) != std::string::npos);
}

const std::string kSmall = "--steps 3 --batch 8 --train-samples 64 --eval-samples 20 --eval-batch 20 --log-every 1";

}  // namespace

TEST_CASE("cli: bad flags and values exit 2 with one line", "[cli]") {
  expect_bad_input("train --bogus 3", {"--bogus"});
  expect_bad_input("train --batch abc", {"--batch", "'abc'", "integer"});
  expect_bad_input("train --batch 0", {"batch", "1..65536"});
  expect_bad_input("train --lr -0.5", {"lr", "(0, 10]"});
  expect_bad_input("train --optimizer adam", {"'adam'", "sgd | adamw"});
  expect_bad_input("train --backend tpu", {"unknown backend 'tpu'", "reference"});
  // A combination the backend cannot run: the planner's one line, before any step.
  expect_bad_input("train --backend onednn --dtype f64", {"conv2d in f64 (NCHW) does not run on backend 'onednn' (ISA ",
                                                          "what would work", "--backend reference (native)"});
  expect_bad_input("train --config /nonexistent.yaml", {"/nonexistent.yaml", "does not exist"});
  expect_bad_input("train --resume /nonexistent-checkpoint", {"/nonexistent-checkpoint", "does not exist"});
  expect_bad_input("train --batch 64 --train-samples 10", {"train_samples (10) must be at least batch (64)"});
  expect_bad_input("frobnicate", {"frobnicate"});
  expect_bad_input("", {"subcommand"});
}

TEST_CASE("cli: a config file with a bad key exits 2 naming file and key", "[cli]") {
  const auto path = fs::temp_directory_path() / ("trainlab-cli-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << "steps: 10\nbatch_size: 32\n";
  expect_bad_input("train --config " + path.string(), {path.string().c_str(), "unknown key 'batch_size'"});
  std::ofstream(path, std::ios::trunc) << "workers: many\n";
  expect_bad_input("train --config " + path.string(), {"'many' for workers", "integer"});
  fs::remove(path);
}

TEST_CASE("cli: train, save, resume; a damaged checkpoint is refused", "[cli]") {
  const auto dir = fs::temp_directory_path() / ("trainlab-cli-ckpt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Run first = run("train " + kSmall + " --save " + dir.string());
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(first.out.find("step      3/3") != std::string::npos);
  CHECK(first.out.find("held-out accuracy") != std::string::npos);
  CHECK(first.out.find("data-wait") != std::string::npos);
  CHECK(fs::exists(dir / "COMPLETE"));

  const Run resumed = run("train " + kSmall + " --steps 5 --resume " + dir.string());
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.out.find("resumed at step 3") != std::string::npos);
  CHECK(resumed.out.find("step      5/5") != std::string::npos);

  expect_bad_input("train " + kSmall + " --lr 0.1 --steps 5 --resume " + dir.string(), {"trained with lr 0.01"});
  fs::resize_file(dir / "model.safetensors", 100);
  expect_bad_input("train " + kSmall + " --steps 5 --resume " + dir.string(), {"model.safetensors", "truncated"});
  fs::remove_all(dir);
}

TEST_CASE("cli: throughput and grad-dump refuse bad input", "[cli]") {
  expect_bad_input("throughput --batch 0", {"--batch", "0"});
  expect_bad_input("throughput --dtype f8", {"--dtype", "f8"});
  expect_bad_input("throughput --backend quantum", {"unknown backend 'quantum'"});
  expect_bad_input("grad-dump --weights /nonexistent.safetensors --batch /nonexistent --out /tmp/x",
                   {"/nonexistent.safetensors"});
  // A weights file that is a valid safetensors file but not SmallCNN's state dict.
  const auto dir = fs::temp_directory_path() / ("trainlab-cli-grad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Run saved = run("train " + kSmall + " --save " + (dir / "ckpt").string());
  REQUIRE(saved.exit_code == 0);
  expect_bad_input("grad-dump --weights " + (dir / "ckpt/optimizer.safetensors").string() + " --batch " +
                       (dir / "ckpt/model.safetensors").string() + " --out " + (dir / "g.safetensors").string(),
                   {"no tensor named 'images'", "batch"});
  expect_bad_input("grad-dump --weights " + (dir / "ckpt/optimizer.safetensors").string() + " --batch " +
                       (dir / "ckpt/model.safetensors").string() + " --out " + (dir / "g.safetensors").string() +
                       " --dtype bf16 --backend reference",
                   {"batch"});
  const Run ok = run("throughput --backend reference --batch 4 --seconds 0.01 --warmup 1 --ceiling-seconds 0.2");
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("\"samples_per_s\"") != std::string::npos);
  // The step against this process's GEMM ceiling: in the JSON (each phase's share) and on stderr.
  const auto json = nlohmann::json::parse(ok.out.substr(0, ok.out.find('\n')));
  const auto& ceiling = json.at("ceiling");
  CHECK(ceiling.at("gemm_n").get<int>() >= 256);  // the smallest size; the reference is slow
  CHECK(ceiling.at("gemm_gflop_per_s").get<double>() > 0);
  for (const char* phase : {"step", "forward", "backward"}) {
    INFO(phase);
    CHECK(ceiling.at("share").at(phase).get<double>() > 0);
  }
  CHECK(json.at("gflop_per_s_by_phase").at("backward").get<double>() > 0);
  CHECK(ok.err.find("of this process's f32 GEMM ceiling") != std::string::npos);
  const Run none = run("throughput --backend reference --batch 4 --seconds 0.01 --warmup 1 --ceiling-seconds 0");
  CHECK(none.exit_code == 0);
  CHECK(none.out.find("\"skipped\":\"not measured (ceiling seconds 0)\"") != std::string::npos);
  expect_bad_input("throughput --ceiling-seconds -1", {"--ceiling-seconds", "-1"});
  fs::remove_all(dir);
}

TEST_CASE("cli: help, version and backends", "[cli]") {
  const Run help = run("train --help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("--decode-cost") != std::string::npos);
  CHECK(help.out.find("--eval-every") != std::string::npos);
  const Run version = run("version");
  CHECK(version.exit_code == 0);
  CHECK(version.out.find("trainlab 0.1.0") != std::string::npos);
  CHECK(version.out.find("\ncpu: ") != std::string::npos);  // the ISA in use, this CPU's and the build's target
  CHECK(version.out.find("; build ") != std::string::npos);
  const Run backends = run("backends");
  CHECK(backends.exit_code == 0);
  CHECK(backends.out.find("reference") != std::string::npos);
}

TEST_CASE("cli: collective-cost reproduces seed 001 and refuses bad input", "[cli]") {
  const Run r =
      run("collective-cost --gpus 32 --bw 25 --latency 20 --params 1.3 --bytes-per-param 2 --step-ms 400 "
          "--buckets 1,8,16,25,100 --scale-to 256");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* fragment : {"202.7 ms", "15.26 MiB", "3276.7", "585.9", "393.7", "325.5", "232.5", "217.4 ms",
                               "122.07 MiB", "1227.2 ms", "1 GB/s = 1e9 bytes/s"}) {
    INFO(fragment);
    CHECK(r.out.find(fragment) != std::string::npos);
  }
  const Run e =
      run("collective-cost --gpus 32 --bw 25 --latency 20 --params 1.3 --step-ms 400 --accumulate 4 --zero 2 "
          "--node-size 8 --intra-bw 300");
  INFO(e.out << e.err);
  REQUIRE(e.exit_code == 0);
  for (const char* fragment : {"12.7% of it", "2.95 GiB (was 19.37 GiB)", "= 35.1 ms, against 202.7 ms"})
    CHECK(e.out.find(fragment) != std::string::npos);
  expect_bad_input("collective-cost --gpus 32 --bw 25 --latency 20 --params 1.3 --step-ms 400 --node-size 8",
                   {"--node-size needs --intra-bw"});
  expect_bad_input("collective-cost --gpus 32 --bw 25 --latency 20 --params 1.3 --step-ms 400 --intra-bw 300",
                   {"--intra-bw needs --node-size"});
  expect_bad_input("collective-cost --gpus 32 --bw 25 --latency 20 --params 1.3 --step-ms 400 --zero 5", {"--zero"});
  expect_bad_input("collective-cost --gpus 32 --bw 25", {"missing", "--latency", "--params", "--step-ms", "--fit"});
  expect_bad_input("collective-cost --gpus 1 --bw 25 --latency 20 --params 1 --step-ms 4", {"--gpus", "1"});
  expect_bad_input("collective-cost --gpus 8 --bw 25 --latency 20 --params 1 --step-ms 4 --buckets 1,x",
                   {"--buckets", "'x'"});
  expect_bad_input("collective-cost --fit /nonexistent.jsonl", {"/nonexistent.jsonl"});
  // Non-finite and absurd bucket sizes are refused, not turned into negative counts and times.
  const std::string model = "collective-cost --gpus 8 --bw 25 --latency 20 --params 1 --step-ms 4 --buckets ";
  expect_bad_input(model + "1e-300", {"--buckets", "'1e-300'", "1 KiB to 1 TiB"});
  expect_bad_input(model + "inf", {"--buckets", "'inf'", "not a size"});
  expect_bad_input(model + "nan", {"--buckets", "'nan'"});
}

TEST_CASE("cli: outputs and inputs that are not regular files are refused before any work", "[cli]") {
  const auto dir = fs::temp_directory_path() / ("trainlab-cli-dir-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // A directory as --trace: refused before the first step, not after the run.
  {
    const Run r = run("train " + kSmall + " --trace " + dir.string());
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find("step ") == std::string::npos);
    CHECK(r.err.find("--trace") != std::string::npos);
  }
  expect_bad_input("train --config /dev/null", {"'/dev/null' is a character device"});
  expect_bad_input("grad-dump --weights /dev/null --batch /dev/null --out " + dir.string(),
                   {"grad-dump --out", "is a directory"});
  // An empty path is refused by name, never an internal error (issue 49: make-dataset --out '').
  expect_bad_input("make-dataset --out '' --samples 4", {"--out", "an empty path"});
  expect_bad_input("loader-bench --data ''", {"--data", "an empty path"});
  // A tuning file that is not there is refused at world 1 too, where no DDP would read it (issue 49).
  expect_bad_input("train " + kSmall + " --allreduce auto --allreduce-tuning /nonexistent-tuning.json",
                   {"allreduce_tuning", "/nonexistent-tuning.json"});
  expect_bad_input("train " + kSmall + " --allreduce-tuning " + dir.string(),
                   {"allreduce_tuning", "read by allreduce auto only"});
  fs::remove_all(dir);
}

TEST_CASE("cli: collective-cost --fit reads bench_allreduce rows from a ledger", "[cli]") {
  const auto path = fs::temp_directory_path() / ("trainlab-cli-fit-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(path);
  {
    // Two regimes, as on this machine: cache-resident (fast) below 1 MiB, memory-bound from 1 MiB.
    // The rows as bench_allreduce writes them (studies/allreduce/rows.h).
    namespace bench = trainlab::bench;
    const bench::Ledger ledger(path.string());
    bench::AllreduceRow row;
    row.header.env.device = {"cpu", "x"};
    row.header.kind = bench::AllreduceRow::kKind;
    row.header.run_id = "r1";
    row.header.status = "ok";
    row.config.ranks = 2;
    row.config.dtype = "f32";
    for (std::int64_t bytes = 4096; bytes <= 64 << 20; bytes *= 2) {
      const double b = static_cast<double>(bytes);
      const double seconds = bytes < 1024 * 1024 ? 20e-6 + b / 20e9 : 4e-6 + b / 2e9;
      for (const char* algorithm : {"ring", "native"}) {
        row.config.bytes = bytes;
        row.config.count = bytes / 4;
        row.config.algorithm = algorithm;
        row.stats = bench::summarize({seconds});
        ledger.append(row);
      }
    }
  }
  const Run r = run("collective-cost --fit " + path.string());
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("run r1: ring all-reduce, 2 ranks, f32, 15 sizes") != std::string::npos);
  CHECK(r.out.find("fits POORLY") != std::string::npos);
  CHECK(r.out.find("two regimes, split at 1 MiB") != std::string::npos);
  // With --params the model's questions are answered with the fitted regime that fits the message.
  const Run answered = run("collective-cost --fit " + path.string() + " --params 0.001 --step-ms 50 --buckets 1,4");
  INFO(answered.out << answered.err);
  CHECK(answered.exit_code == 0);
  CHECK(answered.out.find("with the fitted alpha and B (upper regime)") != std::string::npos);
  CHECK(answered.out.find("B = 2 GB/s") != std::string::npos);
  expect_bad_input("collective-cost --fit " + path.string() + " --run nope", {"--run 'nope'", "r1"});
  fs::remove(path);
}

TEST_CASE("cli: memory prints seed 003's table and refuses bad input", "[cli]") {
  const Run r = run("memory --params 1e9 --workers 8");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* row : {"| 0 | 2.00 | 2.00 | 12.00 | 16.00 |", "| 1 | 2.00 | 2.00 | 1.50 | 5.50 |",
                          "| 2 | 2.00 | 0.25 | 1.50 | 3.75 |", "| 3 | 0.25 | 0.25 | 1.50 | 2.00 |"})
    CHECK(r.out.find(row) != std::string::npos);
  expect_bad_input("memory --workers 8", {"--params is required"});
  expect_bad_input("memory --params 1e9 --zero 0,5", {"'5' is not a stage"});
  expect_bad_input("memory --params 1e9 --optimizer adamw --moment-bytes 4", {"drop --moment-bytes"});
  expect_bad_input("memory --params -3", {"--params"});
}

TEST_CASE("cli: memory --config measures a step next to the estimate", "[cli]") {
  const std::string config = std::string(TRAINLAB_SOURCE_DIR) + "/configs/smallcnn.yaml";
  const Run r = run("memory --config " + config + " --batch 16 --dtype bf16 --fuse");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* text : {"batch 16, bf16, nchw, fused", "| activations |", "| working_copies | 2.04 | 2.04 |",
                           "step peak without the input batches", "memory (tensors on cpu): peak"})
    CHECK(r.out.find(text) != std::string::npos);
  expect_bad_input("memory --config " + config + " --params 1e9", {"--params is for the persistent-state"});
  expect_bad_input("memory --config " + config + " --dtype f8", {"dtype", "'f8'"});
  expect_bad_input("memory --config " + config + " --batch 0", {"batch"});
  expect_bad_input("memory --config /nonexistent.yaml", {"/nonexistent.yaml"});
}

TEST_CASE("cli: train --audit prints each op's precision and the f32 reference, and records it", "[cli]") {
  const fs::path json = fs::temp_directory_path() / ("trainlab-audit-" + std::to_string(::getpid()) + ".json");
  const Run bf16 = run("train " + kSmall + " --backend reference --dtype bf16 --audit --audit-file " + json.string());
  INFO(bf16.out << bf16.err);
  REQUIRE(bf16.exit_code == 0);
  for (const char* text : {"compute dtype bf16; master weights f32; their gradients f32; optimiser state f32",
                           "| conv2d | bf16, bf16 | bf16 | f32 (the backend's accumulator), rounded to bf16 |",
                           "| cast | f32 | bf16 | - (a copy) |", "| cross_entropy | f32 | f32 | f32 |",
                           "loss scaler: none", "non-finite checks: the loss and every gradient",
                           "against an f32 run of the same seed and 3 steps", "gradient reduction: none (one process)"})
    CHECK(bf16.out.find(text) != std::string::npos);
  std::ifstream recorded(json);
  std::string line;
  REQUIRE(std::getline(recorded, line));
  CHECK(line.find("\"compute_dtype\":\"bf16\"") != std::string::npos);
  CHECK(line.find("\"reference_is_the_run\":false") != std::string::npos);
  fs::remove(json);
  // f16: the loss scaler's settings and its skipped steps; f32: the run is its own reference.
  const Run f16 = run("train " + kSmall + " --backend reference --dtype f16 --audit");
  INFO(f16.out << f16.err);
  REQUIRE(f16.exit_code == 0);
  CHECK(f16.out.find("loss scaler: dynamic, initial scale 65536, growth interval 2000") != std::string::npos);
  const Run f32 = run("train " + kSmall + " --backend reference --audit");
  REQUIRE(f32.exit_code == 0);
  CHECK(f32.out.find("the run is f32 (its own reference)") != std::string::npos);
  expect_bad_input("train " + kSmall + " --audit-file /tmp/x.json", {"audit_file needs audit"});
  expect_bad_input("train " + kSmall + " --audit --eval-at-end false", {"audit", "eval_at_end"});
}

TEST_CASE("cli: make-dataset, verify-dataset and train --data", "[cli]") {
  const auto dir = fs::temp_directory_path() / ("trainlab-cli-data-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string d = dir.string();
  Run made = run("make-dataset --out " + d + " --layout shards --codec png --samples 96 --held-out 24 --shard-mb 0.1");
  INFO("make-dataset: " << made.out << made.err);
  REQUIRE(made.exit_code == 0);
  CHECK(made.out.find("96 samples") != std::string::npos);
  CHECK(made.out.find("shards, png") != std::string::npos);
  const Run verified = run("verify-dataset " + d);
  CHECK(verified.exit_code == 0);
  CHECK(verified.out.find("every size and CRC-32 matches") != std::string::npos);
  const Run trained = run("train --data " + d + " --steps 3 --batch 8 --log-every 1 --workers 1 --augment crop_flip");
  INFO("train: " << trained.out << trained.err);
  CHECK(trained.exit_code == 0);
  CHECK(trained.out.find("ShardDataset(") != std::string::npos);
  expect_bad_input("train --data " + d + " --decode-cost 5 --steps 2", {"decode_cost", "drop decode_cost"});
  expect_bad_input("train --augment crop_flip --steps 2", {"augment needs data"});
  expect_bad_input("train --data " + d + "/nope --steps 2", {"not a directory"});
  expect_bad_input("make-dataset --out " + d + " --samples 8", {"already holds a data set", "--overwrite"});
  expect_bad_input("make-dataset --out " + d + "/x --codec webp", {"--codec", "webp"});
  expect_bad_input("make-dataset --out " + d + "/x --image-size 48 --samples 4", {"--image-size 48", "multiple"});
  // A changed byte in a shard: verify-dataset names the file and exits 2; training names the sample.
  {
    std::fstream f(dir / "train" / "shard-000000.tlrec", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const Run bad = run("verify-dataset " + d);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("train/shard-000000.tlrec") != std::string::npos);
  const Run broken = run("train --data " + d + " --steps 20 --batch 8 --log-every 1");
  CHECK(broken.exit_code == 2);
  CHECK(broken.err.find("shard-000000.tlrec") != std::string::npos);
  CHECK(broken.err.find("sample") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("cli: throughput-budget, train --ledger, diagnose and inspect", "[cli]") {
  const Run seed = run("throughput-budget --seed-case");
  CHECK(seed.exit_code == 0);
  CHECK(seed.out.find("55.9%") != std::string::npos);
  const Run budget = run("throughput-budget --ranks 64 --per-rank 95 --loader-cap 6800 --p-slow 0.01");
  CHECK(budget.exit_code == 0);
  CHECK(budget.out.find("47.4% at 64 ranks, 72.4% at 128") != std::string::npos);
  expect_bad_input("throughput-budget --ranks 8", {"missing --per-rank, --loader-cap"});
  expect_bad_input("throughput-budget --seed-case --ranks 8", {"--seed-case", "drop --ranks"});
  expect_bad_input("throughput-budget --ranks 8 --per-rank 1 --loader-cap 1 --p-slow 2", {"--p-slow"});

  const auto dir = fs::temp_directory_path() / ("trainlab-cli-diagnose-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ledger = (dir / "ledger.jsonl").string(), ckpt = (dir / "ck").string();
  const Run trained = run("train " + kSmall + " --ledger " + ledger + " --save " + ckpt);
  REQUIRE(trained.exit_code == 0);
  const auto at = trained.out.find("(run ");
  REQUIRE(at != std::string::npos);
  const std::string run_id = trained.out.substr(at + 5, trained.out.find(')', at) - at - 5);
  const Run diagnosed = run("diagnose " + run_id + " --ledger " + ledger);
  INFO(diagnosed.out << diagnosed.err);
  CHECK(diagnosed.exit_code == 0);
  CHECK(diagnosed.out.find("1. step counter advancing") != std::string::npos);
  CHECK(diagnosed.out.find("8. checkpoint contents") != std::string::npos);
  CHECK(diagnosed.out.find("complete: model, optimiser, schedule, RNG and loader position") != std::string::npos);
  const Run inspected = run("inspect " + ckpt);
  CHECK(inspected.exit_code == 0);
  CHECK(inspected.out.find("model     conv1.weight f32 [32, 3, 3, 3]") != std::string::npos);
  CHECK(inspected.out.find("the next update uses lr 0.01") != std::string::npos);
  expect_bad_input("diagnose no-such-run --ledger " + ledger, {"'no-such-run'", "train with --ledger"});
  expect_bad_input("inspect " + (dir / "nothing").string(), {"nothing"});
  fs::remove_all(dir);
}

TEST_CASE("cli: make-dataset --from text:, train --model gpt, generate; bad text input in one line", "[cli]") {
  const auto dir = fs::temp_directory_path() / ("trainlab-cli-text-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "corpus");
  {
    std::ofstream f(dir / "corpus" / "a.txt");
    for (int i = 0; i < 300; ++i) f << "to be or not to be, that is the question " << i % 7 << "\n";
  }
  std::ofstream(dir / "latin1.txt", std::ios::binary) << "caf\xe9";
  const std::string d = (dir / "set").string(), ck = (dir / "ck").string();
  const Run made = run("make-dataset --from text:" + (dir / "corpus").string() + " --out " + d);
  INFO("make-dataset: " << made.out << made.err);
  REQUIRE(made.exit_code == 0);
  CHECK(made.out.find("vocabulary chars of") != std::string::npos);
  CHECK(run("verify-dataset " + d).exit_code == 0);
  const Run trained = run("train --model gpt --model-options n_layer=1,n_embd=16,n_head=2,block_size=16 --data " + d +
                          " --steps 4 --batch 4 --eval-samples 8 --log-every 2 --optimizer adamw --lr 0.003 "
                          "--grad-clip 1 --save " +
                          ck);
  INFO("train: " << trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  CHECK(trained.out.find("tokens/s") != std::string::npos);
  CHECK(trained.out.find("perplexity") != std::string::npos);
  CHECK(trained.out.find("sample (200 tokens after a newline, seed 0") != std::string::npos);
  const Run sampled = run("generate --checkpoint " + ck + " --prompt 'to be' --tokens 20 --seed 3");
  INFO("generate: " << sampled.out << sampled.err);
  CHECK(sampled.exit_code == 0);
  CHECK(sampled.out.rfind("to be", 0) == 0);
  CHECK(run("generate --checkpoint " + ck + " --prompt 'to be' --tokens 20 --seed 3").out == sampled.out);
  expect_bad_input("generate --checkpoint " + ck + " --prompt 'ZEBRA'", {"'Z' (U+005A) at character 0", "vocabulary"});
  expect_bad_input("generate --checkpoint " + ck + " --temperature 0", {"--temperature"});
  expect_bad_input("make-dataset --from text:" + (dir / "latin1.txt").string() + " --out " + d + "2",
                   {"latin1.txt", "byte 3"});
  expect_bad_input("make-dataset --from text:" + (dir / "nope").string() + " --out " + d + "2", {"nope"});
  expect_bad_input("make-dataset --from text:" + (dir / "corpus").string() + " --out " + d + "2 --codec png",
                   {"--codec is for image data sets"});
  expect_bad_input(
      "make-dataset --from text:" + (dir / "corpus").string() + " --out " + d + "2 --held-out-fraction 0.9",
      {"--held-out-fraction"});
  expect_bad_input("train --model gpt --model-options n_embd=30,n_head=4 --steps 2",
                   {"n_embd 30 is not divisible by n_head 4"});
  expect_bad_input("train --model gpt --model-options block_size=100000 --data " + d + " --steps 2", {"block_size"});
  expect_bad_input("train --data " + d + " --steps 2", {"holds token windows; model 'smallcnn' takes images"});
  // The data set rewritten in place with another vocabulary: a resume is refused before any weight is read.
  REQUIRE(
      run("make-dataset --from text:" + (dir / "corpus").string() + " --out " + d + " --overwrite --vocabulary bytes")
          .exit_code == 0);
  expect_bad_input("train --model gpt --model-options n_layer=1,n_embd=16,n_head=2,block_size=16 --data " + d +
                       " --steps 6 --batch 4 --eval-samples 8 --optimizer adamw --lr 0.003 --grad-clip 1 --resume " +
                       ck,
                   {"trained on another vocabulary", "256 bytes symbols"});
  // A checkpoint of an image model cannot generate.
  const std::string image_ck = (dir / "image-ck").string();
  REQUIRE(run("train " + kSmall + " --save " + image_ck).exit_code == 0);
  expect_bad_input("generate --checkpoint " + image_ck, {"takes images", "token model"});
  fs::remove_all(dir);
}
