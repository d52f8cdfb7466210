"""Unit tests of the verdicts (stats.py, report.judged), on synthetic samples;
standard library only, well under a second:

    cd scripts && python3 -m unittest bench.test_stats
"""
import random
import unittest

from . import report, stats


def noisy(center, spread, n, seed):
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


class Verdicts(unittest.TestCase):
    def test_clearly_faster_and_slower(self):
        a, b = noisy(1000, 0.02, 5, 1), noisy(800, 0.02, 5, 2)
        v = stats.verdict(a, b)
        self.assertEqual(v.word, stats.FASTER)
        self.assertGreater(v.lo, 1.0)
        self.assertAlmostEqual(v.ratio, stats.median(a) / stats.median(b))
        self.assertEqual(stats.verdict(b, a).word, stats.SLOWER)

    def test_clearly_different_with_three_rounds(self):
        self.assertEqual(stats.verdict([300, 310, 305], [100, 104, 98]).word, stats.FASTER)

    def test_same_distribution(self):
        for seed in range(10):
            a, b = noisy(1000, 0.1, 5, seed), noisy(1000, 0.1, 5, seed + 100)
            v = stats.verdict(a, b)
            self.assertLessEqual(v.lo, 1.0, v)
            self.assertGreaterEqual(v.hi, 1.0, v)
            self.assertEqual(v.word, stats.SAME)

    def test_one_slow_outlier_is_no_verdict(self):
        # A busy machine: one round of A hit by other work. The medians
        # differ, but the spreads overlap: no clear difference.
        v = stats.verdict([1500, 2700, 2650], [2742, 2600, 2800])
        self.assertEqual(v.word, stats.SAME)
        self.assertLess(v.lo, 1.0)

    def test_lower_is_better(self):
        # Seconds: less is faster.
        self.assertEqual(stats.verdict([1.0, 1.02, 0.99], [2.0, 2.1, 1.95], higher_is_better=False).word,
                         stats.FASTER)

    def test_fixed_seed_is_repeatable(self):
        a, b = noisy(1000, 0.1, 5, 7), noisy(950, 0.1, 5, 8)
        self.assertEqual(repr(stats.verdict(a, b)), repr(stats.verdict(a, b)))

    def test_single_runs_have_no_verdict(self):
        self.assertIsNone(stats.verdict([1.0], [2.0]).word)
        self.assertIsNone(stats.verdict([], [2.0]))
        self.assertIn("no verdict", report.judged([1.0], [2.0]))

    def test_cells(self):
        self.assertEqual(report.spread([3, 1, 2]), "2 (1–3)")
        self.assertTrue(report.judged([300, 310, 305], [100, 104, 98]).endswith("faster"))
        self.assertEqual(report.judged(None, [1, 2]), "–")
        s = stats.summary([1, 2, 3, 4, 5])
        self.assertEqual((s.median, s.min, s.max, s.q1, s.q3), (3, 1, 5, 2, 4))


if __name__ == "__main__":
    unittest.main()
