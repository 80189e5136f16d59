"""``distill()`` and :func:`run`: the phases in order on a :class:`~.plan.DistillPlan`, and the training phase.

corpus (:mod:`.inputs`) -> teacher targets (:mod:`.targets`) -> student and projection (:mod:`.student`)
-> training (:mod:`.tasks`, here) -> write (:mod:`.write`); each phase returns a small object the next ones read.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from espresso_export.core.settings import as_kwargs, resolve as resolve_settings
from espresso_export.data import sentences_sha256
from espresso_export.distilling.plan import DistillPlan, resolve
from espresso_export.model.embed import encode
from espresso_export.model.static import STATIC_STUDENT
from espresso_export.distilling.inputs import CorpusSplit, load_corpus
from espresso_export.distilling.lengths import resolve_length
from espresso_export.distilling.selection import Selection
from espresso_export.distilling.student import Models, build_projection, load_models
from espresso_export.distilling.targets import TeacherTargets, teacher_targets
from espresso_export.distilling.tasks import HealTask, PairHealTask
from espresso_export.distilling.write import DistillResult, Trained, write_result
from espresso_export.training import distributed
from espresso_export.training.loop import LoopSettings, Trainer, TrainingInterrupted, prepare_run
from espresso_export.training.run_files import mark_stopped_early
from espresso_export.training.schedule import amp_dtype, autocast, resolve_device
from espresso_export.distilling.distill_settings import DistillSettings


def pass_precision(plan: DistillPlan, device):
    """The autocast dtype of the passes before training (the teacher pass, the student's PCA sample): the
    training's own (``--amp``) on the device they run on, the training's."""
    return amp_dtype(plan.amp, device)


def _identity(plan: DistillPlan, corpus: CorpusSplit, models: Models, selection: Selection) -> dict:
    """What makes two runs the same run: a resumed run must match it."""
    sentences, n_held = corpus.sentences, len(corpus.held)
    identity = {
        "teacher_sha256": models.teacher_info["weights_sha256"], "student_sha256": models.student_sha,
        "layers": models.keep, "dim": plan.dim, "corpus_sha256": sentences_sha256(sentences),
        "pca_samples": min(plan.pca_samples, len(sentences)), "loss": plan.loss.value,
        "layer_targets": sorted(models.layer_map.items()), "layer_weight": plan.layer_weight,
        "max_seq_len": plan.max_seq_len, "dropout": plan.dropout, "projection_init": plan.projection_init.value,
        "freeze_embeddings": plan.freeze_embeddings,
        "heldout": n_held, **selection.identity(),
    }
    if plan.loss.in_batch:
        identity["rank_temperature"] = plan.rank_temperature
    if corpus.pair_rows is not None:
        identity["pairs"] = hashlib.sha256(corpus.pair_rows.tobytes()).hexdigest()[:20]
    return identity


def _task(plan: DistillPlan, corpus: CorpusSplit, models: Models, targets: TeacherTargets, projection,
          selection: Selection) -> HealTask:
    kwargs = dict(loss=plan.loss, layer_map=models.layer_map, layer_weight=plan.layer_weight,
                  max_seq_len=plan.max_seq_len, rank_temperature=plan.rank_temperature, dropout=plan.dropout, selection=selection, identity=_identity(plan, corpus, models, selection),
                  items=corpus.items)
    if corpus.pair_rows is not None:
        return PairHealTask(models.student, projection, corpus.sentences, targets, pairs=corpus.pair_rows, **kwargs)
    return HealTask(models.student, projection, corpus.sentences, targets, **kwargs)


def _train(plan: DistillPlan, corpus: CorpusSplit, models: Models, task: HealTask, run_dir: Path, dist) -> Trained:
    """Train ``task``; the held-out relative MSE is measured (on rank 0) before and after."""
    held = corpus.held
    mse_before = task.mse(held) if len(held) and dist.main else None
    batch_size = max(1, plan.batch_size // 2) if corpus.pair_rows is not None else plan.batch_size  # pairs per batch
    config = LoopSettings(epochs=plan.epochs, batch_size=batch_size, lr=models.lr, weight_decay=plan.weight_decay,
                          warmup=plan.warmup, max_grad_norm=plan.max_grad_norm, seed=plan.seed, bucket=plan.bucket,
                          max_steps=plan.max_steps, amp=plan.amp, checkpoint_every=plan.checkpoint_every,
                          device=plan.device)
    trainer = Trainer(task, config, run_dir)
    label = ("healing" if models.from_teacher else "distilling") if plan.progress else None
    result = trainer.run(resume=plan.resume, progress=label, on_step=plan.on_step)
    mse_after = task.mse(held) if len(held) and dist.main else None  # on the training device
    task.projection.cpu()
    models.student.model.cpu()
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

    ``settings`` is a :class:`~espresso_export.distilling.distill_settings.DistillSettings`; its fields are also
    accepted as keyword arguments (``distill("minilm", "out", student_layers=3, dim=128, corpus=["builtin"])``).
    Writes a sentence-transformers folder to ``output`` with provenance; ``output=None`` writes nothing and leaves
    the trained task in ``result.task``. ``student="static"``: a static model instead
    (:func:`espresso_export.distilling.static.build_static`, which returns a
    :class:`~espresso_export.distilling.static.StaticResult`). Ctrl-C or SIGTERM raises
    :class:`~espresso_export.training.interrupt.TrainingInterrupted` after saving what ``resume=True`` continues.
    """
    s = resolve_settings(DistillSettings, settings, kwargs, call="distill")
    if s.student == STATIC_STUDENT:  # a static model of the teacher (model2vec), healed on the corpus
        from espresso_export.distilling.static import build_static

        return build_static(teacher, output, s, resume=resume, run_dir=run_dir, overwrite=overwrite,
                            progress=progress)
    return run(DistillPlan(teacher=teacher, output=output, resume=resume, run_dir=run_dir, overwrite=overwrite,
                           progress=progress, on_step=on_step, **as_kwargs(s)))


def run(plan: DistillPlan) -> DistillResult:
    """:func:`distill` on its plan: the phases in order, the run folder locked throughout."""
    start = time.perf_counter()
    plan, dist = resolve(plan)
    with prepare_run(plan.output, plan.run_dir, resume=plan.resume, overwrite=plan.overwrite,
                     inputs=[plan.teacher, plan.student, plan.corpus, plan.pairs, plan.eval_sts,
                             plan.cache_dir]) as run_dir:
        return _phases(plan, dist, run_dir, start)


def _teacher_phase(plan: DistillPlan, data: CorpusSplit, models: Models, run_dir: Path, device) -> TeacherTargets:
    """The teacher pass on the training device; a stop in it is recorded in the run folder, so that ``--resume``
    continues it (its finished chunks are kept in the teacher cache)."""
    models.teacher.model.to(device)
    try:
        return teacher_targets(models.teacher, data.sentences, dim=plan.dim, pca_samples=plan.pca_samples,
                               seed=plan.seed, layers=sorted(set(models.layer_map.values())),
                               cache_dir=plan.cache_dir, teacher_sha=models.teacher_info["weights_sha256"],
                               batch_size=plan.batch_size, progress=plan.progress,
                               precision=pass_precision(plan, device))
    except TrainingInterrupted:
        if distributed.current().main:
            mark_stopped_early(run_dir, "the teacher pass")
        raise


def _phases(plan: DistillPlan, dist, run_dir: Path, start: float) -> DistillResult:
    device = resolve_device(plan.device)
    prune = _prune_request(plan)  # a bad corpus or keep file fails before the training, not after it
    data = load_corpus(plan)
    models = load_models(plan, len(data.sentences))
    plan, lengths = resolve_length(plan, models.student, data.sentences)
    if lengths is not None:
        data.counts["lengths"] = lengths
    targets = _teacher_phase(plan, data, models, run_dir, device)
    selection = Selection(sts=data.eval_pairs, retrieval=data.eval_retrieval)
    if dist.main:  # rank 0 evaluates (the trainer's rule): only it needs the teacher's scores
        selection.measure_teacher(lambda texts: encode(models.teacher, texts, batch_size=plan.batch_size))
    models.teacher = None  # frees the teacher before the student trains
    models.student.model.to(device)
    with autocast(pass_precision(plan, device), device.type):
        projection = build_projection(plan, models.student, data, targets.targets).to(device)
    if plan.freeze_embeddings:  # the loop optimises only parameters that require a gradient
        models.student.model.get_input_embeddings().weight.requires_grad_(False)
    task = _task(plan, data, models, targets, projection, selection)
    trained = _train(plan, data, models, task, run_dir, dist)
    return write_result(plan, data, models, targets, trained, run_dir, start, prune=prune)


def _prune_request(plan: DistillPlan):
    if not plan.prune_corpus:
        return None
    from espresso_export.shrinking.pruning import PruneRequest

    return PruneRequest.of(plan)
