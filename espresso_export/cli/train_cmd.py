"""``espresso-export train``: ESE fine-tuning (``--ese``) or plain fine-tuning of the last layer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.cli.app import app
from espresso_export.cli.options import (
    BatchSizeOpt, BidirectionalOpt, CheckpointEveryOpt, DeviceOpt, EpochsOpt, EvalLimitOpt, EvalStsOpt, JsonOpt, KeepCheckpointsOpt,
    LrOpt, MaxSeqLenOpt, MaxStepsOpt, OutputOpt, OverwriteOpt, PoolingOpt, ResumeOpt, RunDirOpt, SeedOpt,
    ThreadsOpt, TrustRemoteCodeOpt, WarmupOpt,
)


@app.command(
    epilog="Examples:\n\n"
    "  espresso-export train minilm --ese --data sts-train.csv --eval-sts sts-dev.csv -o minilm-ese\n\n"
    "  espresso-export train minilm --ese --data snli.tsv.gz --loss infonce --compression-dim 64 -o minilm-ese-nli\n\n"
    "  espresso-export train qwen2-folder/ --ese --bidirectional all --lora --lr 2e-4 --data nli.jsonl -o qwen-ese\n\n"
    "  espresso-export train minilm --data sts-train.csv -o minilm-ft    (no --ese: plain fine-tuning, the control)\n\n"
    "  torchrun --nproc_per_node 4 -m espresso_export train ... --device cuda    (4 GPUs, data-parallel; "
    "--batch-size stays the global batch)",
)
def train(
    model: Annotated[str, typer.Argument(help="Model folder, Hub id, or alias (see `espresso-export models`).")],
    output: OutputOpt,
    data: Annotated[Path, typer.Option("--data", help="Training data: scored pairs (STS-B, csv/jsonl with a score), "
                                       "NLI (premise, hypothesis, label), or anchor, positive (and negative) in jsonl/csv/tsv.")],
    ese: Annotated[bool, typer.Option("--ese/--no-ese", help="Train every layer's first-k dims (ESE). Without it: "
                                      "plain fine-tuning of the last layer.")] = False,
    loss: Annotated[str, typer.Option("--loss", help="angle (AnglE: cosine + in-batch negatives + angle), cosent, "
                                      "or infonce.")] = "angle",
    compression_dim: Annotated[int, typer.Option("--compression-dim", "-k", min=1, help="k: the leading dims "
                                                 "ESE trains to carry the meaning.")] = 128,
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, help="Weight of learn-to-express.")] = 1.0,
    beta: Annotated[float, typer.Option("--beta", min=0.0, help="Weight of learn-to-compress.")] = 1.0,
    layer_weights: Annotated[str, typer.Option("--layer-weights", help="log (1/(1+ln i)), uniform, or learned.")] = "log",
    layers_from: Annotated[int, typer.Option("--layers-from", min=1, help="First layer (1-based) ESE trains.")] = 1,
    positive_threshold: Annotated[Optional[float], typer.Option("--positive-threshold", help="Scored pairs at or "
                                  "above this score are positives for in-batch negatives (default: 80% of the "
                                  "score range, 4.0 on STS-B).")] = None,
    data_limit: Annotated[Optional[int], typer.Option("--data-limit", min=2, help="Use the first N examples.")] = None,
    bidirectional: BidirectionalOpt = None,
    lora: Annotated[bool, typer.Option("--lora", help="Train LoRA adapters only (needs the `lora` extra); merged "
                                       "into the weights at the end.")] = False,
    lora_r: Annotated[int, typer.Option("--lora-r", min=1, help="LoRA rank (alpha = rank).")] = 32,
    epochs: EpochsOpt = 1,
    batch_size: BatchSizeOpt = 32,
    lr: LrOpt = 2e-5,
    warmup: WarmupOpt = 0.1,
    max_steps: MaxStepsOpt = None,
    max_seq_len: MaxSeqLenOpt = None,
    eval_sts: EvalStsOpt = None,
    eval_limit: EvalLimitOpt = None,
    seed: SeedOpt = 0,
    resume: ResumeOpt = False,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
    checkpoint_every: CheckpointEveryOpt = 200,
    run_dir: RunDirOpt = None,
    keep_checkpoints: KeepCheckpointsOpt = False,
    pooling: PoolingOpt = None,
    overwrite: OverwriteOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Fine-tune a model so its first layers and first k dims carry the meaning (ESE), or plainly."""
    from espresso_export.core.errors import ValidationError
    from espresso_export.training.ese import EseConfig, LayerWeighting, SentenceLoss
    from espresso_export.training.distributed import current
    from espresso_export.training.esetrain import train_ese
    from espresso_export.training.loop import TrainConfig
    from espresso_export.cli.render import print_hints, print_json, print_table

    try:
        objective = EseConfig(loss=SentenceLoss(loss), compression_dim=compression_dim,
                              alpha=alpha if ese else 0.0, beta=beta if ese else 0.0,
                              layer_weights=LayerWeighting(layer_weights), layers_from=layers_from)
    except ValueError as e:
        raise ValidationError(f"{e}; --loss takes angle, cosent or infonce, --layer-weights log, uniform or learned") from e
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    lora_settings = None
    if lora:
        from espresso_export.model.lora import LoraSettings

        lora_settings = LoraSettings(r=lora_r, alpha=lora_r)
    training = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup, max_steps=max_steps,
                           seed=seed, checkpoint_every=checkpoint_every, device=device)
    result = train_ese(
        model, data, output, objective=objective, training=training, eval_sts=eval_sts, eval_limit=eval_limit,
        data_limit=data_limit, positive_threshold=positive_threshold, max_seq_len=max_seq_len, attention=bidirectional,
        lora=lora_settings, pooling=pooling, resume=resume, run_dir=run_dir, keep_checkpoints=keep_checkpoints,
        overwrite=overwrite, trust_remote_code=trust_remote_code, progress=not json_out,
    )
    if not current().main:  # under torchrun, rank 0 reports
        return
    print_hints(result.hints)
    if json_out:
        print_json(result.to_dict())
        return
    o, t = result.objective, result.train
    rows = [
        ("source", result.source),
        ("objective", (f"ESE: {o['loss']}, k={o['compression_dim']}, alpha={o['alpha']}, beta={o['beta']}, "
                       f"{o['layer_weights']} layer weights from layer {o['layers_from']}") if result.ese
         else f"plain fine-tuning of the last layer ({o['loss']})"),
        ("data", f"{result.data['examples']} {result.data['kind']} from {result.data['name']}"),
        ("training", f"{t['steps']} steps ({t['epochs']} epochs), {t['items_per_second']:.0f} examples/s"
                     + (f", final loss {t['final_loss']:.4g}" if t["final_loss"] is not None else "")),
    ]
    if result.attention:
        rows.append(("attention", f"bidirectional: {result.attention['mode']} {result.attention['bidirectional_layers']}"))
    if result.lora:
        rows.append(("LoRA", f"r={result.lora['r']}, merged"))
    if result.eval:
        e = result.eval
        rows.append(("eval (STS Spearman)", f"{e['initial']:.2f} before -> best {e['best']:.2f} at step {e['best_step']}"))
    rows += [("output", result.output), ("time", f"{result.seconds:.1f} s")]
    print_table("train", rows)
