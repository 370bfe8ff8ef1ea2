#!/usr/bin/env python3
"""Checks of matrix_summarize.py on hand-made records (stdlib unittest, < 1 s; ctest runs it as
MatrixSummarize.PythonChecks where CMake finds a Python 3):
python3 results/sim-validation/matrix_summarize_test.py"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matrix_summarize as ms  # noqa: E402


def rec(i, arrival, first, end, out, prompt=10, status="ok", run="s@1"):
    return {"id": i, "arrival_s": arrival, "first_token_s": first, "end_s": end, "output_tokens": out,
            "prompt_tokens": prompt, "status": status, "run": run, "token_times_s": []}


class LatestByLoad(unittest.TestCase):
    def test_a_later_row_replaces_one_at_the_same_load(self):
        rows = [{"load": 0.5, "n": 1}, {"load": 0.85, "n": 2}, {"load": 0.85, "n": 3}]
        self.assertEqual([r["n"] for r in ms.latest_by_load(rows)], [1, 3])
        self.assertEqual([r["load"] for r in ms.latest_by_load(list(reversed(rows)))], [0.5, 0.85])


class CalibrationLabel(unittest.TestCase):
    def test_requests_and_load_from_the_cells_command(self):
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            self.assertIsNone(ms.calibration_label(d))  # no profile-grid.json: the grid alone
            open(os.path.join(d, "profile-grid.json"), "w").write("{}")
            self.assertEqual(ms.calibration_label(d), "?")  # calibrated, but the command is gone
            open(os.path.join(d, "cell.txt"), "w").write(
                "servelab profile --json p.json\n"
                "servelab run c.yaml --set seed=1011 --set workload.rates=[32.3] --set workload.n_requests=1000 "
                "--out m/c/load-0.85/calibration --quiet\n")
            os.makedirs(os.path.join(d, "capacity-grid"))
            json.dump({"strategies": [{"capacity_rps": 38.0}]}, open(os.path.join(d, "capacity-grid", "capacity.json"), "w"))
            self.assertEqual(ms.calibration_label(d), "1000 at 85%")


class Percentile(unittest.TestCase):
    def test_interpolates_between_order_statistics(self):
        self.assertEqual(ms.percentile([1.0, 2.0, 3.0, 4.0], 50), 2.5)
        self.assertAlmostEqual(ms.percentile([0.0, 10.0], 99), 9.9)
        self.assertEqual(ms.percentile([5.0], 99), 5.0)
        self.assertTrue(math.isnan(ms.percentile([], 50)))


class Figures(unittest.TestCase):
    def test_ttft_tpot_and_throughput(self):
        # TTFT 100 / 300 ms; TPOT (1.1 - 0.1) / 10 = 100 ms and (2.3 - 0.3) / 4 = 500 ms;
        # 16 tokens over 0 .. 2.3 s (the last finish)
        f = ms.figures([rec(1, 0.0, 0.1, 1.1, 11), rec(2, 0.0, 0.3, 2.3, 5)])
        self.assertAlmostEqual(f["ttft_p50_ms"], 200.0)
        self.assertAlmostEqual(f["ttft_p99_ms"], 100.0 + 0.99 * 200.0)
        self.assertAlmostEqual(f["tpot_p50_ms"], 300.0)
        self.assertAlmostEqual(f["output_throughput"], 16 / 2.3)

    def test_failed_requests_count_in_the_window_not_the_latencies(self):
        f = ms.figures([rec(1, 0.0, 0.1, 1.1, 11), rec(2, 0.0, -1, 4.0, 0, status="error")])
        self.assertAlmostEqual(f["ttft_p50_ms"], 100.0)
        self.assertAlmostEqual(f["output_throughput"], 11 / 4.0)

    def test_one_token_requests_have_no_tpot(self):
        f = ms.figures([rec(1, 0.0, 0.1, 0.1, 1), rec(2, 0.0, 0.2, 1.2, 11)])
        self.assertAlmostEqual(f["tpot_p50_ms"], 100.0)


class Attainment(unittest.TestCase):
    def test_both_bounds(self):
        slo = {"ttft_ms": 150.0, "tpot_ms": 200.0}
        rs = [rec(1, 0.0, 0.1, 1.1, 11),  # TTFT 100, TPOT 100: meets
              rec(2, 0.0, 0.3, 1.3, 11),  # TTFT 300: misses
              rec(3, 0.0, 0.1, 3.1, 11)]  # TPOT 300: misses
        self.assertAlmostEqual(ms.attainment(rs, slo), 1 / 3)


class Noise(unittest.TestCase):
    def test_seeded_and_wider_for_a_spread_sample(self):
        tight = [rec(i, 0.0, 0.1 + 0.001 * (i % 3), 1.1, 11) for i in range(200)]
        wide = [rec(i, 0.0, 0.1 + 0.05 * (i % 7), 1.1, 11) for i in range(200)]
        a, b = ms.noise(tight), ms.noise(tight)
        self.assertEqual(a, b)
        self.assertLess(a["ttft_p50_ms"], ms.noise(wide)["ttft_p50_ms"])


class KvPeak(unittest.TestCase):
    def test_prompts_and_tokens_held_until_the_end(self):
        a = dict(rec(1, 0.0, 0.1, 0.3, 3, prompt=10), scheduled_s=0.0, token_times_s=[0.1, 0.2, 0.3])
        b = dict(rec(2, 0.0, 0.25, 0.5, 2, prompt=20), scheduled_s=0.15, token_times_s=[0.25, 0.5])
        c = dict(rec(3, 0.3, 0.4, 0.4, 1, prompt=40), scheduled_s=0.3, token_times_s=[0.4])
        # a: 10 from 0, 13 by 0.3; b: 20 from 0.15, 21 at 0.25; at 0.3 a's 13 leave before c's 40 come
        self.assertEqual(ms.kv_peak([a, b, c]), (62, 0.4))
        self.assertEqual(ms.kv_peak([a, b]), (34, 0.3))

    def test_arena_slots_from_the_scenario_and_the_profile(self):
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            sc, pr = os.path.join(d, "s.yaml"), os.path.join(d, "p.json")
            open(sc, "w").write("engine: {kv_cache_mb: 32768, max_model_len: 2048}\n")
            json.dump({"model": {"n_layers": 32, "n_kv_heads": 32, "head_dim": 128}, "kv_dtype_bytes": 2}, open(pr, "w"))
            self.assertEqual(ms.arena_slots(sc, pr), 65536)  # llama2-7b: 512 KiB a token
            self.assertIsNone(ms.arena_slots(sc, os.path.join(d, "none.json")))


class Plans(unittest.TestCase):
    def test_a_different_plan_fails_loudly(self):
        real = [rec(1, 0.0, 0.1, 1.1, 11), rec(2, 0.0, 0.1, 1.1, 11)]
        ms.check_same_plan("same", real, [dict(r) for r in real])
        sim = [dict(r) for r in real]
        sim[1]["output_tokens"] = 12
        with self.assertRaises(SystemExit):
            ms.check_same_plan("differs", real, sim)

    def test_the_same_lengths_at_other_arrivals_fail_too(self):
        # a re-prediction left from an earlier real run at another rate: same seeded lengths
        real = [rec(1, 0.0, 0.1, 1.1, 11), rec(2, 0.5, 0.6, 1.6, 11)]
        sim = [dict(r) for r in real]
        sim[1]["arrival_s"] = 0.4
        with self.assertRaises(SystemExit):
            ms.check_same_plan("other rate", real, sim)

    def test_arrivals_agree_to_a_rate_written_with_fewer_digits(self):
        real = [rec(1, 0.045894, 0.1, 1.1, 11), rec(2, 10.0, 10.1, 11.1, 11)]
        sim = [dict(r) for r in real]
        sim[0]["arrival_s"], sim[1]["arrival_s"] = 0.045893, 10.00002
        ms.check_same_plan("rounded rate", real, sim)
        sim[1]["arrival_s"] = 10.01  # 0.1%: another rate
        with self.assertRaises(SystemExit):
            ms.check_same_plan("other rate", real, sim)

    def test_runs_are_ordered_by_rate(self):
        rs = [rec(1, 0, 0.1, 1, 2, run="p@10.5"), rec(2, 0, 0.1, 1, 2, run="p@2"), rec(3, 0, 0.1, 1, 2, run="p@10.5")]
        self.assertEqual([len(g) for g in ms.by_run(rs)], [1, 2])
        self.assertEqual(ms.by_run(rs)[0][0]["run"], "p@2")


if __name__ == "__main__":
    unittest.main()
