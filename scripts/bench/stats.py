"""The statistics of the reports: every figure is a distribution of
interleaved rounds, reported as its median with its spread (min-max), and
every ratio of two figures carries a verdict.

The verdict (METHOD, printed in every report's header): a percentile
bootstrap confidence interval of the ratio of the two medians. Each of
RESAMPLES resamples draws each sample again, with replacement, at its own
size, and takes the ratio of the two resampled medians; the interval is the
middle CONFIDENCE of those ratios. The seed is fixed, so the same figures
always get the same verdict. "faster" or "slower" only when the whole
interval lies on one side of 1.0; otherwise "no clear difference". With 3
to 5 rounds a side the interval is about min(a)/max(b) .. max(a)/min(b): a
verdict needs the two spreads apart, which is what a reader of the table
would ask too. Standard library only (python3's random and statistics).

median, median_run, best and combine are the older helpers, kept.
"""
import math
import random
import statistics

RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 43
METHOD = (f"verdicts: percentile bootstrap {CONFIDENCE:.0%} interval of the ratio of medians "
          f"({RESAMPLES} resamples, fixed seed {SEED}); 'faster'/'slower' only when the whole "
          "interval is above/below 1.0, else 'no clear difference'")
FASTER, SLOWER, SAME = "faster", "slower", "no clear difference"


def median(values):
    """The median of VALUES (the mean of the middle two for an even count)."""
    return statistics.median(values)


def median_run(runs, key):
    """The run (any object) whose KEY is the median of RUNS; for an even
    count the lower middle one, so that its other figures are a real run's."""
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def best(values, higher_is_better=True):
    return max(values) if higher_is_better else min(values)


def combine(values, stat="best", higher_is_better=True):
    """'best' or 'median' of VALUES."""
    return median(values) if stat == "median" else best(values, higher_is_better)


class Summary:
    """A figure's distribution: n, median, min, max, quartiles."""

    def __init__(self, values):
        v = sorted(float(x) for x in values)
        self.values = v
        self.n = len(v)
        self.median = statistics.median(v) if v else None
        self.min = v[0] if v else None
        self.max = v[-1] if v else None
        if len(v) >= 4:
            q = statistics.quantiles(v, n=4, method="inclusive")
            self.q1, self.q3 = q[0], q[2]
        else:
            self.q1, self.q3 = self.min, self.max

    def spread(self):
        """(max - min) / median, the relative spread."""
        if not self.n or not self.median:
            return None
        return (self.max - self.min) / self.median


def summary(values):
    return Summary(values)


def _percentile(sorted_values, p):
    """The P-th (0..1) percentile of SORTED_VALUES, nearest rank."""
    k = min(max(int(math.ceil(p * len(sorted_values))) - 1, 0), len(sorted_values) - 1)
    return sorted_values[k]


def bootstrap_ratio(a, b, resamples=RESAMPLES, confidence=CONFIDENCE, seed=SEED):
    """(ratio of medians a/b, low, high): the percentile bootstrap interval."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    mb = statistics.median(b)
    point = statistics.median(a) / mb if mb else math.inf
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        ra = statistics.median(rng.choices(a, k=len(a)))
        rb = statistics.median(rng.choices(b, k=len(b)))
        ratios.append(ra / rb if rb else math.inf)
    ratios.sort()
    alpha = 1 - confidence
    return point, _percentile(ratios, alpha / 2), _percentile(ratios, 1 - alpha / 2)


class Verdict:
    """A against B: ratio (of medians), lo, hi, word (FASTER, SLOWER, SAME)
    and n (the smaller sample); word is None when either side has fewer
    than 2 values (no spread to judge by)."""

    def __init__(self, ratio, lo, hi, word, n):
        self.ratio, self.lo, self.hi, self.word, self.n = ratio, lo, hi, word, n

    def __repr__(self):
        return f"Verdict({self.ratio:.3f} [{self.lo:.3f}, {self.hi:.3f}] {self.word})"


def verdict(a, b, higher_is_better=True, **kw):
    """A's figures against B's: a Verdict, or None when either is empty.
    HIGHER_IS_BETTER: files/s and MB/s (a ratio above 1 is faster); False
    for seconds (a ratio below 1 is faster)."""
    a, b = list(a or []), list(b or [])
    if not a or not b:
        return None
    if min(len(a), len(b)) < 2:
        r = median(a) / median(b) if median(b) else math.inf
        return Verdict(r, r, r, None, min(len(a), len(b)))
    r, lo, hi = bootstrap_ratio(a, b, **kw)
    if lo > 1.0:
        word = FASTER if higher_is_better else SLOWER
    elif hi < 1.0:
        word = SLOWER if higher_is_better else FASTER
    else:
        word = SAME
    return Verdict(r, lo, hi, word, min(len(a), len(b)))
