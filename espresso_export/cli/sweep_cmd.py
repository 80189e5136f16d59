"""``espresso-export sweep``: the depth x width map of one model."""

from __future__ import annotations

from typing import Annotated

import typer

from espresso_export.core.types import Head, SweepMetric
from espresso_export.cli.app import app
from espresso_export.cli.common_options import (
    SELECT_DEFAULT, BatchSizeOpt, CalibrationOpt, CalibrationSamplesOpt, JsonOpt, OutputOpt, OverwriteOpt, SeedOpt, StsColumnsOpt,
    StsLimitOpt, StsOpt, MeasureThreadsOpt, SelectOpt, parse_int_list,
)
from espresso_export.cli.common_options import RelevantScoreOpt, RetrievalOpt


@app.command(
    epilog="Examples:\n\n"
    "  espresso-export sweep minilm --layers 2,3,4,6 --dims 64,128,256 -o sweep-minilm\n\n"
    "  espresso-export sweep model/ --layers 1,2,3,4,5,6 --dims 128,384 --sts sts-test.csv "
    "--target-retention 0.9 -o sweep/",
)
def sweep(
    model: Annotated[str, typer.Argument(help="Source model folder, Hub id, or alias.")],
    output: OutputOpt,
    layers: Annotated[str, typer.Option("--layers", "-l", help="Depths to try, comma-separated (2,3,4,6).")],
    dims: Annotated[str, typer.Option("--dims", "-d", help="Embedding widths to try, comma-separated (64,128,256).")],
    head: Annotated[Head, typer.Option("--head", case_sensitive=False,
                                       help="pca (fitted on the calibration corpus) or truncate (first-k).")] = Head.PCA,
    select: SelectOpt = SELECT_DEFAULT,
    sts: StsOpt = None,
    sts_columns: StsColumnsOpt = None,
    sts_limit: StsLimitOpt = None,
    metric: Annotated[SweepMetric, typer.Option(
        "--metric", case_sensitive=False,
        help="What the points are scored, plotted and recommended on: sts (Spearman on --sts) or retrieval "
             "(nDCG@10 on --retrieval).")] = SweepMetric.STS,
    retrieval: RetrievalOpt = None,
    relevant_score: RelevantScoreOpt = 4.0,
    target_retention: Annotated[float, typer.Option(
        "--target-retention", help="Recommend the smallest and the fastest point keeping this fraction of the "
                                   "source's score (STS Spearman, or nDCG@10 with --metric retrieval).")] = 0.95,
    calibration: CalibrationOpt = None,
    calibration_samples: CalibrationSamplesOpt = 4096,
    threads: MeasureThreadsOpt = None,
    latency_batch_size: Annotated[int, typer.Option("--latency-batch-size", min=1,
                                                    help="Batch size of the throughput measurement.")] = 32,
    latency_texts: Annotated[int, typer.Option("--latency-texts", min=1, help="Texts timed per depth and round.")] = 64,
    latency_rounds: Annotated[int, typer.Option("--latency-rounds", min=1,
                                                help="Timed rounds, alternating the depths (fewer than 3: the "
                                                     "timing is reported as not reliable).")] = 3,
    batch_size: BatchSizeOpt = 64,
    overwrite: OverwriteOpt = False,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """Measure every (layers, dim) cut in memory: Spearman, throughput, size; write a table and a plot."""
    from espresso_export.sweeping.sweep import SweepOptions, sweep as run_sweep
    from espresso_export.verification.sts import parse_columns
    from espresso_export.cli.render import print_hints, print_json

    options = SweepOptions(
        layers=parse_int_list(layers, "--layers", positive=False), dims=parse_int_list(dims, "--dims"), head=head, select=select,
        sts=tuple(sts or ["builtin"]), sts_columns=parse_columns(sts_columns), sts_limit=sts_limit, metric=metric,
        retrieval=tuple(retrieval or ()), relevant_score=relevant_score,
        calibration=calibration, calibration_samples=calibration_samples, target_retention=target_retention,
        threads=threads, batch_size=batch_size, latency_batch_size=latency_batch_size, latency_texts=latency_texts,
        latency_rounds=latency_rounds, seed=seed,
    )
    result = run_sweep(model, options, output=output, overwrite=overwrite, progress=not json_out)
    if json_out:
        print_json(result.to_dict())
        return
    _print(result)
    print_hints(f"note: {n}" for n in result.notes)


def _print(result) -> None:
    from espresso_export.cli.tables import show, sweep_picks, sweep_table
    from espresso_export.core.console import out_console

    console = out_console()
    show(sweep_table(result, console.width), *sweep_picks(result))
    console.print(f"table and plot: {result.output}/sweep.{{json,csv,png}} ({result.timings['total']:.1f} s)",
                  highlight=False)

