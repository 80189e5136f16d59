"""``espresso-export distill``: its options are derived from
:class:`~espresso_export.distilling.distill_settings.DistillSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OutputOpt, OverwriteOpt, ResumeOpt, RunDirOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.distilling.distill_settings import DistillSettings


def _distill(settings: DistillSettings, *, teacher: str, output: Path, resume: bool, run_dir: Path | None,
             overwrite: bool, json_out: bool) -> None:
    """Distil a teacher into a small student with a d-dim projection (HPD), or heal a cut teacher."""
    from espresso_export.cli.render import finish_table, report_json
    from espresso_export.distilling import StaticResult, distill as run_distill
    from espresso_export.training.distributed import current
    from espresso_export.training.task import LOSS_LABEL

    result = run_distill(teacher, output, settings, resume=resume, run_dir=run_dir, overwrite=overwrite,
                         progress=not json_out)
    if report_json(result, json_out, main=current().main):
        return
    if isinstance(result, StaticResult):
        _static_table(result)
        return
    c, t = result.corpus, result.train
    held = f" + {c['heldout_sentences']} held out" if c.get("heldout_sentences") else ""
    corpus_row = (f"{c['training_sentences']} sentences{held} ({c['read']} read, {c['empty_dropped']} empty and "
                  f"{c['duplicates_dropped']} duplicates dropped"
                  + (f", capped to {c['capped_to']} ({c['sample']})" if "capped_to" in c else "")
                  + (f", {c['augmented']} augmented" if c.get("augmented") else "") + ")") if "read" in c else \
        f"{c['training_sentences']} sentences{held}"
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
                     f"{result.sentences_per_second:.0f} sentences/s in {result.precision}, "
                     f"{LOSS_LABEL} {t['epoch_mean_loss']:.4g}" if t["epoch_mean_loss"] is not None
                     else f"{t['steps']} steps"),
    ]
    mix, lengths = c.get("mix"), c.get("lengths")
    if mix:
        rows.append(("mix", ", ".join(f"{m['spec']} {m['sentences']} ({100 * m['share']:g}%)" for m in mix)))
    if lengths:
        cut = f"{100 * lengths['truncated_share']:.1f}% of the texts cut"
        rows.append(("training length", f"{lengths['chosen']} tokens ({lengths['rule']}; {cut})"))
    if result.eval:
        e = result.eval
        # the score's name goes with the values: as the row's label it took 68 of 80 columns and squeezed the rest
        rows.append(("eval", f"{e['initial']:.2f} before -> best {e['best']:.2f} at step {e['best_step']} "
                             f"({e.get('score', 'STS Spearman')})"))
    h = result.heldout
    if h["sentences"]:
        rows.append(("held-out relative MSE", f"{h['relative_mse_before']:.4f} -> {h['relative_mse_after']:.4f} "
                                              f"on {h['sentences']} sentences"))
    rows.append(("parameters", f"{result.params / 1e6:.1f}M"))
    finish_table("distill", rows, result)


def _static_table(result) -> None:
    """The summary of ``distill --student static``."""
    from espresso_export.cli.render import finish_table

    v, t, h = result.vocabulary, result.train, result.heldout
    rows = [("teacher", result.teacher),
            ("student", f"static (model2vec), {v['tokens']} tokens"
                        + (f", {v['corpus_words']} corpus words added" if v["corpus_words"] else "")),
            ("embedding", f"{result.dim}-d" + (f" (PCA of the healed vectors keeps "
                                               f"{100 * result.pca_explained_variance:.1f}% of the variance)"
                                               if result.pca_explained_variance is not None else ""))]
    if result.healed:
        rows += [("corpus", f"{result.corpus.get('training_sentences')} texts"
                            + (f" + {h['texts']} held out" if h.get("texts") else "")),
                 ("teacher vectors", ("reused from the cache" if result.targets_cached else "computed")
                                     + f" in {result.teacher_seconds:.1f} s"),
                 ("distillation", f"{result.distill_seconds:.1f} s (model2vec)"),
                 ("training", f"{t['steps']} steps ({t['epochs']} epochs), {t['items_per_second']:.0f} texts/s, "
                              f"cosine loss {t['epoch_mean_loss']:.4g}" if t["epoch_mean_loss"] is not None
                  else f"{t['steps']} steps")]
        if h.get("texts"):
            rows.append(("held-out cosine", f"{h['mean_cosine_before']:.3f} -> {h['mean_cosine_after']:.3f} "
                                            f"to the teacher on {h['texts']} texts"))
    else:
        rows.append(("distillation", f"{result.distill_seconds:.1f} s (model2vec, not healed: no --corpus)"))
    rows.append(("parameters", f"{result.params:,} (the table)"))
    finish_table("distill", rows, result)


distill = app.command(
    name="distill",
    epilog="Examples:\n\n"
    "  espresso-export distill --teacher minilm --student-layers 3 --dim 128 --corpus sentences.txt "
    "--eval-sts sts-dev.csv -o minilm-L3-healed\n\n"
    "  espresso-export distill --teacher mpnet --student minilm --dim 128 --corpus a.txt --corpus b.jsonl "
    "--corpus-field text --epochs 2 -o hpd-minilm-128\n\n"
    "  espresso-export distill --teacher mpnet --student minilm --dim 128 --corpus a.txt --pairs sts-train.csv "
    "-o hpd-minilm-128    (pair loss: best for an already trained student)\n\n"
    "  espresso-export distill --teacher minilm --student static --dim 256 --corpus docs.jsonl -o minilm-static    "
    "(a static model, healed on your documents)\n\n"
    "  espresso-export distill ... --resume    (continue an interrupted run exactly)\n\n"
    "  torchrun --nproc_per_node 4 -m espresso_export distill ... --device cuda    (4 GPUs, data-parallel; "
    "--batch-size stays the global batch)",
)(settings_command(DistillSettings, [
    param("output", OutputOpt),
    param("teacher", Annotated[str, typer.Option("--teacher", "-t", help="Teacher: folder, Hub id or alias "
                                                 "(`espresso-export models`).")]),
    param("resume", ResumeOpt, False), param("run_dir", RunDirOpt, None), param("overwrite", OverwriteOpt, False),
    param("json_out", JsonOpt, False),
], _distill, required=("dim",)))
