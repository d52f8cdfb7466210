"""The reports: Markdown tables, number formatting, figures with their
spread (spread: median and min-max), ratios with their verdicts (judged:
stats.verdict's bootstrap interval), ratios (against the
references measured in the same run) and PNG charts with error bars (matplotlib, drawn
off-screen; skipped with a warning when matplotlib is missing: the wrappers
run Debian's /usr/bin/python3, which has it when python3-matplotlib is in)."""
import os
import sys

from . import stats


def num(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    """a/b as '1.23x', or a dash when either is missing."""
    if a is None or not b:
        return "–"
    return f"{a / b:.2f}x"


def spread(values, digits=0):
    """A figure's distribution as 'median (min–max)', or the one value, or a dash."""
    if not values:
        return "–"
    s = stats.summary(values)
    if s.n == 1:
        return f"{num(s.median, digits)} (1 run)"
    return f"{num(s.median, digits)} ({num(s.min, digits)}–{num(s.max, digits)})"


def judged(a, b, higher_is_better=True):
    """A's figures against B's as 'ratio [low–high] verdict' (stats.verdict):
    '0.98x [0.91–1.05] no clear difference', or a dash when either is missing."""
    v = stats.verdict(a, b, higher_is_better)
    if v is None:
        return "–"
    if v.word is None:
        return f"{v.ratio:.2f}x (1 run: no verdict)"
    return f"{v.ratio:.2f}x [{v.lo:.2f}–{v.hi:.2f}] {v.word}"


def _point(v):
    """A chart point: (median, below, above) of a list of runs, or (v, 0, 0)."""
    if isinstance(v, (list, tuple)):
        s = stats.summary(v)
        return s.median, s.median - s.min, s.max - s.median
    return v, 0, 0


def ordered(values, order):
    """VALUES sorted by their place in ORDER, the others after them by name."""
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.stdout.flush()


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        print("warning: matplotlib is missing (apt-get install python3-matplotlib): no charts",
              file=sys.stderr)
        return None


def line_chart(path, title, xlabel, ylabel, lines, logy=False, log2x=False):
    """lines: [(label, {x: y}, linestyle)]; y is a number or a list of runs
    (drawn at its median with min-max error bars)."""
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for label, points, style in lines:
        xs = sorted(points)
        pts = [_point(points[x]) for x in xs]
        ys = [p[0] for p in pts]
        if any(p[1] or p[2] for p in pts):
            ax.errorbar(xs, ys, yerr=[[p[1] for p in pts], [p[2] for p in pts]], fmt=style, marker="o",
                        markersize=3, capsize=3, elinewidth=0.8, label=label)
        else:
            ax.plot(xs, ys, style, marker="o", markersize=3, label=label)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log2x:
        ticks = sorted({x for _, points, _ in lines for x in points})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"chart: {path}", file=sys.stderr)


def bar_chart(path, title, ylabel, groups, series):
    """groups: x labels; series: [(label, [value per group])]; a value is a
    number or a list of runs (drawn at its median with min-max error bars)."""
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        xs = [g + i * width for g in range(len(groups))]
        pts = [_point(v) if v else (0, 0, 0) for v in values]
        err = [[p[1] for p in pts], [p[2] for p in pts]]
        ax.bar(xs, [p[0] or 0 for p in pts], width, label=label,
               yerr=err if any(e for side in err for e in side) else None, capsize=2)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels(groups, rotation=20, fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"chart: {path}", file=sys.stderr)
