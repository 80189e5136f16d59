"""Draw the benchmark page's plots from the results JSON (nothing is measured here).

    python benchmarks/plots.py            # writes benchmarks/plots/*.png

speed-by-batch.png: sentences/s by batch size (median of the rounds) for the source in PyTorch, our fp32 ONNX
graph, the default int8 ONNX file and the OpenVINO int8 file, per cut and thread count, from the `int8.py` runs
in benchmarks/results/int8-intel/.

estimate.png: auto's label-free estimate (known-item retention on the search's sample; below it, the estimate with
the set's own queries given as --queries: the higher of that and their belief retention) against labelled nDCG@10
retention, one point per candidate, coloured by kind, one panel
per collection, from benchmarks/estimate.py's
results in benchmarks/results/estimate-*.json.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {"all-MiniLM-L6-v2 -> L3/d128": HERE / "results/int8-intel/int8-minilm-L3-d128.json",
        "all-mpnet-base-v2 -> L4/d128, healed": HERE / "results/int8-intel/int8-mpnet-L4-d128-healed.json"}
SERIES = {"source PyTorch": "source in PyTorch", "our fp32 graph": "fp32 ONNX",
          "int8 default on this CPU": "int8 ONNX (default file)", "OpenVINO int8 (export --format openvino)":
          "OpenVINO int8"}


def _series(speed: dict, threads: str) -> dict[str, tuple[list[int], list[float]]]:
    """{label: (batch sizes, median sentences/s)} for the configurations the page shows."""
    out = {}
    for config, by_batch in speed[threads].items():
        label = None if "O2" in config else next((v for k, v in SERIES.items() if config.startswith(k)), None)
        if label:
            batches = sorted(by_batch, key=int)
            out[label] = ([int(b) for b in batches], [by_batch[b]["median"] for b in batches])
    return out


def speed_by_batch(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    colours = dict(zip(SERIES.values(), ("tab:gray", "tab:blue", "tab:orange", "tab:green")))
    for ax, (title, path) in zip(axes, RUNS.items()):
        run = json.loads(path.read_text(encoding="utf-8"))
        for threads, style in (("1", "--"), ("2", "-")):
            for label, (batches, rates) in _series(run["speed"], threads).items():
                ax.plot(batches, rates, style, marker="o", color=colours[label], label=f"{label}, {threads} thread(s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel("sentences/s (median)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    cpu = run["cpu"].get("model", run["cpu"]["isa"])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=4)
    fig.suptitle(f"Speed by batch size, benchmarks/int8.py, {cpu}, 2026-11-25", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    target = out / "speed-by-batch.png"
    fig.savefig(target, dpi=90)
    plt.close(fig)
    return target


def estimate(out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((HERE / "results").glob("estimate-*.json"))]
    from _labelled import MISLABELLED

    runs = [r for r in runs if r["collection"] not in MISLABELLED]
    if not runs:
        return None
    ways = (("estimate_sample", "known-item retention (the search's sample)"),
            ("estimate_asked_sample", "with the set's queries as --queries (unlabelled)"))
    fig, axes = plt.subplots(len(ways), len(runs), figsize=(4.2 * len(runs), 4.2 * len(ways)), squeeze=False)
    kinds = sorted({r["kind"] for run in runs for r in run["rows"]})
    colours = dict(zip(kinds, plt.get_cmap("tab20").colors))
    for line, (key, label) in zip(axes, ways):
        for ax, run in zip(line, runs):
            for kind in kinds:
                rows = [r for r in run["rows"] if r["kind"] == kind and key in r]
                ax.scatter([r["labelled"] for r in rows], [r[key] for r in rows], s=18, color=colours[kind],
                           marker="^" if kind.startswith("static") else "o", label=kind)
            ax.plot([0, 1.2], [0, 1.2], color="gray", lw=0.8, ls=":")
            ax.set_xlim(0, 1.2)
            ax.set_ylim(0, 1.2)
            ax.set_xlabel("labelled nDCG@10 retention")
            ax.set_ylabel(label, fontsize=8)
            ax.set_title(f"{run['collection']} ({run['labelled_queries']} labelled queries)", fontsize=9)
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=6)
    fig.suptitle(f"estimates against the labels, benchmarks/estimate.py, {runs[0]['machine']['cpu']}, "
                 f"{runs[0]['date']}", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    target = out / "estimate.png"
    fig.savefig(target, dpi=90)
    plt.close(fig)
    return target


def main() -> None:
    out = HERE / "plots"
    out.mkdir(exist_ok=True)
    print(speed_by_batch(out))
    print(estimate(out))


if __name__ == "__main__":
    main()
