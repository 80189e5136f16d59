"""``espresso-export shrink``: its options are derived from :class:`~espresso_export.shrinking.shrink_settings.ShrinkSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OutputOpt, OverwriteOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.shrinking.shrink_settings import ShrinkSettings


def _shrink(settings: ShrinkSettings, *, model: str, output: Path, overwrite: bool, json_out: bool) -> None:
    """Keep L layers and a k-d embedding, with a fitted PCA or a first-k head."""
    from espresso_export.cli.render import finish_table, report_json
    from espresso_export.shrinking.shrink import shrink as run_shrink

    result = run_shrink(model, output, settings, overwrite=overwrite, progress=not json_out)
    if report_json(result, json_out):
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
    finish_table("shrink", rows, result)


shrink = app.command(
    name="shrink",
    short_help="Keep L layers and a k-d embedding (PCA or first-k head).",
    epilog="Examples:\n\n"
    "  espresso-export shrink minilm --layers 3 --dim 128 -o minilm-L3-d128\n\n"
    "  espresso-export shrink model/ --layers 0,2,4,6 --dim 256 --head pca -o small/\n\n"
    "  espresso-export shrink ese-model/ --layers 2 --dim 128 --head truncate -o tiny/",
)(settings_command(ShrinkSettings, [
    param("model", Annotated[str, typer.Argument(help="Model folder, Hub id, or alias (see `espresso-export models`).")]),
    param("output", OutputOpt), param("overwrite", OverwriteOpt, False), param("json_out", JsonOpt, False),
], _shrink))
