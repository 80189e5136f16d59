"""``auto.png``: every measured stage of every candidate, known-item retention against the objective's cost, the
target line, the winner marked."""

from __future__ import annotations

from pathlib import Path

COST_LABEL = {"latency": "time per text, relative to the source (torch, this machine)",
              "size": "parameters (millions)", "bytes-per-vector": "bytes per stored vector"}


def _cost(row: dict, objective: str) -> float:
    if objective == "latency":
        return row["latency_ratio"]
    if objective == "size":
        return row["params"] / 1e6
    return row["bytes_per_vector"]


def plot_auto(result, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows()
    fig, ax = plt.subplots(figsize=(8.5, 5.5), dpi=120)
    try:
        colors = plt.get_cmap("tab10").colors
        for i, name in enumerate(dict.fromkeys(r["candidate"] for r in rows)):
            pts = [r for r in rows if r["candidate"] == name]
            ax.plot([_cost(r, result.objective) for r in pts], [r["retention"] for r in pts], "o-",
                    color=colors[i % 10], ms=4 + 0 * i, lw=1, label=name, alpha=0.85)
        ax.axhline(result.target, color="gray", ls=":", lw=1, label=f"target {result.target:g}")
        ax.axhline(1.0, color="black", ls="--", lw=0.8, label="source")
        if result.winner is not None:
            w = next(r for r in rows if r["candidate"] == result.winner.name and r["stage"] == result.winner.stage_name)
            ax.plot([_cost(w, result.objective)], [w["retention"]], "*", ms=16, color="crimson",
                    label=("winner" if result.met else "best reached") + f": {w['candidate']} ({w['stage']})")
        ax.set_xlabel(COST_LABEL[result.objective])
        ax.set_ylabel("known-item retention on your documents")
        ax.set_title(f"{Path(result.source).name}: auto search ({result.objective}); stages: plain, then heals",
                     fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
