"""The sweep plot: the points' score (STS Spearman, retrieval nDCG@10 or agreement@10 with the source) vs throughput,
one line per width, Pareto frontier marked; a static model's against bytes per vector (one speed for every width)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from espresso_export.sweeping.sweep_result import SweepResult


@contextmanager
def figure(path: Path) -> Iterator[tuple]:
    """``(pyplot, axes)`` of one plot in the product's size, saved to ``path`` with a grid and a legend when the
    block ends (the sweep's and auto's plots), and closed however it ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.5), dpi=120)
    try:
        yield plt, ax
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def plot_static(result: SweepResult, path: Path) -> Path:
    """A static model's sweep: every width has the same speed, so its score against the bytes a vector takes (at
    float32, and at each ``--precision``), the source and the target lines."""
    from matplotlib import ticker

    with figure(path) as (plt, ax):
        pts = sorted(result.points, key=lambda p: p.dim)
        ax.plot([p.bytes_per_vector for p in pts], [p.spearman for p in pts], "o-", color="tab:blue", ms=5,
                label="float32")
        for i, name in enumerate((result.precision or {}).get("precisions", [])):
            at = [(p.precision[name]["bytes_per_vector"], p.precision[name]["score"]) for p in pts
                  if name in p.precision and name != "float32"]
            if at:
                ax.plot(*zip(*at), "o--", color=plt.get_cmap("tab10").colors[(i + 1) % 10], ms=4, label=name)
        for p in pts:
            ax.annotate(p.label, (p.bytes_per_vector, p.spearman), textcoords="offset points", xytext=(6, -12),
                        fontsize=7)
        ax.axhline(result.source_spearman, color="black", ls="--", lw=1,
                   label=f"source (the full table, {result.source_dim}-d): {result.source_spearman:.1f}")
        if result.source_spearman > 0:
            ax.axhline(result.target_retention * result.source_spearman, color="gray", ls=":", lw=1,
                       label=f"target: {100 * result.target_retention:g}% of source")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.set_title(f"{Path(result.source).name}: widths of a static model (its table's first columns), "
                     f"{result.source_sentences_per_s:,.0f} sentences/s at each", fontsize=10)
        ax.set_xlabel("bytes per vector, log scale")
        ax.set_ylabel(f"{result.metric_label} ({', '.join(s['name'] for s in result.sets)})")
    return path


def plot_sweep(result: SweepResult, path: Path) -> Path:
    """Draw ``result`` as a PNG at ``path``: each width's points by throughput, the source and the target lines."""
    from matplotlib import ticker

    if result.static:
        return plot_static(result, path)
    with figure(path) as (plt, ax):
        dims = sorted({p.dim for p in result.points})
        # tab10: distinct colours that all stay visible on white (a sequential map ends in a pale yellow)
        colors = plt.get_cmap("tab10").colors
        for i, dim in enumerate(dims):
            pts = sorted((p for p in result.points if p.dim == dim), key=lambda p: p.sentences_per_s)
            ax.plot([p.sentences_per_s for p in pts], [p.spearman for p in pts], "o-", color=colors[i % 10], ms=4,
                    lw=1.4, label=f"d={dim}", zorder=3)
        front = sorted((p for p in result.points if p.pareto), key=lambda p: p.sentences_per_s)
        ax.plot([p.sentences_per_s for p in front], [p.spearman for p in front], "s", mfc="none", mec="crimson",
                ms=10, mew=1.5, ls=":", color="crimson", lw=0.8, label="Pareto frontier", zorder=2)
        for i, p in enumerate(front):  # alternate below/above so neighbouring labels do not overlap
            ax.annotate(p.label, (p.sentences_per_s, p.spearman), textcoords="offset points",
                        xytext=(8, -13 if i % 2 == 0 else 8), fontsize=7, color="crimson", zorder=4,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        ax.axhline(result.source_spearman, color="black", ls="--", lw=1,
                   label=f"source ({result.source_depth} layers, {result.source_dim}-d): {result.source_spearman:.1f}")
        ax.plot([result.source_sentences_per_s], [result.source_spearman], "*", color="black", ms=12)
        if result.source_spearman > 0:
            ax.axhline(result.target_retention * result.source_spearman, color="gray", ls=":", lw=1,
                       label=f"target: {100 * result.target_retention:g}% of source")
        sets = ", ".join(s["name"] for s in result.sets)
        ax.set_title(f"{Path(result.source).name}: depth x width sweep ({result.head.value} head, "
                     f"layers: {result.selection})", fontsize=10)
        ax.set_xscale("log")  # shallow cuts run many times faster than the full model: a linear axis crowds the deep ones
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
        ax.set_xlabel(f"throughput, sentences/s, log scale (batch {result.latency['batch_size']}, "
                      f"{result.threads} thread(s))" + ("" if result.timing_reliable else
                                                        "\nthroughput NOT reliable (why: sweep.json, "
                                                        "latency.reasons)"))
        ax.set_ylabel(f"{result.metric_label} ({sets})")
    return path
