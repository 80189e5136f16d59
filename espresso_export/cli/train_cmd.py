"""``espresso-export train``: ESE fine-tuning (``--ese``) or plain fine-tuning of the last layer; its options are
derived from :class:`~espresso_export.finetuning.train_settings.TrainSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OutputOpt, OverwriteOpt, ResumeOpt, RunDirOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.finetuning.train_settings import TrainSettings


def _train(settings: TrainSettings, *, model: str, output: Path, data: Path, resume: bool, run_dir: Path | None,
           overwrite: bool, json_out: bool) -> None:
    """Fine-tune a model so its first layers and first k dims carry the meaning (ESE), or plainly."""
    from espresso_export.cli.render import finish_table, report_json
    from espresso_export.training.distributed import current
    from espresso_export.finetuning.train import train_ese
    from espresso_export.training.task import LOSS_LABEL

    result = train_ese(model, data, output, settings=settings, resume=resume, run_dir=run_dir, overwrite=overwrite,
                       progress=not json_out)
    if report_json(result, json_out, main=current().main):
        return
    o, t = result.objective, result.train
    rows = [
        ("source", result.source),
        ("objective", (f"ESE: {o['loss']}, k={o['compression_dim']}, alpha={o['alpha']}, beta={o['beta']}, "
                       f"{o['layer_weights']} layer weights from layer {o['layers_from']}") if result.ese
         else f"plain fine-tuning of the last layer ({o['loss']})"),
        ("data", f"{result.data['examples']} {result.data['kind']} from {result.data['name']}"),
        ("training", f"{t['steps']} steps ({t['epochs']} epochs), {t['items_per_second']:.0f} examples/s"
                     + (f", {LOSS_LABEL} {t['epoch_mean_loss']:.4g}" if t["epoch_mean_loss"] is not None else "")),
    ]
    if result.attention:
        rows.append(("attention", f"bidirectional: {result.attention['mode']} {result.attention['bidirectional_layers']}"))
    if result.lora:
        rows.append(("LoRA", f"r={result.lora['r']}, merged"))
    if result.eval:
        e = result.eval
        what = (f"STS Spearman, mean of {len(e['cut_points'])} cut points" if len(e.get("cut_points", ())) > 1
                else "STS Spearman")
        rows.append((f"eval ({what})", f"{e['initial']:.2f} before -> best {e['best']:.2f} at step {e['best_step']}"))
    finish_table("train", rows, result)


train = app.command(
    name="train",
    epilog="Examples:\n\n"
    "  espresso-export train minilm --ese --data sts-train.csv --eval-sts sts-dev.csv -o minilm-ese\n\n"
    "  espresso-export train minilm --ese --data snli.tsv.gz --loss infonce --compression-dim 64 -o minilm-ese-nli\n\n"
    "  espresso-export train qwen2-folder/ --ese --bidirectional all --lora --lr 2e-4 --data nli.jsonl -o qwen-ese\n\n"
    "  espresso-export train minilm --data sts-train.csv -o minilm-ft    (no --ese: plain fine-tuning, the control)\n\n"
    "  torchrun --nproc_per_node 4 -m espresso_export train ... --device cuda    (4 GPUs, data-parallel; "
    "--batch-size stays the global batch)",
)(settings_command(TrainSettings, [
    param("model", Annotated[str, typer.Argument(help="Model folder, Hub id, or alias (see `espresso-export models`).")]),
    param("output", OutputOpt),
    param("data", Annotated[Path, typer.Option("--data", help="Training data: scored pairs (STS-B, csv/jsonl with a "
                                               "score), NLI (premise, hypothesis, label), or anchor, positive (and "
                                               "negative) in jsonl/csv/tsv.")]),
    param("resume", ResumeOpt, False), param("run_dir", RunDirOpt, None), param("overwrite", OverwriteOpt, False),
    param("json_out", JsonOpt, False),
], _train))
