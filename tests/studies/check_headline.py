#!/usr/bin/env python3
"""make headline (bench/headline.py) and the README block bench_report draws from its run, from
made-up rows (nothing measured): a step that fails is recorded with its last line and the run goes
on; the run ids a step wrote are the ones new in the ledger; the block quotes the figures of the
headline run's own runs only (an earlier comparison in the same ledger is left out), passes a target's
"not separable" verdict through as it was recorded, names the failed step, and a run capped to AVX2
fills its own block. With TRAINLAB_BENCH_REPORT unset (outside ctest) the block checks are skipped."""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import compare_torch  # noqa: E402
import headline  # noqa: E402


def compare_doc(run_id, ratio_rounds, verdict):
    s = compare_torch.summary
    row = {"config": "onednn f32 nhwc fused", "samples_per_s": s([200, 210]), "peer": "torch f32 channels_last",
           "peer_samples_per_s": s([100, 140]), "ratio": s(ratio_rounds), "ratio_per_round": ratio_rounds,
           "gflop_per_s": s([7, 8]), "ceiling_share": s([0.1, 0.1]), "rss_mb": s([100, 100]),
           "peer_rss_mb": s([200, 200])}
    target = ("avx512 (avx512_core_bf16): f32 training, best trainlab (onednn f32 nhwc fused) >= 1.5x best "
              "PyTorch f32")
    return {"machine": {"cpu": "Test CPU", "threads": 2, "batch": 128, "date": "2026-12-06 07:00 UTC",
                        "torch": "1.13", "rounds": 2, "seconds": 1.0},
            "engine": {"engine": "abc", "backend": "oneDNN 2.6 (x)", "compiler": "GNU"},
            "gemm_gflop_per_s": {"f32": [1, 2], "bf16": [1, 2]}, "rows": [row],
            "targets": [{"target": target, "value": s(ratio_rounds),
                         "verdict": verdict},
                        {"target": "(report) fusion's worth", "value": s([1.1, 1.2]), "verdict": "reported"}],
            "variants": [], "run_id": run_id, "run_time": "2026-12-06T07:00:00Z",
            "command": "python3 bench/compare_torch.py --rounds 2"}


class Steps(unittest.TestCase):
    def test_a_failing_step_is_recorded_with_its_last_line_and_the_new_run_ids(self):
        with tempfile.TemporaryDirectory() as d:
            ledger = os.path.join(d, "ledger.jsonl")
            with open(ledger, "w") as f:
                f.write(json.dumps({"run_id": "old"}) + "\nnot json\n")
            script = (f"open({ledger!r}, 'a').write('{{\"run_id\": \"new-1\"}}\\n'); "
                      "print('working'); print('error: the step broke'); raise SystemExit(3)")
            record = headline.run_step("x", "full", [sys.executable, "-c", script], ledger)
        self.assertEqual(record["status"], "failed")
        self.assertEqual(record["error"], "exit 3: error: the step broke")
        self.assertEqual(record["runs"], ["new-1"])

    def test_a_step_that_cannot_start_is_a_failed_record_not_a_crash(self):
        with tempfile.TemporaryDirectory() as d:
            record = headline.run_step("x", "full", [os.path.join(d, "missing")], os.path.join(d, "l.jsonl"))
        self.assertEqual(record["status"], "failed")
        self.assertIn("cannot start", record["error"])

    def test_every_step_has_a_form_and_the_short_one_says_what_it_leaves_out(self):
        class Args:
            build, ledger, rounds = "build", "results/ledger_cpu.jsonl", 3
        plan = headline.steps(Args())
        self.assertEqual([n for n, _, _ in plan],
                         ["compare", "compare-resnet", "ladder", "fashion", "resnet", "scaling"])
        forms = dict((n, f) for n, f, _ in plan)
        self.assertTrue(forms["resnet"].startswith("short: "))
        for _, _, command in plan:
            self.assertIn("results/ledger_cpu.jsonl", command)


class Block(unittest.TestCase):
    def write_ledger(self, d, isa="native"):
        ledger = os.path.join(d, "ledger.jsonl")
        # An earlier comparison (not in the headline run), then the headline run's own.
        compare_torch.append_ledger(ledger, compare_doc("20261201T000000Z-1", [2.5, 2.6], "met"), {}, {}, [], {})
        compare_torch.append_ledger(ledger, compare_doc("20261206T070000Z-2", [1.4, 1.7], "not separable (median "
                                                        "above)"), {}, {}, [], {})
        steps = [{"name": "compare", "command": "python3 bench/compare_torch.py --rounds 2", "form": "full",
                  "status": "ok", "error": "", "wall_s": 600.0, "runs": ["20261206T070000Z-2"]},
                 {"name": "scaling", "command": "scripts/mpirun -np 4 build/bin/bench_scaling", "form": "full",
                  "status": "failed", "error": "exit 1: error: rank 3 died", "wall_s": 30.0, "runs": []}]
        row = headline.headline_row(steps, datetime.datetime(2026, 12, 6, 7, 0), "make headline",
                                    "20261206T070000Z-9", isa, "abc123")
        headline.append(ledger, row)
        return ledger

    def render(self, isa="native"):
        report = os.environ.get("TRAINLAB_BENCH_REPORT")
        if not report:
            self.skipTest("TRAINLAB_BENCH_REPORT is not set (ctest sets it to the built bench_report)")
        with tempfile.TemporaryDirectory() as d:
            ledger = self.write_ledger(d, isa)
            readme = os.path.join(d, "README.md")
            with open(readme, "w") as f:
                f.write("top\n<!-- headline:begin -->\nold\n<!-- headline:end -->\n"
                        "<!-- headline_avx2:begin -->\nold avx2\n<!-- headline_avx2:end -->\nbottom\n")
            marker = "headline_avx2" if isa == "avx2" else "headline"
            r = subprocess.run([report, "--ledger", ledger, "--out", os.path.join(d, "REPORT.md"), "--readme", readme,
                                "--blocks", marker], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return open(readme).read()

    def test_the_block_quotes_the_headline_run_only_with_the_recorded_verdicts(self):
        text = self.render()
        self.assertIn("from one `make headline` run, `20261206T070000Z-9`, 2026-12-06 07:00 UTC", text)
        self.assertIn(", commit abc123, on ", text)
        self.assertIn("| SmallCNN f32 training (avx512_core_bf16): trainlab's best against the strongest PyTorch "
                      "variant | 1.55 (1.40-1.70)x: 205 (200-210) (onednn f32 nhwc fused) against 120 (100-140) "
                      "samples/s (torch f32 channels_last); target >= 1.5x: not separable (median above) | "
                      "`python3 bench/compare_torch.py --rounds 2` | `20261206T070000Z-2` |", text)
        self.assertNotIn("20261201T000000Z-1", text)  # the earlier run's 2.55x is not quoted
        self.assertNotIn("fusion's worth", text)  # report-only targets are not headline figures
        self.assertIn("| step `scaling` | **failed**: exit 1: error: rank 3 died |", text)
        self.assertIn("old avx2", text)  # the capped block is another run's
        self.assertTrue(text.startswith("top\n") and text.endswith("bottom\n"))

    def test_a_run_capped_to_avx2_fills_its_own_block(self):
        text = self.render("avx2")
        self.assertIn("<!-- headline:begin -->\nold\n", text)
        self.assertIn("<!-- headline_avx2:begin -->\nGenerated by", text)


if __name__ == "__main__":
    unittest.main()
