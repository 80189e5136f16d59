"""The sweep plot: STS Spearman (or retrieval nDCG@10) vs throughput, one line per width, Pareto frontier marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from espresso_export.verification.sweep_result import SweepResult


def plot_sweep(result: SweepResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    fig, ax = plt.subplots(figsize=(8.5, 5.5), dpi=120)
    try:
        dims = sorted({p.dim for p in result.points})
        cmap = plt.get_cmap("viridis", max(2, len(dims)))
        for i, dim in enumerate(dims):
            pts = sorted((p for p in result.points if p.dim == dim), key=lambda p: p.sentences_per_s)
            ax.plot([p.sentences_per_s for p in pts], [p.spearman for p in pts], "o-", color=cmap(i), ms=4,
                    lw=1.2, label=f"d={dim}")
        front = sorted((p for p in result.points if p.pareto), key=lambda p: p.sentences_per_s)
        ax.plot([p.sentences_per_s for p in front], [p.spearman for p in front], "s", mfc="none", mec="crimson",
                ms=10, mew=1.5, ls="--", color="crimson", lw=1, label="Pareto frontier")
        for i, p in enumerate(front):  # alternate below/above so neighbouring labels do not overlap
            ax.annotate(p.label, (p.sentences_per_s, p.spearman), textcoords="offset points",
                        xytext=(6, -11 if i % 2 == 0 else 6), fontsize=7, color="crimson")
        ax.axhline(result.source_spearman, color="black", ls="--", lw=1,
                   label=f"source ({result.source_depth} layers, {result.source_dim}-d): {result.source_spearman:.1f}")
        ax.plot([result.source_sentences_per_s], [result.source_spearman], "*", color="black", ms=12)
        if result.source_spearman > 0:
            ax.axhline(result.target_retention * result.source_spearman, color="gray", ls=":", lw=1,
                       label=f"target: {100 * result.target_retention:g}% of source")
        sets = ", ".join(s["name"] for s in result.sets)
        ax.set_title(f"{Path(result.source).name}: depth x width sweep ({result.head.value} head, "
                     f"layers: {result.selection})", fontsize=10)
        ax.set_xscale("log")  # depth 1 runs ~10x faster than the full model: a linear axis crowds the deep cuts
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
        ax.set_xlabel(f"throughput, sentences/s, log scale (batch {result.latency['batch_size']}, "
                      f"{result.threads} thread(s))" + ("" if result.timing_reliable else
                                                        "\nthroughput NOT reliable (why: sweep.json, "
                                                        "latency.reasons)"))
        ax.set_ylabel(f"{result.metric_label} ({sets})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
