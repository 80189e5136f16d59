"""``espresso-export sweep``: the depth x width map of one model; its options are derived from
:class:`~espresso_export.sweeping.sweep_settings.SweepSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OutputOpt, OverwriteOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.sweeping.sweep_settings import SweepSettings


def _sweep(settings: SweepSettings, *, model: str, output: Path, overwrite: bool, json_out: bool) -> None:
    """Measure every (layers, dim) cut in memory: score (STS, retrieval or agreement with the source on a corpus),
    throughput, size; write a table and a plot."""
    from espresso_export.cli.render import print_hints, print_json
    from espresso_export.sweeping.sweep import sweep as run_sweep

    result = run_sweep(model, output, settings, overwrite=overwrite, progress=not json_out)
    if json_out:
        print_json(result.to_dict())
        return
    _print(result)
    print_hints(f"note: {n}" for n in result.notes)


def _print(result) -> None:
    """The points' table, the recommended picks, and where the files are."""
    from espresso_export.cli.tables import show, sweep_picks, sweep_table
    from espresso_export.core.console import out_console

    console = out_console()
    table = _static_table(result, console.width) if result.static else sweep_table(result, console.width)
    show(table, *_precision_table(result, console.width), *sweep_picks(result))
    console.print(f"table and plot: {result.output}/sweep.{{json,csv,png}} ({result.timings['total']:.1f} s)",
                  highlight=False)


def _static_table(result, width: int):
    """A static model's widths: its table's first columns, one speed for all (timed with the full table, so no
    Pareto column: the front is the best-scoring width)."""
    from espresso_export.cli.tables import grid

    mark = "" if result.timing_reliable else "?"  # the notes under the table say why
    headers = ["dim", result.metric_name, "retention", "sent/s", "params", "B/vector"]
    rows = [[str(p.dim), f"{p.spearman:.2f}", "n/a" if p.retention is None else f"{p.retention:.3f}",
             f"{p.sentences_per_s:.1f}{mark}", f"{p.params / 1e6:.2f}M", str(p.bytes_per_vector)]
            for p in sorted(result.points, key=lambda p: p.dim)]
    rows.append([f"{result.source_dim} (source)", f"{result.source_spearman:.2f}", "1.000",
                 f"{result.source_sentences_per_s:.1f}{mark}", f"{result.source_params / 1e6:.2f}M",
                 str(4 * result.source_dim)])
    return grid(f"sweep of the static model {result.source} (widths: its table's first columns, "
                f"{result.threads} thread(s))", headers, rows, width, right=headers[1:], whole=headers)


def _precision_table(result, width: int) -> list:
    """``--precision``: each point's score and bytes per vector with its vectors stored at each precision."""
    from espresso_export.cli.tables import grid

    if not result.precision:
        return []
    names = result.precision["precisions"]
    headers = ["model" if result.static else "layers kept", "dim", *names]

    def cells(at: dict) -> list[str]:
        return [f"{at[n]['score']:.2f} ({at[n]['bytes_per_vector']})" if n in at else "n/a" for n in names]

    rows = [[",".join(map(str, p.kept)) or "static", str(p.dim), *cells(p.precision)]
            for p in sorted(result.points, key=lambda p: (p.layers, p.dim))]
    rows.append(["full table (source)" if result.static else f"all {result.source_depth} (source)",
                 str(result.source_dim), *cells(result.precision.get("source", {}))])
    return [grid(f"{result.metric_name} x100 (bytes per vector) with the vectors stored at each precision, float "
                 "queries", headers, rows, width, right=headers[1:], whole=headers)]


sweep = app.command(
    name="sweep",
    epilog="Examples:\n\n"
    "  espresso-export sweep minilm --layers 2,3,4,6 --dims 64,128,256 -o sweep-minilm\n\n"
    "  espresso-export sweep model/ --layers 1,2,3,4,5,6 --dims 128,384 --sts sts-test.csv "
    "--target-retention 0.9 -o sweep/\n\n"
    "  espresso-export sweep model/ --layers 2,3,4 --dims 128,256 --metric agreement --corpus docs.jsonl "
    "--precision float32,int8,binary -o sweep-docs/\n\n"
    "  espresso-export sweep static/ --dims 64,128,256 --metric agreement --corpus docs.jsonl "
    "--precision float32,int8,binary -o sweep-static/   (a static model: its widths, no --layers)",
)(settings_command(SweepSettings, [
    param("model", Annotated[str, typer.Argument(help="Source model folder, Hub id, or alias; or a static model "
                                                     "folder (distill --student static), swept over its widths.")]),
    param("output", OutputOpt), param("overwrite", OverwriteOpt, False), param("json_out", JsonOpt, False),
], _sweep))
