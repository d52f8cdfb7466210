"""The reports: Markdown tables, number formatting, ratios (against the
references measured in the same run) and PNG charts (matplotlib, drawn
off-screen; skipped with a warning when matplotlib is missing: the wrappers
run Debian's /usr/bin/python3, which has it when python3-matplotlib is in)."""
import os
import sys


def num(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    """a/b as '1.23x', or a dash when either is missing."""
    if a is None or not b:
        return "–"
    return f"{a / b:.2f}x"


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
    """lines: [(label, {x: y}, linestyle)]."""
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for label, points, style in lines:
        xs = sorted(points)
        ax.plot(xs, [points[x] for x in xs], style, marker="o", markersize=3, label=label)
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
    """groups: x labels; series: [(label, [value per group])]."""
    plt = _pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [v or 0 for v in values], width, label=label)
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
