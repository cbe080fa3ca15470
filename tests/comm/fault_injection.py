#!/usr/bin/env python3
"""Fault injection, deterministic by seed: what must hold when a run is killed, a rank stalls or
dies, or the ranks disagree. Every random choice (when to kill, which rank, which key) comes from
--seed, so a failure is reproduced by running the same command.

    tests/comm/fault_injection.py TRAINLAB MPIRUN [--seed 1] [--kills 6]

  saves    `trainlab train --save-every 1` killed (SIGKILL) at a random moment, again and again on
           the same directory: the checkpoint there always verifies (`trainlab verify-checkpoint`)
           or, before the first save finished, does not exist; a run that resumes from it trains
           on; the staging directories of killed saves are gone after the next save.
  rank     one of two DDP ranks killed mid-training: the job ends (non-zero) within the deadline,
           and the checkpoint rank 0 was writing still verifies or is the previous one.
  stall    a random rank stalls before a random communication: the job ends within the deadline,
           naming the rank.
  config   the ranks launched with one key different (a random key of those that shape training):
           refused at start-up, naming the key.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SMALL = ["--backend", "reference", "--threads", "1", "--batch", "16", "--train-samples", "256", "--eval-samples", "32",
         "--eval-batch", "32", "--log-every", "1000", "--eval-at-end", "false"]


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def verify(trainlab, directory):
    result = subprocess.run([trainlab, "verify-checkpoint", directory], capture_output=True, text=True, timeout=60)
    return result.returncode, (result.stdout + result.stderr).strip()


def staging_dirs(parent, name):
    return [d for d in os.listdir(parent) if d.startswith(f".{name}.saving-") or d.startswith(f".{name}.old-")]


def saves(trainlab, rng, kills, work):
    ckpt = os.path.join(work, "ck")
    for i in range(kills):
        args = [trainlab, "train", *SMALL, "--steps", "400", "--save-every", "1", "--save", ckpt]
        if os.path.isdir(ckpt):
            args += ["--resume", ckpt]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        delay = rng.uniform(0.3, 1.5)
        time.sleep(delay)
        if process.poll() is not None:
            fail(f"kill {i}: the run ended by itself before the kill at {delay:.2f} s: "
                 f"{process.stderr.read().decode().strip()}")
        process.send_signal(signal.SIGKILL)
        process.wait()
        if os.path.exists(ckpt):
            code, out = verify(trainlab, ckpt)
            if code != 0:
                fail(f"kill {i} at {delay:.2f} s left a checkpoint that does not verify: {out}")
            step = next((line for line in out.splitlines() if line.startswith("step ")), "?")
            print(f"kill {i} at {delay:.2f} s: checkpoint verifies ({step.split(';')[0]}); "
                  f"{len(staging_dirs(work, 'ck'))} staging dir(s) left by the kill")
        else:
            print(f"kill {i} at {delay:.2f} s: before the first save completed; no checkpoint")
    # One more run resumes and saves: the killed saves' staging directories are gone.
    if os.path.isdir(ckpt):
        code, out = verify(trainlab, ckpt)
        step = int(out.split("step ")[1].split(";")[0])
        result = subprocess.run([trainlab, "train", *SMALL, "--steps", str(step + 2), "--save", ckpt,
                                 "--resume", ckpt], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            fail(f"resuming from the last killed run's checkpoint failed: {result.stderr.strip()}")
        left = staging_dirs(work, "ck")
        if left:
            fail(f"staging directories of killed saves remain after the next save: {left}")
        print(f"resumed from step {step} and saved at {step + 2}; no staging directory left")


def ddp_rank_killed(trainlab, mpirun, rng, work):
    ckpt = os.path.join(work, "ddp")
    victim_delay = rng.uniform(1.0, 2.5)
    args = [mpirun, "-np", "2", trainlab, "train", *SMALL, "--steps", "400", "--save-every", "2", "--save", ckpt,
            "--comm-timeout", "5"]
    start = time.time()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(victim_delay)
    children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
    victims = []
    for child in children:
        try:
            if os.path.basename(os.readlink(f"/proc/{child}/exe")) == "trainlab":
                victims.append(child)
        except OSError:
            pass
    if not victims:
        fail(f"no trainlab rank found under mpirun after {victim_delay:.2f} s")
    victim = victims[rng.randrange(len(victims))]
    os.kill(int(victim), signal.SIGKILL)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        fail("a DDP job with a killed rank hung for 60 s")
    elapsed = time.time() - start
    if process.returncode == 0:
        fail("a DDP job with a killed rank exited 0")
    if os.path.exists(ckpt):
        code, out = verify(trainlab, ckpt)
        if code != 0:
            fail(f"the DDP checkpoint does not verify after a rank was killed: {out}")
    print(f"rank (pid {victim}) killed at {victim_delay:.2f} s: the job ended with status {process.returncode} "
          f"after {elapsed:.1f} s; the checkpoint {'verifies' if os.path.exists(ckpt) else 'was not written yet'}")


def ddp_stall(trainlab, mpirun, rng):
    rank = rng.randrange(2)
    operation = rng.randrange(10, 60)
    env = dict(os.environ, TRAINLAB_DEBUG_STALL=f"{rank}:60:{operation}")
    start = time.time()
    result = subprocess.run([mpirun, "-np", "2", trainlab, "train", *SMALL, "--steps", "50", "--comm-timeout", "2",
                             "--bucket-cap-mb", "0.05", "--allreduce", rng.choice(["ring", "native"])],
                            capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.time() - start
    out = result.stdout + result.stderr
    if result.returncode == 0:
        fail(f"rank {rank} stalled before operation {operation} and the job exited 0")
    if "timed out after" not in out or f"rank {rank}" not in out:
        fail(f"rank {rank} stalled and the message does not name it: {out[-600:]}")
    print(f"rank {rank} stalled before operation {operation}: named, the job ended after {elapsed:.1f} s")


def ddp_config_mismatch(trainlab, mpirun, rng):
    key, values = rng.choice([("--batch", ["16", "32"]), ("--lr", ["0.01", "0.02"]), ("--seed", ["0", "1"]),
                              ("--dtype", ["f32", "f64"]), ("--accumulate", ["1", "2"]),
                              ("--train-samples", ["256", "512"]), ("--optimizer", ["sgd", "adamw"])])
    base = [trainlab, "train", *SMALL, "--steps", "5"]
    result = subprocess.run([mpirun, "-np", "1", *base, key, values[0], ":", "-np", "1", *base, key, values[1]],
                            capture_output=True, text=True, timeout=60)
    out = result.stdout + result.stderr
    name = key[2:].replace("-", "_")
    if result.returncode == 0 or f"ranks disagree on the configuration: {name} is" not in out:
        fail(f"ranks launched with {key} {values[0]} and {values[1]} were not refused by name: {out[-600:]}")
    print(f"ranks with {key} {values[0]} and {values[1]}: refused at start-up, naming {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trainlab")
    parser.add_argument("mpirun")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=6)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="trainlab-faults-")
    try:
        print(f"fault injection, seed {args.seed}")
        saves(os.path.abspath(args.trainlab), rng, args.kills, work)
        ddp_rank_killed(os.path.abspath(args.trainlab), args.mpirun, rng, work)
        ddp_stall(os.path.abspath(args.trainlab), args.mpirun, rng)
        ddp_config_mismatch(os.path.abspath(args.trainlab), args.mpirun, rng)
        print("PASS: every fault left what was promised")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
