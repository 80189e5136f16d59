"""``espresso-export shrink``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.core.types import Select
from espresso_export.cli.app import app
from espresso_export.cli.options import (
    BatchSizeOpt, BidirectionalOpt, DimOpt, HeadOpt, JsonOpt, LayersOpt, OutputOpt, OverwriteOpt, PoolingOpt, SeedOpt, SelectOpt,
    TrustRemoteCodeOpt,
)


@app.command(
    epilog="Examples:\n\n"
    "  espresso-export shrink minilm --layers 3 --dim 128 -o minilm-L3-d128\n\n"
    "  espresso-export shrink model/ --layers 0,2,4,6 --dim 256 --head pca -o small/\n\n"
    "  espresso-export shrink ese-model/ --layers 2 --dim 128 --head truncate -o tiny/",
)
def shrink(
    model: Annotated[str, typer.Argument(help="Model folder, Hub id, or alias (see `espresso-export models`).")],
    output: OutputOpt,
    layers: LayersOpt,
    dim: DimOpt = None,
    head: HeadOpt = None,
    select: SelectOpt = Select.AUTO,
    pooling: PoolingOpt = None,
    calibration: Annotated[
        Optional[Path],
        typer.Option("--calibration", help="Sentences for the PCA head: .txt (one a line) or .jsonl. "
                                           "Default: a small corpus shipped with espresso-export."),
    ] = None,
    calibration_samples: Annotated[
        int, typer.Option("--calibration-samples", min=1, help="Use at most this many calibration sentences.")
    ] = 4096,
    overwrite: OverwriteOpt = False,
    seed: SeedOpt = 0,
    batch_size: BatchSizeOpt = 64,
    trust_remote_code: TrustRemoteCodeOpt = False,
    bidirectional: BidirectionalOpt = None,
    prune_corpus: Annotated[
        Optional[list[str]],
        typer.Option("--prune-corpus", help="Also prune the vocabulary to the tokens this corpus uses (repeatable; "
                                            "as `prune-vocab --corpus`)."),
    ] = None,
    prune_min_count: Annotated[int, typer.Option("--prune-min-count", min=1, help="As `prune-vocab --min-count`.")] = 1,
    prune_keep_top: Annotated[
        Optional[int], typer.Option("--prune-keep-top", min=1, help="As `prune-vocab --keep-top`.")
    ] = None,
    prune_keep_file: Annotated[
        Optional[Path], typer.Option("--prune-keep-file", help="As `prune-vocab --keep-file`.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Keep L layers and a k-d embedding, with a fitted PCA or a first-k head."""
    from espresso_export.shrinking.shrink import shrink as run_shrink
    from espresso_export.shrinking.slicing import parse_layers
    from espresso_export.cli.render import print_hints, print_json, print_table

    result = run_shrink(
        model, output, layers=parse_layers(layers), dim=dim, head=head, select=select, pooling=pooling,
        calibration=calibration, calibration_samples=calibration_samples, overwrite=overwrite, seed=seed,
        batch_size=batch_size, trust_remote_code=trust_remote_code, progress=not json_out,
        attention=bidirectional.value if bidirectional is not None else None,
        prune_corpus=prune_corpus or None, prune_min_count=prune_min_count, prune_keep_top=prune_keep_top,
        prune_keep_file=prune_keep_file,
    )
    print_hints(result.hints)
    if json_out:
        print_json(result.to_dict())
        return
    rows = [
        ("source", result.source),
        ("layers kept", f"{len(result.layers)} of {result.source_depth}: {result.layers}"),
        ("embedding", f"{result.dim}-d, {result.pooling.value} pooling, head {result.head.value}"),
        ("parameters", f"{result.params_before / 1e6:.1f}M -> {result.params_after / 1e6:.1f}M"),
    ]
    if result.explained_variance is not None:
        rows.append(("PCA variance kept", f"{100 * result.explained_variance:.1f}% on {result.calibration_size} sentences"))
    if result.vocab is not None:
        v = result.vocab
        rows.append(("vocabulary", f"{v['vocab_size_before']:,} -> {v['vocab_size_after']:,} tokens "
                                   f"({v['tokenizer']}), {100 * v['corpus_coverage']:.2f}% of "
                                   f"{v['corpus_tokens']:,} corpus tokens kept"))
    rows += [("output", result.output), ("time", f"{result.seconds:.1f} s")]
    print_table("shrink", rows)
