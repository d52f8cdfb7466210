"""The statistics of the reports: one median, and the best of the repeats.

On a shared machine other work only ever slows a run down, so fs_mark, the
source tree and afd report the best of their repeats (their --stat median
gives the median instead); sequential I/O, the data modes, fsck and the
before-and-after of builds report the median of interleaved rounds.
"""
import statistics


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
