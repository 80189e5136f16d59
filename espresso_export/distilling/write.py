"""Phase 6 of ``distill``: the provenance, the model folder and the :class:`DistillResult`."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from espresso_export import __version__
from espresso_export.data.files import test_split_warning
from espresso_export.distilling.plan import DistillPlan
from espresso_export.distilling.inputs import CorpusSplit
from espresso_export.distilling.student import Models
from espresso_export.distilling.targets import TeacherTargets
from espresso_export.training.loop import write_trained


@dataclass
class DistillResult:
    output: Path | None
    teacher: str
    student: str
    layers: list[int] | None  # kept layers when the student is a cut
    dim: int
    corpus: dict
    pca_explained_variance: float
    targets_cached: bool
    teacher_seconds: float
    train: dict
    eval: dict | None
    heldout: dict
    params: int
    seconds: float
    run_dir: str | None = None
    precision: str = "fp32"  # what training and the teacher pass computed in: "bf16", "bf16 (avx512_bf16)"
    hints: list[str] = field(default_factory=list)
    task: Any = field(default=None, repr=False, compare=False)

    @property
    def sentences_per_second(self) -> float:
        """Training throughput in sentences (a pair-loss item is two sentences)."""
        return self.train["items_per_second"] * (2 if "training_pairs" in self.corpus else 1)

    def to_dict(self) -> dict:
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "task"}
        d["output"] = str(self.output) if self.output else None
        return d


@dataclass
class Trained:
    """What the training phase hands to the writer."""

    task: Any  # the HealTask, trained, on the CPU
    identity: dict  # the run's identity (resume checks it), also part of the provenance
    trainer: Any
    config: Any  # the TrainConfig
    result: Any  # the TrainResult
    heldout: dict  # held-out relative MSE before and after
    processes: int


def _eval_info(plan: DistillPlan, t: Trained) -> dict | None:
    selection = t.task.selection
    return None if selection is None else selection.info(plan.eval_sts, plan.eval_retrieval, t.result)


def _training_info(plan: DistillPlan, corpus: CorpusSplit, models: Models, t: Trained) -> dict:
    pairs = corpus.pair_rows
    return {"steps": t.result.steps, "epochs": t.result.epochs, "batch_size": plan.batch_size,
            "pairs_per_batch": t.config.batch_size if pairs is not None else None,
            "training_pairs": None if pairs is None else int(len(pairs)), "lr": models.lr,
            "warmup": plan.warmup, "weight_decay": plan.weight_decay, "max_grad_norm": plan.max_grad_norm,
            "max_seq_len": plan.max_seq_len, "loss": plan.loss.value,
            "rank_temperature": plan.rank_temperature if plan.loss.in_batch else None,
            "layer_targets": {str(k): v for k, v in models.layer_map.items()},
            "layer_weight": plan.layer_weight, "projection_init": plan.projection_init.value, "dropout": plan.dropout,
            "freeze_embeddings": plan.freeze_embeddings,
            "augment": list(plan.augment), "seed": plan.seed, "device": plan.device, "processes": t.processes,
            "precision": _precision(t.trainer)}


def _precision(trainer) -> str:
    """What training computed in (``fp32``, ``bf16``, ``fp16``: the trainer's resolved autocast dtype); on the CPU,
    ``bf16 (avx512_bf16)`` names the instructions that ran it."""
    import torch

    from espresso_export.core.cpu import bf16_isa

    name = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[trainer.amp]
    isa = bf16_isa() if trainer.amp is torch.bfloat16 and trainer.device.type == "cpu" else None
    return f"{name} ({isa})" if isa else name


def provenance(plan: DistillPlan, corpus: CorpusSplit, models: Models, targets: TeacherTargets, t: Trained) -> dict:
    """The ``espresso.json`` provenance of the distilled model."""
    s_ckpt, t_source = models.student, models.teacher_info["id"]
    return {
        "espresso_version": __version__,
        "step": "distill",
        "teacher": dict(models.teacher_info),
        "student": {"id": s_ckpt.source if plan.student is not None else f"{t_source} (cut)",
                    "weights_sha256": models.student_sha, "depth": models.source_depth,
                    "hidden_size": s_ckpt.hidden_size, "layers": models.keep},
        "dim": plan.dim, "pooling": s_ckpt.pooling.value,
        "corpus": {"sha256": t.identity["corpus_sha256"], **corpus.counts},
        "pca": {"samples": t.identity["pca_samples"], "explained_variance": round(targets.pca.explained_variance, 6),
                "seed": plan.seed},
        "training": _training_info(plan, corpus, models, t),
        "best_eval": _eval_info(plan, t),
        "heldout": t.heldout,
    }


def write_result(plan: DistillPlan, corpus: CorpusSplit, models: Models, targets: TeacherTargets, t: Trained,
                 run_dir: Path, start: float, *, prune=None) -> DistillResult:
    """Write the model folder (nothing when ``output`` is None) and sum the run up (``start``: its
    ``time.perf_counter()``); ``prune``: a :class:`~espresso_export.shrinking.pruning.PruneRequest` applied to the
    trained student first."""
    s_ckpt, projection = models.student, t.task.projection
    s_ckpt.post = t.task.ckpt_post
    prov = provenance(plan, corpus, models, targets, t)
    if prune is not None:
        from espresso_export.model.vocabulary import PROVENANCE_KEY

        prov[PROVENANCE_KEY] = prune.apply(s_ckpt)[1]
    output = write_trained(s_ckpt, plan.output, prov, overwrite=plan.overwrite, trainer=t.trainer,
                           keep_checkpoints=plan.keep_checkpoints)
    return DistillResult(
        output=output, teacher=models.teacher_info["id"], student=prov["student"]["id"], layers=models.keep,
        dim=plan.dim, corpus=corpus.counts, pca_explained_variance=targets.pca.explained_variance,
        targets_cached=targets.reused, teacher_seconds=round(targets.seconds, 2), train=t.result.to_dict(),
        eval=prov["best_eval"], heldout=t.heldout,
        params=sum(p.numel() for p in s_ckpt.model.parameters()) + projection.weight.numel() + projection.bias.numel(),
        seconds=round(time.perf_counter() - start, 2), run_dir=str(run_dir), precision=prov["training"]["precision"],
        hints=_warnings(plan, t.heldout), task=t.task,
    )


def _warnings(plan: DistillPlan, heldout: dict) -> list[str]:
    """What the summary should not print without comment."""
    out = []
    if heldout.get("sentences") and heldout["relative_mse_after"] > heldout["relative_mse_before"]:
        out.append(f"warning: the held-out relative MSE rose ({heldout['relative_mse_before']:.4f} -> "
                   f"{heldout['relative_mse_after']:.4f}): training made the student worse on texts it did not see "
                   "(too few steps for the warm-up, or a learning rate too high)")
    test = test_split_warning("--eval-sts", plan.eval_sts, "the kept checkpoint is chosen on it, so its scores there "
                              "are optimistic; choose on a dev split, report on test")
    return out + ([test] if test else [])
