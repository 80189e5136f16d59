"""Full depth x width sweep of all-mpnet-base-v2 on STS-B test (48 points).

    PYTHONPATH=$PWD python benchmarks/sweep.py [--threads N] [--out benchmarks/results/sweep-mpnet]

Layers 1..12 (first-L, one forward pass) x dims 64,128,256,768, PCA head fitted
on the shipped calibration corpus; throughput measured once per depth on the
cut model (batch 32, 64 STS-B sentences, 2 interleaved rounds). Writes
sweep.json / sweep.csv / sweep.png and prints the wall time and a Markdown table.
Target: the whole sweep in under 10 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _models import mpnet, stsb  # noqa: E402


def markdown_table(result) -> str:
    lines = ["| layers | dim | Spearman | retention | sent/s | speed-up | params | bytes/vector | Pareto |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for p in sorted(result.points, key=lambda p: (p.layers, p.dim)):
        lines.append(f"| {p.layers} | {p.dim} | {p.spearman:.2f} | {p.retention:.3f} | {p.sentences_per_s:.1f} | "
                     f"{p.sentences_per_s / result.source_sentences_per_s:.2f}x | {p.params / 1e6:.1f}M | "
                     f"{p.bytes_per_vector} | {'*' if p.pareto else ''} |")
    lines.append(f"| 12 (source) | 768 | {result.source_spearman:.2f} | 1.000 | {result.source_sentences_per_s:.1f} | "
                 f"1.00x | {result.source_params / 1e6:.1f}M | 3072 | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sweep-mpnet")
    parser.add_argument("--replot", action="store_true", help="Redraw sweep.png and the table from sweep.json.")
    args = parser.parse_args()
    if args.replot:
        import json

        from espresso_export.sweeping.sweep import SweepResult
        from espresso_export.sweeping.plots import plot_sweep

        result = SweepResult.from_dict(json.loads((args.out / "sweep.json").read_text()))
        plot_sweep(result, args.out / "sweep.png")
        print(markdown_table(result))
        return

    from espresso_export.sweeping.sweep import sweep
    from espresso_export.sweeping.sweep_settings import SweepSettings

    model = mpnet()
    load_before = os.getloadavg()[0]
    start, cpu = time.perf_counter(), time.process_time()
    result = sweep(str(model), args.out, SweepSettings(
        layers=list(range(1, 13)), dims=[64, 128, 256, 768], head="pca", select="first", sts=[str(stsb("test"))],
        threads=args.threads,
    ), overwrite=True, progress=True)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"machine: {os.cpu_count()} CPUs, load average {load_before:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print(f"wall time: {wall:.1f} s, process CPU time {cpu:.1f} s, for {len(result.points)} points "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in result.timings.items())}); threads {result.threads}")
    print(markdown_table(result))
    for name, point in (("smallest", result.smallest), ("fastest", result.fastest)):
        if point is not None:
            print(f"{name} meeting {result.target_retention:.0%}: {point.label} -> {result.shrink_command(point)}")
    print(f"written: {result.output}")


if __name__ == "__main__":
    main()
