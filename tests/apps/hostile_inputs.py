#!/usr/bin/env python3
"""The reproducers of issue 30's fault-injection run (hostile inputs to the surfaces added since the
last audit), one case each: the command, then what must hold. Each failed on main at 9da3520.

Every case: no signal and no hang (a timeout fails), the exit status expected, stderr's error a
single line naming what it is about, and nothing written or removed outside the outputs.

    tests/apps/hostile_inputs.py BIN_DIR MPIRUN SOURCE_DIR [CASE ...]     (no case: all of them)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

BIN, MPIRUN, SOURCE = (os.path.abspath(p) for p in sys.argv[1:4])
T = os.path.join(BIN, "trainlab")
failures = []
SMALL = ["--backend", "reference", "--threads", "1", "--steps", "2", "--batch", "8", "--train-samples", "32",
         "--eval-samples", "16", "--eval-batch", "16", "--log-every", "1000"]


def run(args, timeout=120, cwd=None):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return None


def expect(case, result, status, fragments=(), one_line=True):
    """status: an int, or a set of allowed ints."""
    if result is None:
        failures.append(f"{case}: hung (timed out)")
        return
    allowed = status if isinstance(status, set) else {status}
    if result.returncode < 0:
        failures.append(f"{case}: killed by signal {-result.returncode}: {result.stderr.strip()[-300:]}")
        return
    if result.returncode not in allowed:
        failures.append(f"{case}: exit {result.returncode}, expected {sorted(allowed)}: "
                        f"{(result.stderr or result.stdout).strip()[-300:]}")
        return
    err = result.stderr.strip()
    if one_line and 0 not in allowed and len(err.splitlines()) != 1:
        failures.append(f"{case}: the error is {len(err.splitlines())} lines, not one: {err[:300]}")
    text = result.stderr + result.stdout
    for fragment in fragments:
        if fragment not in text:
            failures.append(f"{case}: the output lacks {fragment!r}: {text.strip()[-300:]}")
    if "internal error" in text or "terminate called" in text:
        failures.append(f"{case}: a library's text instead of a message: {text.strip()[-300:]}")


def remark_checkpoint(ck):
    """After an edit, recompute the CRCs in the checkpoint's COMPLETE marker (as the fault run did)."""
    path = os.path.join(ck, "COMPLETE")
    marker = json.load(open(path))
    for name, entry in marker["files"].items():
        data = open(os.path.join(ck, name), "rb").read()
        entry["bytes"] = len(data)
        entry["crc32"] = f"{zlib.crc32(data):08x}"
    marker.pop("crc32", None)
    text = json.dumps(marker, separators=(",", ":"), sort_keys=True)
    marker["crc32"] = f"{zlib.crc32(text.encode()):08x}"
    open(path, "w").write(json.dumps(marker, indent=2) + "\n")


def case_1_loader_batch_size_zero(work):
    ck = os.path.join(work, "ck")
    r = run([T, "train", *SMALL, "--save", ck])
    if r is None or r.returncode != 0:
        failures.append(f"1: could not train the checkpoint: {r.stderr if r else 'timeout'}")
        return
    state_path = os.path.join(ck, "state.json")
    state = json.load(open(state_path))
    state["loader"]["integers"]["batch_size"] = 0
    open(state_path, "w").write(json.dumps(state, indent=2) + "\n")
    remark_checkpoint(ck)
    for tool in ("inspect", "diagnose"):
        r = run([T, tool, ck])
        # inspect: 1 (a part is not usable); diagnose: it reports, 0. Never SIGFPE.
        expect(f"1 ({tool})", r, {0, 1}, ["batch_size 0"], one_line=False)


def case_2_dataset_study_work_not_a_directory(work):
    study = os.path.join(BIN, "dataset_study")
    a_file = os.path.join(work, "a-file")
    open(a_file, "w").write("mine\n")
    for target in (a_file, "/dev/null", "/proc/x"):
        r = run([study, "--quick", "--no-ledger", "--work", target])
        expect(f"2 (--work {target})", r, 2, ["--work"])
    if open(a_file).read() != "mine\n":
        failures.append("2: the file given as --work was changed")


def case_3_bind_compare_without_world_2(work):
    r = run([MPIRUN, "-np", "2", os.path.join(BIN, "bench_scaling"), "--bind-compare", "--worlds", "1", "--no-peer",
             "--no-ledger", "--steps", "1", "--repeats", "1"], timeout=300)
    expect("3", r, 2, ["--bind-compare measures worlds 1 and 2", "give --worlds 1,2"], one_line=False)


def case_4_compare_torch_inputs(work):
    script = os.path.join(SOURCE, "bench", "compare_torch.py")
    bad = {"missing": os.path.join(work, "missing.json"), "a directory": work, "/dev/null": "/dev/null"}
    for text, name in (("{", "malformed"), ("[]", "a list"), ("{}", "empty")):
        path = os.path.join(work, name + ".json")
        open(path, "w").write(text)
        bad[name] = path
    for mode in ("--render-only", "--verify"):
        for what, path in bad.items():
            r = run([sys.executable, script, mode, "--out", path])
            expect(f"4 ({mode} --out {what})", r, 2, ["--out"])
            if r is not None and "Traceback" in r.stderr:
                failures.append(f"4 ({mode} --out {what}): a traceback")
    for flag, value in (("--seconds", "nan"), ("--seconds", "inf"), ("--seconds", "1e308"), ("--batch", "0"),
                        ("--batch", "-1"), ("--batch", "65537"), ("--threads", "-1"), ("--threads", "100000")):
        r = run([sys.executable, script, flag, value, "--out", os.path.join(work, "never.json")])
        expect(f"4 ({flag} {value})", r, 2, [flag])
        if os.path.exists(os.path.join(work, "never.json")):
            failures.append(f"4 ({flag} {value}): a refused run wrote its --out")


def case_8_report_over_its_ledger(work):
    ledger = os.path.join(work, "ledger.jsonl")
    shutil.copy(os.path.join(SOURCE, "bench", "results", "ledger_cpu.jsonl"), ledger)
    before = open(ledger, "rb").read()
    r = run([os.path.join(BIN, "bench_report"), "--ledger", ledger, "--out", ledger])
    expect("8", r, 2, ["is the same file as --ledger"])
    if open(ledger, "rb").read() != before:
        failures.append("8: the ledger was changed")


def case_9_outputs_outside(work):
    study = os.path.join(BIN, "dataset_study")
    r = run([study, "--quick", "--no-ledger", "--work", ""], cwd=work)
    expect("9 (dataset_study --work '')", r, 2, ["--work is empty"])
    if any(name.startswith("shards-raw.partial-") for name in os.listdir("/")):
        failures.append("9: dataset_study --work '' left a staging directory in /")
    ledger = os.path.join(work, "ledger9.jsonl")
    shutil.copy(os.path.join(SOURCE, "bench", "results", "ledger_cpu.jsonl"), ledger)
    existed = os.path.exists("/dev/figures")  # (a build before the fix may have left one)
    r = run([os.path.join(BIN, "bench_report"), "--ledger", ledger, "--out", "/dev/null"])
    expect("9 (bench_report --out /dev/null)", r, 0)
    if os.path.exists("/dev/figures") and not existed:
        failures.append("9: bench_report --out /dev/null created /dev/figures")


def case_10_stale_partials(work):
    out = os.path.join(work, "data")
    # A stale staging directory of a killed run (its process is gone) and one that is not ours.
    stale = os.path.join(work, "data.partial-999999")
    os.makedirs(stale)
    open(os.path.join(stale, ".trainlab-staging"), "w").write("make-dataset staging\n")
    foreign = os.path.join(work, "data.partial-999998")
    os.makedirs(foreign)
    open(os.path.join(foreign, "keep.txt"), "w").write("mine\n")
    r = run([T, "make-dataset", "--out", out, "--samples", "64", "--held-out", "16"])
    expect("10", r, 0)
    if os.path.exists(stale):
        failures.append("10: a stale, marked staging directory of a killed run was left behind")
    if not os.path.exists(os.path.join(foreign, "keep.txt")):
        failures.append("10: a directory that only looks like staging (no mark) was removed")
    leftovers = [n for n in os.listdir(work) if n.startswith("data.partial-") and n != "data.partial-999998"]
    if leftovers:
        failures.append(f"10: make-dataset left {leftovers}")


def case_14_seed(work):
    for seed in ("-1", "18446744073709551616", "1e23", ""):
        r = run([T, "make-dataset", "--out", os.path.join(work, "s"), "--samples", "32", "--seed", seed])
        expect(f"14 (--seed {seed!r})", r, 2, ["--seed"])
    if os.path.exists(os.path.join(work, "s")):
        failures.append("14: a refused make-dataset wrote its --out")


def case_15_nan(work):
    for args, flag in (([T, "diagnose", "x", "--stall-factor", "nan"], "--stall-factor"),
                       ([T, "collective-cost", "--gpus", "16", "--bw", "10", "--latency", "5", "--params", "1",
                         "--node-size", "8", "--intra-bw", "100", "--intra-latency", "nan"], "--intra-latency"),
                       ([T, "memory", "--optimizer", "sgd", "--momentum", "nan", "--params", "1"], "--momentum")):
        r = run(args)
        expect(f"15 ({flag} nan)", r, 2, [flag, "not a finite number"])


def case_16_exit_status(work):
    # train --dry-run on a truncated data set: refused like the run would be.
    data = os.path.join(work, "d16")
    r = run([T, "make-dataset", "--out", data, "--samples", "64", "--held-out", "16"])
    if r is None or r.returncode != 0:
        failures.append(f"16: could not make the data set: {r.stderr if r else 'timeout'}")
        return
    shards = sorted(os.path.join(root, f) for root, _, files in os.walk(data) for f in files if f.endswith(".tlrec"))
    with open(shards[0], "r+b") as f:
        f.truncate(os.path.getsize(shards[0]) // 2)
    r = run([T, "train", "--data", data, "--dry-run"])
    expect("16 (train --data TRUNCATED --dry-run)", r, 2, [os.path.basename(shards[0])])
    # pinning --trace DIR: refused before any arm runs.
    r = run([os.path.join(BIN, "pinning"), "--quick", "--no-ledger", "--trace", work])
    expect("16 (pinning --trace DIR)", r, 2, ["--trace"])
    # cost_to_accuracy where every configuration fails: not 0.
    study = os.path.join(work, "cost.yaml")
    text = open(os.path.join(SOURCE, "configs", "cost_cpu.yaml")).read()
    # eigen runs no f64: every repeat of every configuration is refused by the planner.
    text = text.replace("  dtype: f32\n", "  dtype: f64\n  backend: eigen\n").replace("dtype: bf16", "dtype: f64")
    open(study, "w").write(text)
    r = run([os.path.join(BIN, "cost_to_accuracy"), "--config", study, "--quick", "--rate", "1", "--no-ledger"],
            timeout=300)
    expect("16 (cost_to_accuracy, every configuration failed)", r, 1, ["every repeat of every configuration failed"])


def case_6_diagnose_long_trace(work):
    # 300,000 steps, each with a data_wait span: the scan of every wait per step took over 120 s in
    # the fault-injection run (16 s at 100,000); sorted, it is seconds. A timeout of 60 s is this
    # test's hang check, not a speed target.
    trace = os.path.join(work, "trace.json")
    with open(trace, "w") as f:
        f.write('{"traceEvents":[')
        f.write(",".join(f'{{"ph":"X","name":"step","ts":{i * 1000},"dur":900,"pid":1,"tid":1}},'
                         f'{{"ph":"X","name":"data_wait","ts":{i * 1000 + 10},"dur":300,"pid":1,"tid":1}}'
                         for i in range(300000)))
        f.write("]}")
    r = run([T, "diagnose", trace], timeout=60)
    expect("6", r, 0, ["data"])


def train_checkpoint(case, ck, *extra, mpi_ranks=0, cwd=None):
    command = [T, "train", *SMALL, "--save", ck, *extra]
    if mpi_ranks:
        command = [MPIRUN, "-np", str(mpi_ranks), *command]
    r = run(command, timeout=300, cwd=cwd)
    if r is None or r.returncode != 0:
        failures.append(f"{case}: could not train the checkpoint: {(r.stderr or r.stdout)[-300:] if r else 'timeout'}")
        return False
    return True


def read_safetensors(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), n, data


def write_safetensors_header(path, header, n, data):
    """The tensors' bytes kept, the header replaced (padded with spaces to 8 bytes, as writers do)."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(len(text).to_bytes(8, "little") + text + data[8 + n:])


def case_17_one_validation(work):
    """inspect, verify-checkpoint and --resume agree: what resume refuses, the others refuse."""
    ck = os.path.join(work, "ck")
    if not train_checkpoint("17", ck, "--optimizer", "adamw"):
        return
    resume = [T, "train", *SMALL, "--optimizer", "adamw", "--steps", "4", "--resume"]

    def all_refuse(label, words):
        r = run([T, "verify-checkpoint", target])
        expect(f"17 {label} (verify-checkpoint)", r, 2, words)
        r = run([T, "inspect", target])
        expect(f"17 {label} (inspect)", r, 1, ["REFUSED", *words], one_line=False)
        r = run([*resume, target])
        expect(f"17 {label} (--resume)", r, 2, words)

    # A NaN in a moment.
    target = os.path.join(work, "nan")
    shutil.copytree(ck, target)
    path = os.path.join(target, "optimizer.safetensors")
    header, n, data = read_safetensors(path)
    name = sorted(k for k in header if k.startswith("exp_avg."))[0]
    begin = 8 + n + header[name]["data_offsets"][0]
    data = data[:begin] + bytes.fromhex("0000c07f") + data[begin + 4:]  # f32 NaN
    open(path, "wb").write(data)
    remark_checkpoint(target)
    all_refuse("NaN in a moment", [name, "nan"])
    # A moment renamed, and an extra tensor (a copy of a moment's bytes, appended).
    def rename(header, payload):
        header["exp_avg.conv9.bias"] = header.pop(name)
        return payload

    def extra(header, payload):
        begin, end = header[name]["data_offsets"]
        header["extra.thing"] = dict(header[name], data_offsets=[len(payload), len(payload) + end - begin])
        return payload + payload[begin:end]

    for label, edit, words in (("a moment renamed", rename, ["exp_avg"]),
                               ("an extra tensor", extra, ["extra.thing"])):
        target = os.path.join(work, label.replace(" ", "-"))
        shutil.copytree(ck, target)
        path = os.path.join(target, "optimizer.safetensors")
        header, n, data = read_safetensors(path)
        payload = edit(header, data[8 + n:])
        write_safetensors_header(path, header, n, data[:8 + n] + payload)
        remark_checkpoint(target)
        all_refuse(label, words)
    # A marker listing a file that is not there (its own CRC recomputed).
    target = os.path.join(work, "marker")
    shutil.copytree(ck, target)
    marker_path = os.path.join(target, "COMPLETE")
    marker = json.load(open(marker_path))
    marker["files"]["extra.safetensors"] = {"bytes": 10, "crc32": "00000000"}
    marker.pop("crc32", None)
    marker["crc32"] = f"{zlib.crc32(json.dumps(marker, separators=(',', ':'), sort_keys=True).encode()):08x}"
    open(marker_path, "w").write(json.dumps(marker, indent=2) + "\n")
    for tool in ("verify-checkpoint", "inspect"):
        expect(f"17 a marker listing a missing file ({tool})", run([T, tool, target]), 2, ["extra.safetensors"])
    expect("17 a marker listing a missing file (--resume)", run([*resume, target]), 2, ["extra.safetensors"])
    # Forged loader and trainer state.
    for label, section, key, value in (("epoch -1", "loader", "epoch", -1),
                                       ("dataset_size 0", "loader", "dataset_size", 0),
                                       ("batch -8", "loader", "batch_size", -8),
                                       ("step -5", "trainer", "step", -5)):
        target = os.path.join(work, label.replace(" ", ""))
        shutil.copytree(ck, target)
        state_path = os.path.join(target, "state.json")
        state = json.load(open(state_path))
        state[section]["integers"][key] = value
        open(state_path, "w").write(json.dumps(state, indent=2) + "\n")
        remark_checkpoint(target)
        all_refuse(label, [label.replace("batch", "batch_size")])


def case_18_zero1_moment_of_the_wrong_shape(work):
    ck = os.path.join(work, "ck")
    if not train_checkpoint("18", ck, "--zero", "1", mpi_ranks=2):
        return
    path = os.path.join(ck, "optimizer.safetensors")
    header, n, data = read_safetensors(path)
    name = next(k for k, v in sorted(header.items()) if k != "__metadata__" and len(v["shape"]) == 2
                and v["shape"][0] != v["shape"][1])
    shape = header[name]["shape"]
    header[name]["shape"] = [shape[1], shape[0]]
    write_safetensors_header(path, header, n, data)
    remark_checkpoint(ck)
    r = run([MPIRUN, "-np", "2", T, "train", *SMALL, "--zero", "1", "--steps", "4", "--resume", ck], timeout=300)
    expect("18 (zero 1, 2 ranks)", r, 2, [name, f"[{shape[1]}, {shape[0]}]"], one_line=False)
    r = run([T, "train", *SMALL, "--steps", "4", "--resume", ck])
    expect("18 (one process)", r, 2, [name])


def case_20_diagnose_reads_this_runs_files(work):
    """diagnose, run from another directory, reads the run's own checkpoint, not one of the same relative name."""
    a, b = os.path.join(work, "a"), os.path.join(work, "b")
    os.makedirs(a)
    os.makedirs(b)
    if not train_checkpoint("20", "ck", "--ledger", "ledger.jsonl", cwd=a):
        return
    if not train_checkpoint("20", "ck", "--steps", "3", cwd=b):  # another run's, at step 3
        return
    run_id = next(json.loads(line)["run_id"] for line in open(os.path.join(a, "ledger.jsonl"))
                  if '"train_run"' in line)
    r = run([T, "diagnose", run_id, "--ledger", os.path.join(a, "ledger.jsonl")], cwd=b)
    expect("20", r, {0, 1}, [os.path.join(a, "ck") + " at step 2"], one_line=False)
    if r is not None and os.path.join(b, "ck") in r.stdout:
        failures.append("20: diagnose read the other run's checkpoint: " + r.stdout[-300:])


def case_19_ledger_appended_to_itself(work):
    ledger = os.path.join(work, "twice.jsonl")
    original = open(os.path.join(SOURCE, "tests", "studies", "data", "verify_ladder.jsonl")).read()
    open(ledger, "w").write(original + original)
    out = os.path.join(work, "r19", "REPORT.md")
    r = run([os.path.join(BIN, "bench_report"), "--ledger", ledger, "--out", out])
    expect("19", r, 0)
    if r is not None and r.returncode == 0:
        report = open(out).read()
        if "repeats line" not in report:
            failures.append("19: the report does not warn that the ledger repeats its rows")
        once = os.path.join(work, "once.jsonl")
        open(once, "w").write(original)
        out_once = os.path.join(work, "r19b", "REPORT.md")
        run([os.path.join(BIN, "bench_report"), "--ledger", once, "--out", out_once])
        strip = lambda t: [l for l in t.splitlines()
                           if "ledger warning" not in l and "twice.jsonl" not in l and "once.jsonl" not in l]
        if strip(report) != strip(open(out_once).read()):
            failures.append("19: a ledger appended to itself reports other figures than the ledger once")


def case_21_quick_keeps_explicit_flags(work):
    r = run([os.path.join(BIN, "dataset_study"), "--quick", "--samples", "300", "--no-ledger", "--repeats", "2",
             "--steps", "1", "--loader-samples", "64", "--work", os.path.join(work, "w21")], timeout=300)
    expect("21 (dataset_study --quick --samples 300)", r, 0)
    if r is not None and r.returncode == 0 and "300" not in r.stdout:
        failures.append("21: --quick overrode the explicit --samples 300")


def case_22_out_forms(work):
    for out in ("new/", "."):
        cwd = os.path.join(work, "c22-" + ("slash" if out == "new/" else "dot"))
        os.makedirs(cwd)
        r = run([T, "make-dataset", "--out", out, "--samples", "32", "--held-out", "8"], cwd=cwd)
        expect(f"22 (--out {out})", r, 0)
        target = os.path.join(cwd, "new") if out == "new/" else cwd
        if not os.path.exists(os.path.join(target, "manifest.json")):
            failures.append(f"22: --out {out} did not produce a data set in {target}")


def case_5_fifo_in_a_data_set(work):
    data = os.path.join(work, "d5")
    r = run([T, "make-dataset", "--out", data, "--samples", "32", "--held-out", "8", "--codec", "raw"])
    expect("5 (make-dataset)", r, 0)
    shard = os.path.join(data, "train", "shard-000000.tlrec")
    os.remove(shard)
    os.mkfifo(shard)
    for args in (["train", "--data", data, "--backend", "reference", "--steps", "2", "--batch", "8"],
                 ["loader-bench", "--data", data, "--workers", "0", "--repeats", "1"]):
        r = run([T] + args, timeout=60)
        expect(f"5 ({args[0]})", r, 2, ["not a regular file (a FIFO)"])
    r = run([T, "verify-dataset", data], timeout=60)
    expect("5 (verify-dataset)", r, 2, ["not a regular file (a FIFO)"], one_line=False)


def case_7_overwrite_replaces_only_the_data_set(work):
    photos = os.path.join(work, "photos")
    os.makedirs(os.path.join(photos, "2019"))
    open(os.path.join(photos, "2019", "wedding.jpg"), "w").write("jpeg")
    open(os.path.join(photos, "manifest.json"), "w").write('{"format":"trainlab-image-dataset"}')
    r = run([T, "make-dataset", "--out", photos, "--samples", "32", "--overwrite"])
    expect("7 (a one-line manifest)", r, 2, ["not a trainlab data set"])
    if not os.path.exists(os.path.join(photos, "2019", "wedding.jpg")):
        failures.append("7: make-dataset --overwrite deleted a user's photo")
    data = os.path.join(work, "d7")
    expect("7 (make-dataset)", run([T, "make-dataset", "--out", data, "--samples", "32"]), 0)
    open(os.path.join(data, "notes.txt"), "w").write("mine")
    expect("7 (overwrite)", run([T, "make-dataset", "--out", data, "--samples", "32", "--overwrite"]), 0)
    if not os.path.exists(os.path.join(data, "notes.txt")):
        failures.append("7: make-dataset --overwrite deleted a user's own file inside the data set")


def case_23_many_shards_under_the_file_limit(work):
    # 1,100 shards (one record each) under a limit of 256 open files: the reader opens on demand.
    data = os.path.join(work, "d23")
    r = run([T, "make-dataset", "--out", data, "--samples", "1100", "--codec", "raw", "--shard-mb", "0.001"],
            timeout=300)
    expect("23 (make-dataset)", r, 0)
    train = " ".join([T, "train", "--data", data, "--backend", "reference", "--threads", "1", "--steps", "3",
                      "--batch", "64", "--train-samples", "1100", "--log-every", "1000", "--workers", "2"])
    r = run(["bash", "-c", "ulimit -n 256 && " + train], timeout=300)
    expect("23 (train under ulimit -n 256)", r, 0)


def case_27_readme_refused_writes_nothing(work):
    ledger = os.path.join(work, "ledger27.jsonl")
    shutil.copy(os.path.join(SOURCE, "bench", "results", "ledger_cpu.jsonl"), ledger)
    readme = os.path.join(work, "README.md")
    open(readme, "w").write("no markers here\n")
    report = os.path.join(work, "out27", "REPORT.md")
    r = run([os.path.join(BIN, "bench_report"), "--ledger", ledger, "--out", report, "--readme", readme])
    expect("27", r, 2, ["markers"])
    if os.path.exists(os.path.dirname(report)):
        failures.append("27: a refused --readme still wrote the report or its figures")


def case_28_out_under_a_file(work):
    a_file = os.path.join(work, "f28")
    open(a_file, "w").write("x")
    for out in (os.path.join(a_file, "data"), "/proc/trainlab-data"):
        r = run([T, "make-dataset", "--out", out, "--samples", "32"])
        expect(f"28 (--out {out})", r, 2, ["make-dataset"])


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    chosen = sys.argv[4:] or sorted(CASES, key=lambda n: int(n.split("_")[0]))
    for name in chosen:
        with tempfile.TemporaryDirectory() as work:
            CASES[name](work)
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print(f"hostile_inputs: ok ({len(chosen)} cases: {', '.join(chosen)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
