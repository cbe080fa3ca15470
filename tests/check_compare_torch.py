#!/usr/bin/env python3
"""compare_torch's choice of the PyTorch peer, and the ledger rows and tables it writes, from made-up
measurements (no torch, nothing timed): the best variant by median wins, an exact tie goes to the
higher minimum and then to the earlier name, a variant without values is passed over."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import compare_torch  # noqa: E402


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
        self.assertEqual(n, 3)
        self.assertEqual(rows[0]["kind"], "compare_torch")
        self.assertEqual(rows[0]["ratio_per_round"], [2.0, 1.5])
        self.assertEqual([r["best"] for r in rows[1:]], [False, True])
        for r in rows:
            self.assertEqual(r["schema"], 1)
            self.assertEqual(r["device"]["name"], "Test CPU")


if __name__ == "__main__":
    unittest.main()
