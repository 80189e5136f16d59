"""``espresso-export distill``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.core.types import CorpusSample, Select
from espresso_export.cli.app import app
from espresso_export.cli.options import (
    CheckpointEveryOpt, CorpusColumnOpt, CorpusFieldOpt, DeviceOpt, EpochsOpt, EvalLimitOpt, EvalStsOpt, JsonOpt,
    KeepCheckpointsOpt, MaxStepsOpt, OutputOpt, OverwriteOpt, PoolingOpt, ResumeOpt, RunDirOpt, SeedOpt, SelectOpt,
    ThreadsOpt, TrustRemoteCodeOpt, WarmupOpt,
)


def _opt(*names: str, help: str, **kw):
    return typer.Option(*names, help=help, **kw)


@app.command(
    epilog="Examples:\n\n"
    "  espresso-export distill --teacher minilm --student-layers 3 --dim 128 --corpus sentences.txt "
    "--eval-sts sts-dev.csv -o minilm-L3-healed\n\n"
    "  espresso-export distill --teacher mpnet --student minilm --dim 128 --corpus a.txt --corpus b.jsonl "
    "--corpus-field text --epochs 2 -o hpd-minilm-128\n\n"
    "  espresso-export distill --teacher mpnet --student minilm --dim 128 --corpus a.txt --pairs sts-train.csv "
    "-o hpd-minilm-128    (pair loss: best for an already trained student)\n\n"
    "  espresso-export distill ... --resume    (continue an interrupted run exactly)\n\n"
    "  torchrun --nproc_per_node 4 -m espresso_export distill ... --device cuda    (4 GPUs, data-parallel; "
    "--batch-size stays the global batch)",
)
def distill(
    output: OutputOpt,
    teacher: Annotated[str, _opt("--teacher", "-t", help="Teacher: folder, Hub id or alias (`espresso-export models`).")],
    dim: Annotated[int, _opt("--dim", "-d", help="Embedding width d of the student (PCA of the teacher).")],
    corpus: Annotated[list[str], _opt("--corpus", "-c", help="Training sentences; repeat for several: .txt, .jsonl, "
                                      ".csv/.tsv (a column), STS-B files (both sentences), 'builtin', or hf://owner/name "
                                      "(a Hub dataset, online). Optional with --pairs.")] = [],  # noqa: B006
    pairs: Annotated[list[Path], _opt("--pairs", help="Related sentence pairs for the pair loss (the student's "
                                      "cosine of each pair learns the teacher's); repeat for several: STS, "
                                      "pair/triplet or NLI files, labels unused. Their sentences join the corpus.")] = [],  # noqa: B006
    student: Annotated[Optional[str], _opt("--student", "-s", help="Student checkpoint. Omit it with --student-layers "
                                           "to heal the teacher cut to L layers.")] = None,
    student_layers: Annotated[Optional[str], _opt("--student-layers", "-l", help="Cut the student (default: the "
                                                  "teacher) to L layers (4) or to these 0-based layers (0,2,4).")] = None,
    select: SelectOpt = Select.AUTO,
    corpus_field: CorpusFieldOpt = None,
    corpus_column: CorpusColumnOpt = None,
    max_sentences: Annotated[Optional[int], _opt("--max-sentences", min=1, help="Use at most this many corpus "
                                                 "sentences (see --sample).")] = None,
    sample: Annotated[CorpusSample, _opt("--sample", help="How --max-sentences picks: random (a seeded subset of "
                                         "all sources) or in-order (the --corpus sources in the order given, each "
                                         "whole while it fits: put your in-domain file first).")] = CorpusSample.RANDOM,
    augment: Annotated[list[str], _opt("--augment", help="Add perturbed copies (offline): word-dropout, span-swap, "
                                       "synonym; repeat or comma-separate. Off by default.")] = [],  # noqa: B006
    augment_copies: Annotated[int, _opt("--augment-copies", min=1, help="Copies per sentence.")] = 1,
    epochs: EpochsOpt = 1,
    batch_size: Annotated[int, _opt("--batch-size", min=1, help="Sentences per batch (with --pairs: half "
                                    "as many pairs).")] = 64,
    lr: Annotated[Optional[float], _opt("--lr", min=0.0, help="Peak learning rate (AdamW). Default: 5e-5 with "
                                        "--pairs, else 1e-3 when healing a cut teacher, 1e-4 for another student "
                                        "(HPD).")] = None,
    warmup: WarmupOpt = 0.1,
    weight_decay: Annotated[float, _opt("--weight-decay", min=0.0, help="AdamW weight decay.")] = 0.01,
    max_grad_norm: Annotated[float, _opt("--max-grad-norm", min=0.0, help="Gradient clipping norm.")] = 1.0,
    max_seq_len: Annotated[int, _opt("--max-seq-len", min=8, help="Truncate training sentences to this many "
                                     "tokens (the output keeps the student's own limit).")] = 128,
    max_steps: MaxStepsOpt = None,
    pca_samples: Annotated[int, _opt("--pca-samples", min=1, help="Teacher embeddings the PCA is fitted on.")] = 20000,
    loss: Annotated[Optional[str], _opt("--loss", help="mse (HPD) or cosine+mse; with --pairs: pair or pair+mse. "
                                        "Default: pair with --pairs, else mse.")] = None,
    layer_targets: Annotated[Optional[bool], _opt("--layer-targets/--no-layer-targets", help="Also match each "
                             "student layer to its teacher layer (a cut teacher only; off by default).")] = None,
    layer_weight: Annotated[float, _opt("--layer-weight", min=0.0, help="Weight of the layer targets.")] = 1.0,
    projection_init: Annotated[str, _opt("--projection-init", help="pca-aligned (student PCA rotated onto the "
                                         "teacher's axes) or pca.")] = "pca-aligned",
    dropout: Annotated[bool, _opt("--dropout/--no-dropout", help="Keep the student's dropout while training.")] = False,
    bucket: Annotated[bool, _opt("--bucket/--no-bucket", help="Length-bucketed batches (less padding).")] = True,
    eval_sts: EvalStsOpt = None,
    eval_limit: EvalLimitOpt = None,
    heldout: Annotated[int, _opt("--heldout", min=0, help="Corpus sentences kept out of training to report the "
                                 "relative MSE before and after.")] = 256,
    seed: SeedOpt = 0,
    resume: ResumeOpt = False,
    device: DeviceOpt = "cpu",
    amp: Annotated[str, _opt("--amp", help="Mixed precision: auto (on for CUDA), off, bf16, fp16.")] = "auto",
    threads: ThreadsOpt = None,
    checkpoint_every: CheckpointEveryOpt = 200,
    run_dir: RunDirOpt = None,
    keep_checkpoints: KeepCheckpointsOpt = False,
    cache_dir: Annotated[Optional[Path], _opt("--cache-dir", help="Teacher target cache (default: "
                                              "$ESPRESSO_CACHE or ~/.cache/espresso-export).")] = None,
    pooling: PoolingOpt = None,
    overwrite: OverwriteOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Distil a teacher into a small student with a d-dim projection (HPD), or heal a cut teacher."""
    from espresso_export.training.distill import Loss, ProjectionInit
    from espresso_export.training.distill import distill as run_distill
    from espresso_export.training.distributed import current
    from espresso_export.core.errors import ValidationError
    from espresso_export.shrinking.slicing import parse_layers
    from espresso_export.cli.render import print_hints, print_json, print_table

    try:
        loss_kind, init = (Loss(loss) if loss is not None else None), ProjectionInit(projection_init)
    except ValueError as e:
        raise ValidationError(f"{e}; --loss takes {', '.join(x.value for x in Loss)}, --projection-init "
                              "pca-aligned or pca") from e
    result = run_distill(
        teacher, output, dim=dim, corpus=corpus or None, pairs=pairs or None, student=student,
        student_layers=parse_layers(student_layers) if student_layers is not None else None, select=select,
        corpus_field=corpus_field, corpus_column=corpus_column, max_sentences=max_sentences, sample=sample,
        augment=augment,
        augment_copies=augment_copies, pca_samples=pca_samples, epochs=epochs, batch_size=batch_size, lr=lr,
        warmup=warmup, weight_decay=weight_decay, max_grad_norm=max_grad_norm, max_seq_len=max_seq_len,
        max_steps=max_steps, loss=loss_kind, layer_targets=layer_targets, layer_weight=layer_weight,
        projection_init=init, dropout=dropout, bucket=bucket, eval_sts=eval_sts, eval_limit=eval_limit, heldout=heldout, seed=seed,
        resume=resume, device=device, amp=amp, threads=threads, checkpoint_every=checkpoint_every, run_dir=run_dir,
        keep_checkpoints=keep_checkpoints, cache_dir=cache_dir, pooling=pooling, overwrite=overwrite,
        trust_remote_code=trust_remote_code, progress=not json_out,
    )
    if not current().main:  # under torchrun, rank 0 reports
        return
    print_hints(result.hints)
    if json_out:
        print_json(result.to_dict())
        return
    c, t = result.corpus, result.train
    corpus_row = (f"{c['training_sentences']} sentences ({c['read']} read, {c['empty_dropped']} empty and "
                  f"{c['duplicates_dropped']} duplicates dropped"
                  + (f", capped to {c['capped_to']} ({c['sample']})" if "capped_to" in c else "")
                  + (f", {c['augmented']} augmented" if c.get("augmented") else "") + ")") if "read" in c else \
        f"{c['training_sentences']} sentences"
    if "pairs" in c:
        corpus_row += (f"; {c['pairs']['pairs']} distinct pairs ({c['pair_sentences_added']} sentences added), "
                       f"{c['training_pairs']} trained on")
    rows = [
        ("teacher", result.teacher),
        ("student", result.student + (f", layers {result.layers}" if result.layers is not None else "")),
        ("embedding", f"{result.dim}-d (teacher PCA keeps {100 * result.pca_explained_variance:.1f}% of the variance)"),
        ("corpus", corpus_row),
        ("teacher targets", ("reused from the cache" if result.targets_cached else "computed")
                            + f" in {result.teacher_seconds:.1f} s"),
        ("training", f"{t['steps']} steps ({t['epochs']} epochs), "
                     f"{result.sentences_per_second:.0f} sentences/s, "
                     f"final loss {t['final_loss']:.4g}" if t["final_loss"] is not None else f"{t['steps']} steps"),
    ]
    if result.eval:
        e = result.eval
        rows.append(("eval (STS Spearman)", f"{e['initial']:.2f} before -> best {e['best']:.2f} at step {e['best_step']}"))
    h = result.heldout
    if h["sentences"]:
        rows.append(("held-out relative MSE", f"{h['relative_mse_before']:.4f} -> {h['relative_mse_after']:.4f} "
                                              f"on {h['sentences']} sentences"))
    rows += [("parameters", f"{result.params / 1e6:.1f}M"), ("output", result.output), ("time", f"{result.seconds:.1f} s")]
    print_table("distill", rows)
