"""``distill()`` and :func:`run` (the phases in order, on a :class:`~.args.DistillArgs`), and the training phase.

corpus (:mod:`.corpus`) -> teacher targets (:mod:`.targets`) -> student and projection (:mod:`.student`)
-> training (:mod:`.tasks`, here) -> write (:mod:`.write`). The arguments travel as one
:class:`~.args.DistillArgs`; each phase returns a small object the next ones read.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from espresso_export.core.settings import as_kwargs, resolve as resolve_settings
from espresso_export.data import sentences_sha256
from espresso_export.distilling.args import DistillArgs, resolve
from espresso_export.model.embed import encode
from espresso_export.distilling.inputs import CorpusSplit, load_corpus
from espresso_export.distilling.lengths import resolve_length
from espresso_export.distilling.selection import Selection
from espresso_export.distilling.student import Models, build_projection, load_models
from espresso_export.distilling.targets import TeacherTargets, teacher_targets
from espresso_export.distilling.tasks import HealTask, PairHealTask
from espresso_export.distilling.write import DistillResult, Trained, write_result
from espresso_export.training.loop import TrainConfig, Trainer, prepare_run
from espresso_export.training.schedule import amp_dtype, autocast
from espresso_export.distilling.distill_settings import DistillSettings


def cpu_precision(a: DistillArgs):
    """The autocast dtype of the passes that run on the CPU (the teacher pass, the student's PCA sample): the
    training's own (``--amp``) when training runs on the CPU too, else full precision."""
    import torch

    return amp_dtype(a.amp, torch.device("cpu")) if (a.device or "cpu").lower() == "cpu" else None


def _identity(a: DistillArgs, corpus: CorpusSplit, models: Models, selection: Selection) -> dict:
    """What makes two runs the same run: a resumed run must match it."""
    sentences, n_held = corpus.sentences, len(corpus.held)
    identity = {
        "teacher_sha256": models.teacher_info["weights_sha256"], "student_sha256": models.student_sha,
        "layers": models.keep, "dim": a.dim, "corpus_sha256": sentences_sha256(sentences),
        "pca_samples": min(a.pca_samples, len(sentences)), "loss": a.loss.value,
        "layer_targets": sorted(models.layer_map.items()), "layer_weight": a.layer_weight,
        "max_seq_len": a.max_seq_len, "dropout": a.dropout, "projection_init": a.projection_init.value,
        "freeze_embeddings": a.freeze_embeddings,
        "heldout": n_held, **selection.identity(),
    }
    if a.loss.in_batch:
        identity["rank_temperature"] = a.rank_temperature
    if corpus.pair_rows is not None:
        identity["pairs"] = hashlib.sha256(corpus.pair_rows.tobytes()).hexdigest()[:20]
    return identity


def _task(a: DistillArgs, corpus: CorpusSplit, models: Models, targets: TeacherTargets, projection,
          selection: Selection) -> HealTask:
    kwargs = dict(loss=a.loss, layer_map=models.layer_map, layer_weight=a.layer_weight, max_seq_len=a.max_seq_len,
                  rank_temperature=a.rank_temperature,
                  dropout=a.dropout, selection=selection, identity=_identity(a, corpus, models, selection),
                  items=corpus.items)
    if corpus.pair_rows is not None:
        return PairHealTask(models.student, projection, corpus.sentences, targets, pairs=corpus.pair_rows, **kwargs)
    return HealTask(models.student, projection, corpus.sentences, targets, **kwargs)


def _train(a: DistillArgs, corpus: CorpusSplit, models: Models, task: HealTask, run_dir: Path, dist) -> Trained:
    """Train ``task``; the held-out relative MSE is measured (on rank 0) before and after."""
    held = corpus.held
    mse_before = task.mse(held) if len(held) and dist.main else None
    batch_size = max(1, a.batch_size // 2) if corpus.pair_rows is not None else a.batch_size  # pairs per batch
    config = TrainConfig(epochs=a.epochs, batch_size=batch_size, lr=models.lr, weight_decay=a.weight_decay,
                         warmup=a.warmup, max_grad_norm=a.max_grad_norm, seed=a.seed, bucket=a.bucket,
                         max_steps=a.max_steps, amp=a.amp, checkpoint_every=a.checkpoint_every, device=a.device)
    trainer = Trainer(task, config, run_dir)
    label = ("healing" if models.from_teacher else "distilling") if a.progress else None
    result = trainer.run(resume=a.resume, progress=label, on_step=a.on_step)
    task.projection.cpu()
    models.student.model.cpu()
    mse_after = task.mse(held) if len(held) and dist.main else None
    heldout = {"sentences": len(held), "relative_mse_before": mse_before, "relative_mse_after": mse_after}
    return Trained(task=task, identity=task.config(), trainer=trainer, config=config, result=result,
                   heldout=heldout, processes=dist.world)


def distill(
    teacher: str | os.PathLike,
    output: str | os.PathLike | None,
    settings: DistillSettings | None = None,
    *,
    resume: bool = False,
    run_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    on_step=None,
    **kwargs,
) -> DistillResult:
    """Distil ``teacher`` into ``student`` (or into the teacher cut to ``student_layers``) at ``dim`` dims.

    ``settings`` is a :class:`~espresso_export.distilling.distill_settings.DistillSettings`; its fields are also accepted as
    keyword arguments (``distill("minilm", "out", student_layers=3, dim=128, corpus=["builtin"])``).

    ``corpus``: sentence specs (:func:`~espresso_export.data.read_corpus`). ``pairs``: pair files
    (:func:`~espresso_export.data.read_sentence_pairs`) for the pair losses; their sentences join the
    corpus, and ``corpus`` may then be omitted. ``loss`` defaults to ``pair`` with pairs, else ``mse``.
    With a pair loss, a batch of ``batch_size`` sentences holds ``batch_size // 2`` pairs.

    Writes a sentence-transformers folder to ``output`` (Pooling, Normalize, Dense
    projection, Normalize) with provenance; ``output=None`` writes nothing and
    leaves the trained task in ``result.task``. Raises
    :class:`~espresso_export.training.TrainingInterrupted` on Ctrl-C or SIGTERM after saving
    a checkpoint that ``resume=True`` continues exactly (or, in the teacher pass, keeping its finished chunks
    for the next call).
    """
    s = resolve_settings(DistillSettings, settings, kwargs, call="distill")
    return run(DistillArgs(teacher=teacher, output=output, resume=resume, run_dir=run_dir, overwrite=overwrite,
                           progress=progress, on_step=on_step, **as_kwargs(s)))


def run(args: DistillArgs) -> DistillResult:
    """:func:`distill` on its arguments as one object: the phases in order."""
    start = time.perf_counter()
    a, dist = resolve(args)
    run_dir = prepare_run(a.output, a.run_dir, resume=a.resume, overwrite=a.overwrite,
                          inputs=[a.teacher, a.student, a.corpus, a.pairs, a.eval_sts, a.cache_dir])
    data = load_corpus(a)
    models = load_models(a, len(data.sentences))
    a, lengths = resolve_length(a, models.student, data.sentences)
    if lengths is not None:
        data.counts["lengths"] = lengths
    targets = teacher_targets(models.teacher, data.sentences, dim=a.dim, pca_samples=a.pca_samples, seed=a.seed,
                              layers=sorted(set(models.layer_map.values())), cache_dir=a.cache_dir,
                              teacher_sha=models.teacher_info["weights_sha256"], batch_size=a.batch_size,
                              progress=a.progress, precision=cpu_precision(a))
    selection = Selection(sts=data.eval_pairs, retrieval=data.eval_retrieval)
    if dist.main:  # rank 0 evaluates (the trainer's rule): only it needs the teacher's scores
        selection.measure_teacher(lambda texts: encode(models.teacher, texts, batch_size=a.batch_size))
    models.teacher = None  # frees the teacher before the student trains
    with autocast(cpu_precision(a)):
        projection = build_projection(a, models.student, data, targets.targets)
    if a.freeze_embeddings:  # the loop optimises only parameters that require a gradient
        models.student.model.get_input_embeddings().weight.requires_grad_(False)
    task = _task(a, data, models, targets, projection, selection)
    trained = _train(a, data, models, task, run_dir, dist)
    return write_result(a, data, models, targets, trained, run_dir, start)
