"""How bench/suites/stats.py and bench/suites/dns.py judge a target: the interval for a median of
per-round figures, and the verdict from a point and its interval. No root, no network."""

import itertools
import statistics
import unittest

from bench.lib import matcher, stats


def coverage_by_enumeration(n, k):
    """The chance that the k-th smallest to the k-th largest of n draws hold the true median,
    counted over every way the n draws can fall below or above it (each equally likely)."""
    held = 0
    for below in itertools.product((0, 1), repeat=n):
        b = sum(below)
        held += b >= k and n - b >= k
    return held / 2 ** n


class MedianInterval(unittest.TestCase):

    def test_too_few_rounds_give_no_interval(self):
        # Four rounds: even the smallest to the largest miss the median 1 time in 8.
        self.assertIsNone(stats.median_interval([1.0, 2.0, 3.0, 4.0]))

    def test_five_rounds_span_them_all(self):
        low, high, coverage = stats.median_interval([1.3, 0.9, 1.1, 1.0, 1.2])
        self.assertEqual((low, high), (0.9, 1.3))
        self.assertAlmostEqual(coverage, coverage_by_enumeration(5, 1))

    def test_more_rounds_drop_the_extremes(self):
        values = [8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0]
        low, high, coverage = stats.median_interval(values)
        self.assertEqual((low, high), (2.0, 7.0))
        self.assertAlmostEqual(coverage, coverage_by_enumeration(8, 2))
        self.assertGreaterEqual(coverage, stats.MEDIAN_LEVEL)
        # The next narrower interval would cover less than asked.
        self.assertLess(coverage_by_enumeration(8, 3), stats.MEDIAN_LEVEL)

    def test_the_widest_k_that_keeps_the_level(self):
        for n in range(5, 16):
            _, _, coverage = stats.median_interval([float(i) for i in range(n)])
            k = next(k for k in range(n // 2, 0, -1) if coverage_by_enumeration(n, k) >= stats.MEDIAN_LEVEL)
            self.assertAlmostEqual(coverage, coverage_by_enumeration(n, k), msg="n=%d" % n)


class Verdict(unittest.TestCase):
    at_most = staticmethod(lambda v: v <= 1.3)

    def test_whole_interval_below_the_goal_is_met(self):
        self.assertEqual(stats.verdict(1.1, (1.0, 1.25), self.at_most), "met")

    def test_whole_interval_above_the_goal_is_not_met(self):
        self.assertEqual(stats.verdict(1.5, (1.35, 1.7), self.at_most), "**not met**")

    def test_goal_inside_the_interval_is_not_resolved_and_says_where_the_estimate_is(self):
        self.assertEqual(stats.verdict(1.29, (1.2, 1.45), self.at_most),
                         "not resolved (the estimate meets it)")
        self.assertEqual(stats.verdict(1.31, (1.2, 1.45), self.at_most),
                         "not resolved (the estimate misses it)")

    def test_without_an_interval_the_point_decides(self):
        self.assertEqual(stats.verdict(1.29, None, self.at_most), "met")
        self.assertEqual(stats.verdict(1.31, None, self.at_most), "**not met**")

    def test_a_row_for_information_has_no_verdict(self):
        self.assertEqual(stats.verdict(5.0, (1.0, 9.0), lambda v: None), "-")

    def test_p99_intervals_are_two_ends(self):
        self.assertEqual(stats.verdict(+300, [-76, +686], lambda d: d <= 100),
                         "not resolved (the estimate misses it)")
        self.assertEqual(stats.verdict(-1415, [-2786, -377], lambda d: d <= -1), "met")


class PairVerdict(unittest.TestCase):

    def test_identical_systems_whose_interval_holds_no_difference(self):
        self.assertEqual(stats.pair_verdict((0.96, 1.45, 0.94), 1.0), "-")
        self.assertEqual(stats.pair_verdict([-463, 15], 0), "-")
        self.assertEqual(stats.pair_verdict(None, 0), "-")

    def test_a_pair_told_apart_warns_that_the_intervals_claim_too_much(self):
        self.assertIn("the pair differs", stats.pair_verdict((1.02, 1.2, 0.94), 1.0))
        self.assertIn("the pair differs", stats.pair_verdict([-300, -20], 0))


class MatcherTarget(unittest.TestCase):
    """The matcher row is judged on the median of per-round ratios and its interval, so that
    one round measured while the host slowed down cannot decide it."""

    @staticmethod
    def figures(worst_per_round):
        kinds = {k: {"ns_10": 50.0, "ns_100000": 70.0, "ratio": 1.4} for k in ("hit", "miss")}
        return dict(kinds, worst=statistics.median(worst_per_round),
                    worst_per_round=worst_per_round,
                    interval=stats.median_interval(worst_per_round))

    def test_rounds_below_the_goal_but_one_are_met(self):
        value, goal, judged = matcher.matcher_target(self.figures([1.4] * 7 + [1.5] * 7 + [2.3]))
        self.assertEqual((goal, judged), ("≤ 2×", "met"))
        self.assertIn("median of 15 rounds", value)
        self.assertIn("rounds 1.40×–2.30×", value)

    def test_a_median_near_the_goal_with_rounds_either_side_is_not_resolved(self):
        _, _, judged = matcher.matcher_target(self.figures([1.7, 1.8, 1.9, 1.95, 2.05, 2.1, 2.2]))
        self.assertEqual(judged, "not resolved (the estimate meets it)")

    def test_rounds_all_above_the_goal_are_not_met(self):
        _, _, judged = matcher.matcher_target(self.figures([2.1, 2.2, 2.3, 2.4, 2.5]))
        self.assertEqual(judged, "**not met**")

    def test_an_older_run_of_one_measurement_is_judged_by_its_point(self):
        one = {"hit": {"ns_10": 52.1, "ns_100000": 54.0, "ratio": 1.04},
               "miss": {"ns_10": 39.8, "ns_100000": 87.7, "ratio": 2.2}}
        value, _, judged = matcher.matcher_target(one)
        self.assertEqual(judged, "**not met**")
        self.assertTrue(value.startswith("2.20× (hit 52.1→54.0 ns"))


if __name__ == "__main__":
    unittest.main()
