"""``auto.png``: every measured heal of every candidate, known-item retention against the objective's cost, the
target line, the answer marked."""

from __future__ import annotations

from pathlib import Path

from espresso_export.searching.candidates import Candidate, Heal

COST_LABEL = {"latency": "time per text, relative to the source (torch, this machine)",
              "size": "parameters (millions)",
              "bytes-per-vector": "bytes per stored vector (each candidate's last heal: every width and precision)"}


def _name(source: str) -> str:
    p = Path(source)
    return f"{p.parent.name}/{p.name}" if p.name == "model" else p.name


def _cost(cand: Candidate, heal: Heal, objective: str) -> float:
    if objective == "latency":
        return cand.latency_ratio
    if objective == "size":
        return cand.params / 1e6
    return heal.score.bytes_per_vector


def _series(result, cand: Candidate) -> tuple[list[float], list[float]]:
    """A candidate's points: its heals by the objective's cost; for bytes per vector, the frontier of its last
    heal's stored forms (each width and precision), the trade-off the objective chooses on."""
    if result.objective != "bytes-per-vector":
        heals = list(cand.scores.values())
        return [_cost(cand, h, result.objective) for h in heals], [h.retention for h in heals]
    last = list(cand.scores.values())[-1]
    best: dict[int, float] = {}
    for form in last.forms:
        best[form.bytes_per_vector] = max(best.get(form.bytes_per_vector, 0.0), form.retention)
    xs, ys, top = [], [], -1.0
    for x in sorted(best):  # the frontier: the best retention at this many bytes or fewer
        if best[x] > top:
            top = best[x]
            xs.append(x)
            ys.append(top)
    return xs, ys


def plot_auto(result, path: Path) -> Path:
    from espresso_export.sweeping.plots import figure

    with figure(path) as (plt, ax):
        colors = plt.get_cmap("tab10").colors
        for i, cand in enumerate(c for c in result.measured if c.scores):
            xs, ys = _series(result, cand)
            ax.plot(xs, ys, "o-", color=colors[i % 10], ms=4, lw=1, label=cand.name, alpha=0.85)
        ax.axhline(result.target, color="gray", ls=":", lw=1, label=f"target {result.target:g}")
        ax.axhline(1.0, color="black", ls="--", lw=0.8, label="source")
        if result.answer is not None:
            a, form = result.answer, result.answer.form
            cand = next(c for c in result.measured if c.name == a.name)
            x = form.bytes_per_vector if result.objective == "bytes-per-vector" else \
                _cost(cand, a.measured, result.objective)
            ax.plot([x], [form.retention], "*", ms=16, color="crimson",
                    label=("answer" if result.met else "best reached") + f": {a.describe()}, "
                          f"{form.dim}-d {form.precision}")
        if result.objective == "bytes-per-vector":
            ax.set_xscale("log", base=2)
        ax.set_xlabel(COST_LABEL[result.objective])
        ax.set_ylabel(f"{result.score_name} on your documents")
        ax.set_title(f"{_name(result.source)}: auto search ({result.objective}, target {result.target:g})", fontsize=10)
    return path
