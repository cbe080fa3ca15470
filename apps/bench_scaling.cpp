// bench_scaling: weak and strong scaling of DDP training, world sizes 1, 2 and 4 inside one launch.
//   scripts/mpirun -np 4 build/bin/bench_scaling
// World size W runs on a sub-communicator of the first W launched ranks; the others wait without
// spinning. Repeats are interleaved (every configuration once per round), warm-up steps excluded,
// each run's time the slowest rank's. Prints seed 000's two tables, the communication fraction by
// the paired no_sync comparison (repeated, with its spread, flagged when unusable), the
// decode-cost-0 ablation, DDP's overlap, the per-rank step-time distribution naming the slowest
// rank, and PyTorch DDP (gloo) at world 1 and 2 beside trainlab's (SmallCNN and ResNet: the peer's twins).
// --model NAME trains another registered model in every run. Every run is a ledger row.
#include <cstdio>

#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "comm/mpi_communicator.h"
#include "studies/scaling/scaling_study.h"

using namespace trainlab;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  CLI::App app{"bench_scaling: weak and strong scaling of DDP training at world sizes 1, 2 and 4", "bench_scaling"};
  bench::ScalingOptions o;
  o.peer_script = std::string(TRAINLAB_SOURCE_DIR) + "/bench/peers/torch_ddp.py";
  add_model_options(app, o.model, "the model every run trains (the PyTorch DDP peer runs beside SmallCNN and ResNet)");
  app.add_option("--worlds", o.worlds, "world sizes, at most the launched ranks")->capture_default_str();
  app.add_option("--repeats", o.repeats, "repeats per configuration, interleaved")->check(FiniteRange(1, 100));
  app.add_option("--batch", o.batch, "weak scaling: per-worker batch")->check(FiniteRange(1, 65536));
  app.add_option("--global-batch", o.global_batch, "strong scaling: global batch")->check(FiniteRange(1, 65536));
  app.add_option("--base-batch", o.base_batch, "the LR rule's base batch (lr = base-lr x global / base)")
      ->check(FiniteRange(1, 65536));
  app.add_option("--base-lr", o.base_lr, "LR at the base batch")->check(FiniteRange(1e-6, 10.0));
  app.add_option("--steps", o.steps, "measured steps per run")->check(FiniteRange(1, 100000));
  app.add_option("--warmup", o.warmup, "warm-up steps per run (excluded)")->check(FiniteRange(0, 1000));
  CLI::Option* decode = app.add_option("--decode-cost", o.decode_cost,
                                       "per-sample decode work (the ablation reruns at 0; a token model has none)")
                            ->check(FiniteRange(0, 100000));
  app.add_flag("!--no-ablation", o.ablation, "skip the decode-cost-0 tables");
  app.add_option("--trials", o.trials, "paired no_sync comparisons per world size")->check(FiniteRange(0, 1000));
  app.add_option("--trial-steps", o.trial_steps, "measured steps per no_sync trial run")->check(FiniteRange(1, 100000));
  app.add_option("--threads", o.threads, "compute threads per rank")->check(FiniteRange(1, 1024));
  app.add_option("--backend", o.backend, "engine backend (default: the default CPU backend)");
  app.add_option("--dtype", o.dtype, "f32 | bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--allreduce", o.allreduce,
                 "ring | recursive_doubling | halving_doubling | single_copy | auto | native, or a list compared "
                 "side by side (ring,single_copy)")
      ->capture_default_str();
  app.add_option(
      "--allreduce-tuning", o.allreduce_tuning,
      "--allreduce auto: the thresholds file bench_allreduce --write-tuning wrote (default: built-in thresholds)");
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "DDP bucket capacity (MiB)")->check(FiniteRange(0.001, 4096.0));
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "DDP's first bucket (MiB; PyTorch uses 1)")
      ->check(FiniteRange(0.001, 4096.0));
  app.add_flag("--rendezvous", o.rendezvous, "DDP meets the other ranks at a sleeping rendezvous before each bucket");
  app.add_option("--comm-timeout", o.timeout, "seconds any wait may take")->check(FiniteRange(0.1, 86400.0));
  app.add_flag("!--no-peer", o.peer, "skip PyTorch DDP (gloo)");
  app.add_option("--python", o.python, "the interpreter with torch for the peer")->capture_default_str();
  app.add_option("--peer-script", o.peer_script, "the PyTorch DDP peer")->capture_default_str();
  app.add_option("--bind", o.bind, "core: each rank (all its threads) on its own physical core; none: unbound")
      ->check(CLI::IsMember({"core", "none"}))
      ->capture_default_str();
  app.add_flag("--bind-compare", o.bind_compare,
               "weak-scaling efficiency at world 2 with --bind none (twice: the calibration pair) and core, "
               "interleaved, instead of the scaling tables");
  app.add_option("--zero", o.zero,
                 "ZeRO stage of the runs: 0 (replicated), 1 (optimiser state sharded), 2 (gradients too) or 3 "
                 "(parameters too); a list (0,1,2,3) compares them side by side (weak scaling at each world >= 2, "
                 "interleaved) instead of the "
                 "scaling tables")
      ->capture_default_str();
  app.add_option("--grad-compress", o.grad_compress,
                 "DDP communication hook: none, bf16 or fp16; a list (none,bf16) compares them side by side "
                 "(weak-scaling efficiency per arm, and held-out accuracy over paired seeds) instead of the "
                 "scaling tables")
      ->capture_default_str();
  app.add_option("--accuracy-steps", o.accuracy_steps, "with --grad-compress LIST: training steps per accuracy run")
      ->check(FiniteRange(1, 1000000))
      ->capture_default_str();
  app.add_option("--accuracy-seeds", o.accuracy_seeds, "with --grad-compress LIST: paired seeds (0: no accuracy runs)")
      ->check(FiniteRange(0, 100))
      ->capture_default_str();
  app.add_option("--bucket-view", o.bucket_view,
                 "DDP gradients as views of the buckets (true; PyTorch's gradient_as_bucket_view) or copied (false)")
      ->capture_default_str();
  app.add_option("--comm", o.comm,
                 "DDP communicator: mpi, or nccl (CUDA builds, with --backend cuda, one GPU per rank)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  app.add_option("--ledger", o.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_flag("--no-ledger", o.no_ledger, "print only");
  if (const auto status = parse_command_line(app, argc, argv, "bench_scaling")) return *status;
  // A token model's windows are not decoded: its runs are at decode cost 0, with no ablation to add.
  if (find_model(o.model.name).context) {
    if (decode->count() > 0 && o.decode_cost != 0) {
      std::fprintf(stderr,
                   "bench_scaling: error: --decode-cost %lld: model '%s' trains on windows of token ids, which are "
                   "not decoded (allowed: 0)\n",
                   static_cast<long long>(o.decode_cost), o.model.name.c_str());
      return 2;
    }
    o.decode_cost = 0;
    o.ablation = false;
  }
  return bench::run_scaling_study(o);
}
