#!/usr/bin/env python3
"""compare_torch's choice of the PyTorch peer, and the ledger rows and tables it writes, from made-up
measurements (no torch, nothing timed): the best variant by median wins, an exact tie goes to the
higher minimum and then to the earlier name, a variant without values is passed over. With
TRAINLAB_BENCH_REPORT set (ctest sets it), the rows it writes are read by bench_report, whose structs
(studies/compare_torch/rows.h) must take every one of them."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import compare_torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
import peer_malloc  # noqa: E402


class BestVariant(unittest.TestCase):
    def test_highest_median_wins_not_the_highest_single_value(self):
        samples = {"a": [100, 101, 300], "b": [150, 151, 152]}
        self.assertEqual(compare_torch.best_variant(["a", "b"], samples), "b")

    def test_tie_on_median_goes_to_the_higher_minimum(self):
        samples = {"a": [90, 100, 110], "b": [95, 100, 105]}
        self.assertEqual(compare_torch.best_variant(["a", "b"], samples), "b")

    def test_full_tie_goes_to_the_earlier_name(self):
        samples = {"a": [95, 100, 105], "b": [95, 100, 105]}
        self.assertEqual(compare_torch.best_variant(["b", "a"], samples), "b")
        self.assertEqual(compare_torch.best_variant(["a", "b"], samples), "a")

    def test_unmeasured_variants_are_passed_over_and_none_is_an_error(self):
        self.assertEqual(compare_torch.best_variant(["a", "b"], {"a": [], "b": [1.0]}), "b")
        with self.assertRaises(ValueError):
            compare_torch.best_variant(["a"], {"a": []})


class LedgerAndTables(unittest.TestCase):
    def doc(self):
        s = compare_torch.summary
        row = {"config": "onednn f32 nhwc fused", "samples_per_s": s([200, 210]), "peer": "torch f32 fc1_as_conv8x8",
               "peer_samples_per_s": s([100, 140]), "ratio": s([2.0, 1.5]), "ratio_per_round": [2.0, 1.5],
               "gflop_per_s": s([7, 8]), "ceiling_share": s([0.1, 0.1]), "rss_mb": s([100, 100]),
               "peer_rss_mb": s([200, 200])}
        return {"machine": {"cpu": "Test CPU", "threads": 2, "batch": 128, "date": "2026-12-01 00:00 UTC",
                            "torch": "1.13", "rounds": 2, "seconds": 1.0},
                "engine": {"engine": "abc", "backend": "oneDNN 2.6 (x)", "compiler": "GNU"},
                "gemm_gflop_per_s": {"f32": [1, 2], "bf16": [1, 2]}, "rows": [row],
                "targets": [{"target": "t", "value": s([2.0, 1.5]), "verdict": "met"}],
                "variants": [{"kind": "f32", "variant": "torch f32 fc1_as_conv8x8", "samples_per_s": s([100, 140]),
                              "best": True}],
                "run_id": "20261201T000000Z-1", "run_time": "2026-12-01T00:00:00Z", "command": "python3 x"}

    def test_tables_name_the_machine_the_run_and_the_chosen_variant(self):
        table, headline = compare_torch.render(self.doc())
        self.assertIn("Test CPU", table)
        self.assertIn("20261201T000000Z-1", table)
        self.assertIn("| f32 | torch f32 fc1_as_conv8x8 | 120 (100-140) | best |", table)
        self.assertIn("1.75 (1.50-2.00)x", headline)

    def test_ledger_rows_carry_every_round_and_the_best_flag(self):
        doc = self.doc()
        configs = [("torch_f32_x", "torch f32 x", "f32", []), ("torch_f32_y", "torch f32 y", "f32", [])]
        samples = {"torch_f32_x": [1.0, 2.0], "torch_f32_y": [3.0, 4.0]}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ledger.jsonl")
            n = compare_torch.append_ledger(path, doc, samples, {}, configs, {"f32": "torch_f32_y"})
            rows = [json.loads(line) for line in open(path)]
        self.assertEqual(n, 4)
        self.assertEqual(rows[0]["kind"], "compare_torch")
        run = [r for r in rows if r["kind"] == "compare_torch_run"]
        self.assertEqual(len(run), 1)
        self.assertEqual(run[0]["targets"][0]["verdict"], "met")
        rows = [r for r in rows if r["kind"] != "compare_torch_run"]
        self.assertEqual(rows[0]["ratio_per_round"], [2.0, 1.5])
        self.assertEqual([r["best"] for r in rows[1:]], [False, True])
        for r in rows:
            self.assertEqual(r["schema"], 1)
            self.assertEqual(r["device"]["name"], "Test CPU")

    def test_bench_report_reads_the_rows_it_writes(self):
        report = os.environ.get("TRAINLAB_BENCH_REPORT")
        if not report:
            self.skipTest("TRAINLAB_BENCH_REPORT is not set (ctest sets it to the built bench_report)")
        doc = self.doc()
        configs = [("torch_f32_x", "torch f32 x", "f32", []), ("torch_f32_y", "torch f32 y", "f32", [])]
        samples = {"torch_f32_x": [1.0, 2.0], "torch_f32_y": [3.0, 4.0]}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ledger.jsonl")
            compare_torch.append_ledger(path, doc, samples, {}, configs, {"f32": "torch_f32_y"})
            out = os.path.join(d, "REPORT.md")
            r = subprocess.run([report, "--ledger", path, "--out", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                text = f.read()
        self.assertNotIn("ledger warning", text)  # no row skipped: each one fits its struct
        self.assertIn("## Against PyTorch", text)
        self.assertIn("Run `20261201T000000Z-1` (`python3 x`) on Test CPU (onednn, 2 threads; engine abc; timer "
                      "steady_clock (trainlab), perf_counter (PyTorch)), PyTorch 1.13, batch 128", text)
        self.assertIn("| onednn f32 nhwc fused | torch f32 fc1_as_conv8x8 | 205 (200-210) | 120 (100-140) | "
                      "1.75x (1.50-2.00) |", text)

    def test_bench_report_is_the_one_writer_of_the_comparison_blocks(self):
        # The rows compare_torch.py appends carry what docs/RESULTS.md's three comparison blocks need;
        # bench_report --readme --blocks fills those and leaves every other block alone.
        report = os.environ.get("TRAINLAB_BENCH_REPORT")
        if not report:
            self.skipTest("TRAINLAB_BENCH_REPORT is not set (ctest sets it to the built bench_report)")
        # A variant that failed every round (as PyTorch's frozen bf16 forms do on AVX2) is a failed row
        # with its error, drawn as such, never a crash of the report.
        configs = [("torch_f32_x", "torch f32 fc1_as_conv8x8", "f32", []),
                   ("torch_f32_z", "torch f32 z", "f32", [])]
        doc = self.doc()
        doc["raw"] = [{"round": 0, "key": "torch_f32_z",
                       "error": 'x failed (1): {"tool": "torch_smallcnn", "error": "variant \'z\': no kernel | here"}'}]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ledger.jsonl")
            compare_torch.append_ledger(path, doc, {"torch_f32_x": [100.0, 140.0], "torch_f32_z": []}, {}, configs,
                                        {"f32": "torch_f32_x"})
            with open(path) as f:
                failed = [json.loads(line) for line in f if '"torch f32 z"' in line]
            self.assertEqual([(r["status"], r["repeats"]) for r in failed], [("failed", [])])
            results = os.path.join(d, "RESULTS.md")
            markers = ["torch_ratios", "compare_torch", "compare_torch_headline", "ladder"]
            with open(results, "w") as f:
                f.write("".join(f"<!-- {m}:begin -->\nold {m}\n<!-- {m}:end -->\n" for m in markers))
            r = subprocess.run([report, "--ledger", path, "--out", os.path.join(d, "REPORT.md"), "--readme", results,
                                "--blocks", "torch_ratios,compare_torch,compare_torch_headline,ladder"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            text = open(results).read()
        self.assertIn("GEMM ceiling (oneDNN, 2048^3): f32 2 (1-2) GFLOP/s", text)
        self.assertIn("| onednn f32 nhwc fused | 205 (200-210) | torch f32 fc1_as_conv8x8 | 120 (100-140) | "
                      "1.75 (1.50-2.00)x | 8 (10%) | 100 (200) |", text)
        self.assertIn("| f32 | torch f32 fc1_as_conv8x8 | 120 (100-140) | best |", text)
        self.assertIn("| f32 | torch f32 z | failed: variant 'z': no kernel \\| here |  |", text)
        self.assertIn("| t | 1.75 (1.50-2.00) | met |", text)
        self.assertIn("<!-- compare_torch_headline:begin -->\nGenerated by `bench_report", text)
        self.assertIn("old ladder", text)  # no ladder run in this ledger: its block is left alone
        self.assertNotIn("old compare_torch\n", text)


class IssueTargets(unittest.TestCase):
    def rows(self):
        s = compare_torch.summary
        return {"tl_a": {"config": "a", "kind": "f32", "ceiling_share": s([0.5, 0.7])},
                "tl_b": {"config": "b", "kind": "f32", "ceiling_share": s([0.8, 0.8])},
                "tl_onednn_f32_best_1t": {"config": "one thread", "kind": "f32", "ceiling_share": s([0.9, 0.9])},
                "tl_c": {"config": "c", "kind": "bf16", "ceiling_share": s([0.1, 0.1])},
                "tl_onednn_bf16_no_native": {"config": "capped", "kind": "bf16", "ceiling_share": s([0.1, 0.1])},
                "tl_d": {"config": "d", "kind": "f32_infer", "ceiling_share": s([0.1, 0.1])}}

    def targets(self, isa):
        samples = {"tl_a": [100, 100], "tl_b": [150, 150], "tl_onednn_f32_best_1t": [999, 999], "tl_c": [300, 300],
                   "tl_onednn_bf16_no_native": [999, 999], "tl_d": [500, 500],
                   "p_f32": [100, 100], "p_bf16": [100, 100], "p_inf": [400, 400]}
        best = {"f32": "p_f32", "bf16": "p_bf16", "f32_infer": "p_inf"}

        def ratio(a, b):
            return compare_torch.summary([x / y for x, y in zip(samples[a], samples[b])])
        return compare_torch.issue_targets(isa, samples, best, self.rows(), ratio)

    def test_the_isa_family_picks_the_row_of_targets(self):
        self.assertEqual(compare_torch.isa_family("avx512_core_bf16"), "avx512")
        self.assertEqual(compare_torch.isa_family("avx2"), "avx2")
        self.assertEqual(compare_torch.isa_family("avx2_vnni"), "avx2")
        self.assertIsNone(compare_torch.isa_family("sse41"))
        self.assertEqual(self.targets("sse41"), [])
        wanted = {"avx512_core_bf16": [1.5, 0.75, 1.5, 1.2], "avx2": [1.4, 0.60, 3.0, 1.2]}
        for isa, thresholds in wanted.items():
            self.assertEqual([t[2] for t in self.targets(isa)], thresholds, isa)

    def test_the_best_contending_configuration_is_judged_never_a_handicapped_arm(self):
        by_name = {t[0].split(":")[1].split(",")[0].strip(): t for t in self.targets("avx2")}
        f32 = by_name["f32 training"]
        self.assertIn("best trainlab (b)", f32[0])  # b beats a; the one-thread arm does not contend
        self.assertEqual(f32[1]["median"], 1.5)
        self.assertIn("best trainlab (c)", by_name["bf16 training"][0])
        self.assertEqual(by_name["forward only (f32)"][1]["median"], 1.25)
        ceiling = by_name["f32 step / GEMM ceiling (b) >= 60%"]
        self.assertEqual(ceiling[1]["median"], 0.8)

    def test_every_trainlab_configuration_runs_the_dtype_of_its_kind(self):
        # bf16_infer ran --dtype f32 (2026-12-06: trainlab's f32 forward pass was compared with
        # PyTorch's bf16 one): each configuration's --dtype is its kind's, as KINDS gives PyTorch's.
        dtypes = {kind: dtype for kind, dtype, _ in compare_torch.KINDS}
        for capped in (False, True):
            for key, _, kind, argv in compare_torch.trainlab_configs(2, capped=capped):
                self.assertEqual(argv[argv.index("--dtype") + 1], dtypes[kind], key)
                self.assertEqual("--forward-only" in argv, kind.endswith("_infer"), key)

    def test_a_capped_run_drops_the_arm_that_would_lift_the_cap(self):
        keys = [k for k, *_ in compare_torch.trainlab_configs(2, capped=True)]
        self.assertNotIn("tl_onednn_bf16_no_native", keys)
        self.assertIn("tl_onednn_bf16_no_native", [k for k, *_ in compare_torch.trainlab_configs(2)])
        for _, _, _, argv in compare_torch.trainlab_configs(2, capped=True):
            self.assertFalse(any(a.startswith("ONEDNN_MAX_CPU_ISA=") for a in argv))


class Verify(unittest.TestCase):
    def test_inside_the_recorded_range_passes_outside_is_named_with_how_far(self):
        recorded = {"a": [1.2, 1.3, 1.5], "b": [1.2, 1.3, 1.5], "c": [1.2, 1.3, 1.5]}
        rerun = {"a": [1.4, 1.45, 1.0], "b": [1.5, 1.5, 1.5], "c": [1.0, 1.08, 1.1]}
        verdicts = {v["key"]: v for v in compare_torch.verify_verdicts(recorded, rerun)}
        self.assertTrue(verdicts["a"]["within"])  # median 1.4
        self.assertTrue(verdicts["b"]["within"])  # at the edge
        self.assertFalse(verdicts["c"]["within"])
        self.assertEqual(verdicts["c"]["verdict"], "OUTSIDE (-10.0% below the recorded range)")

    def test_reruns_the_recorded_configuration_against_its_recorded_peer_variant(self):
        doc = LedgerAndTables().doc()
        doc["peer_variants"] = {"train": ["shipped", "fc1_as_conv8x8"], "infer": ["shipped"]}
        doc["rows"][0]["config"] = "onednn f32 nhwc fused"
        doc["rows"][0]["peer"] = "torch f32 fc1_as_conv8x8"
        calls = []

        def runner(argv):  # deterministic: trainlab 300, the peer 200
            calls.append(argv)
            return 300.0 if "throughput" in argv else 200.0

        results = compare_torch.verify(doc, 3, 2, runner)
        self.assertEqual(len(results), 1)  # only the headline rows the run has
        self.assertEqual(results[0]["rerun"]["median"], 1.5)
        self.assertTrue(results[0]["within"])  # recorded 1.5-2.0
        self.assertEqual(len(calls), 4)  # 2 rounds x (trainlab, peer), interleaved
        self.assertIn("--fuse", calls[0])
        self.assertEqual(calls[1][calls[1].index("--variant") + 1], "fc1_as_conv8x8")


class Verdicts(unittest.TestCase):
    """A target is met only when every round clears it; a range across it is not separable (issue 50)."""

    def test_a_range_across_the_target_is_never_met(self):
        s = lambda lo, med, hi: {"min": lo, "median": med, "max": hi, "n": 3}
        self.assertEqual(compare_torch.target_verdict(s(1.77, 1.81, 2.16), 1.5, None), "met")
        self.assertEqual(compare_torch.target_verdict(s(1.11, 1.19, 1.27), 1.2, None), "not separable (median below)")
        self.assertEqual(compare_torch.target_verdict(s(1.15, 1.25, 1.40), 1.2, None), "not separable (median above)")
        self.assertEqual(compare_torch.target_verdict(s(0.9, 1.0, 1.1), 1.2, None), "MISSED")
        self.assertEqual(compare_torch.target_verdict(s(0.3, 0.31, 0.32), None, 0.5), "met")
        self.assertEqual(compare_torch.target_verdict(s(1, 1, 1), None, None), "reported")


class Allocators(unittest.TestCase):
    """The peers' allocator variants (issue 50): "FEATURES@ALLOCATOR" picks the process's allocator,
    and each comparison runs it as a process of its own with --variant carrying the suffix."""

    def test_the_suffix_names_the_allocator_and_wins_over_malloc(self):
        self.assertEqual(peer_malloc.split_variant("channels_last@tcmalloc"), ("channels_last", "tcmalloc"))
        self.assertEqual(peer_malloc.split_variant("channels_last"), ("channels_last", None))
        self.assertEqual(peer_malloc.malloc_choice(["x.py", "--variant", "a@jemalloc", "--malloc", "system"]),
                         "jemalloc")
        self.assertEqual(peer_malloc.malloc_choice(["x.py", "--variant=a", "--malloc=system"]), "system")
        self.assertEqual(peer_malloc.malloc_choice(["x.py", "--variant", "all"]), "tuned")

    def test_each_allocator_variant_is_its_own_configuration(self):
        variants = {"train": ["shipped", "shipped@tcmalloc"], "infer": ["shipped"]}
        configs = compare_torch.torch_configs(2, variants)
        argv = {key: a for key, _, _, a in configs}
        self.assertIn("torch_bf16_shipped@tcmalloc", argv)
        self.assertEqual(argv["torch_f32_shipped@tcmalloc"][:2], ["--variant", "shipped@tcmalloc"])
        self.assertEqual(sorted({kind for _, _, kind, _ in configs}), ["bf16", "bf16_infer", "f32", "f32_infer"])


if __name__ == "__main__":
    unittest.main()
