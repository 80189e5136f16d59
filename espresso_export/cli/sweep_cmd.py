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
    show(sweep_table(result, console.width), *_precision_table(result, console.width), *sweep_picks(result))
    console.print(f"table and plot: {result.output}/sweep.{{json,csv,png}} ({result.timings['total']:.1f} s)",
                  highlight=False)


def _precision_table(result, width: int) -> list:
    """``--precision``: each point's score and bytes per vector with its vectors stored at each precision."""
    from espresso_export.cli.tables import grid

    if not result.precision:
        return []
    names = result.precision["precisions"]
    headers = ["layers kept", "dim", *names]

    def cells(at: dict) -> list[str]:
        return [f"{at[n]['score']:.2f} ({at[n]['bytes_per_vector']})" if n in at else "n/a" for n in names]

    rows = [[",".join(map(str, p.kept)), str(p.dim), *cells(p.precision)]
            for p in sorted(result.points, key=lambda p: (p.layers, p.dim))]
    rows.append([f"all {result.source_depth} (source)", str(result.source_dim),
                 *cells(result.precision.get("source", {}))])
    return [grid(f"{result.metric_name} x100 (bytes per vector) with the vectors stored at each precision, float "
                 "queries", headers, rows, width, right=headers[1:], whole=headers)]


sweep = app.command(
    name="sweep",
    epilog="Examples:\n\n"
    "  espresso-export sweep minilm --layers 2,3,4,6 --dims 64,128,256 -o sweep-minilm\n\n"
    "  espresso-export sweep model/ --layers 1,2,3,4,5,6 --dims 128,384 --sts sts-test.csv "
    "--target-retention 0.9 -o sweep/\n\n"
    "  espresso-export sweep model/ --layers 2,3,4 --dims 128,256 --metric agreement --corpus docs.jsonl "
    "--precision float32,int8,binary -o sweep-docs/",
)(settings_command(SweepSettings, [
    param("model", Annotated[str, typer.Argument(help="Source model folder, Hub id, or alias.")]),
    param("output", OutputOpt), param("overwrite", OverwriteOpt, False), param("json_out", JsonOpt, False),
], _sweep))
