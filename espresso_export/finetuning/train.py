"""``train``: fine-tune a checkpoint with the ESE objective (:mod:`espresso_export.finetuning.ese`), or plainly as
a control, on the shared loop (:mod:`espresso_export.training.loop`). The output's ``espresso.json`` records
``ese`` (with ``k``) so that ``shrink`` cuts it at its first layers and first ``k`` dims."""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export import __version__
from espresso_export.training import distributed
from espresso_export.model.bidirectional import describe as describe_attention, switch
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, load
from espresso_export.data import read_sts, sentences_sha256, spread_subset
from espresso_export.data.files import spec_key, test_split_warning
from espresso_export.model.embed import encode_layers
from espresso_export.finetuning.ese import EseData, EseObjective, EseObjectiveSettings, check_loss_fits
from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.core.metrics import sts_spearman
from espresso_export.core.settings import resolve
from espresso_export.training.loop import LoopSettings, Trainer, TrainingTask, prepare_run, write_trained
from espresso_export.core.types import Attention, Pooling
from espresso_export.finetuning.train_settings import TrainSettings


class EseTask(TrainingTask):
    """One ESE (or control) run for :class:`~espresso_export.training.loop.Trainer`."""

    item_unit = "ex"  # training examples (pairs, triplets or scored pairs)

    def __init__(self, ckpt: Checkpoint, objective: EseObjective, data: EseData, *, eval_pairs=None,
                 identity: dict | None = None):
        self.ckpt = ckpt
        self.objective = objective
        self.data = data
        self.eval_pairs = eval_pairs
        self.identity = identity or {}
        self.last_parts: dict[str, float] = {}
        self.last_eval: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self.data)

    def modules(self) -> dict[str, Any]:
        mods = {"model": self.ckpt.model}
        if any(True for _ in self.objective.parameters()):  # learned layer weights
            mods["ese"] = self.objective
        return mods

    def lengths(self) -> list[int]:
        return [len(a) + len(p) for a, p in zip(self.data.anchor, self.data.positive)]

    def config(self) -> dict:
        return self.identity

    def loss(self, batch):
        total, self.last_parts = self.objective.loss(self.data.collate([self.data[i] for i in batch]))
        return total

    def shard_loss(self, batch, part, dist):
        """In-batch negatives, CoSENT rankings and the batch PCA target couple a batch's examples, so a
        rank's slice alone does not give the batch's loss. Each rank forwards its part, gathers the other
        ranks' pooled states (as constants) and computes the loss of the whole global batch: summed over
        the ranks, the gradients are exactly the single-process gradient of that batch."""
        import torch

        whole = self.data.collate([self.data[i] for i in batch])
        mine = self.data.collate([self.data[i] for i in (part or batch[:1])])  # an empty part forwards a dummy
        sizes = [stop - start for start, stop in dist.shard_bounds(len(batch))]
        groups = 3 if whole.negative else 2  # rows: anchors, positives (, negatives)
        joined = {}
        for layer, x in self.objective.pooled(mine).items():
            if not part:
                x = x[:0]
            got = dist.gather_rows(x, [groups * s for s in sizes])
            joined[layer] = torch.cat([g[j * s : (j + 1) * s] for j in range(groups) for g, s in zip(got, sizes)])
        total, self.last_parts = self.objective.compute(joined, whole, param_grad_scale=1.0 / dist.world)
        return total - total.detach() * (1 - 1 / dist.world)  # value: a 1/world share; gradient: this rank's all

    @property
    def cut_points(self) -> list[str]:
        """The cuts :meth:`evaluate` averages: the full-width last layer, and for ESE every trained layer's first k."""
        k, n, layers = self.objective.config.compression_dim, self.ckpt.depth, self.objective.uses_layers
        many = len(layers) > 1 or self.objective.config.alpha or self.objective.config.beta
        return [f"L{n}/full", *([f"L{i}/{k}" for i in layers] if many else [])]

    @property
    def score_label(self) -> str:
        points = self.cut_points
        return "eval" if len(points) == 1 else f"eval (mean of {len(points)} cut points)"

    def evaluate(self) -> float | None:
        """STS Spearman x100: the full-width last layer for a control run; for ESE the mean of that and of
        every trained layer's first-k dims (the cuts ESE promises)."""
        if self.eval_pairs is None:
            return None
        p, k, n = self.eval_pairs, self.objective.config.compression_dim, self.ckpt.depth
        layers = self.objective.uses_layers
        one = encode_layers(self.ckpt, p.sentence1, layers, batch_size=64)
        two = encode_layers(self.ckpt, p.sentence2, layers, batch_size=64)
        scores = {f"L{n}/full": sts_spearman(one[n], two[n], p.scores)}
        if len(layers) > 1 or self.objective.config.alpha or self.objective.config.beta:
            scores.update({f"L{i}/{k}": sts_spearman(one[i][:, :k], two[i][:, :k], p.scores) for i in layers})
        self.last_eval = {key: round(v, 2) for key, v in scores.items()}
        return float(np.mean(list(scores.values())))


@dataclass
class TrainResultSummary:
    output: Path | None
    source: str
    ese: bool
    objective: dict
    data: dict
    attention: dict | None
    lora: dict | None
    train: dict
    eval: dict | None
    seconds: float
    run_dir: str
    hints: list[str] = field(default_factory=list)
    checkpoint: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "checkpoint"}
        d["output"] = str(self.output) if self.output else None
        return d


def train_ese(
    model: str | os.PathLike,
    data: str | os.PathLike,
    output: str | os.PathLike | None,
    settings: TrainSettings | None = None,
    *,
    resume: bool = False,
    run_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    **kwargs,
) -> TrainResultSummary:
    """Fine-tune ``model`` on ``data`` and write it to ``output`` (``None``: keep it in ``result.checkpoint``).

    ``settings`` is a :class:`~espresso_export.finetuning.train_settings.TrainSettings`; its fields are also
    accepted as keyword arguments (``train_ese("minilm", "sts-train.csv", "out", ese=True, compression_dim=64)``).
    ``ese=False`` is plain fine-tuning of the full-width last layer, the control."""
    objective, training = kwargs.pop("objective", None), kwargs.pop("training", None)
    if objective is not None or training is not None:
        warnings.warn("train_ese(objective=..., training=...) is deprecated; pass TrainSettings fields (ese=True, "
                      "compression_dim=..., batch_size=..., lr=...) instead", DeprecationWarning, stacklevel=2)
    s = resolve(TrainSettings, settings, kwargs, call="train_ese")
    if s.threads is not None:
        import torch

        torch.set_num_threads(s.threads)
    return _train(model, data, output, s, objective or s.objective(), training or s.loop(),
                  resume=resume, run_dir=run_dir, overwrite=overwrite, progress=progress)


def _train(model, data, output, s: TrainSettings, objective: EseObjectiveSettings, training: LoopSettings, *,
           resume: bool, run_dir, overwrite: bool, progress: bool) -> TrainResultSummary:
    """:func:`train_ese` on resolved settings: read, load, train, write."""
    start = time.perf_counter()
    lora = s.lora_settings()
    if lora is not None:
        require("lora")  # before any data is read or model loaded
    dist = distributed.setup(training.device)  # under torchrun: join the group; one process: nothing
    with prepare_run(output, run_dir, resume=resume, overwrite=overwrite, inputs=[model, data, s.eval_sts]) as run_dir:
        examples = EseData.read(data, limit=s.data_limit, positive_threshold=s.positive_threshold)
        check_loss_fits(objective, examples)
        eval_pairs = (spread_subset(read_sts(s.eval_sts), s.eval_limit, "--eval-limit") if s.eval_sts is not None
                      else None)
        ckpt, source_sha, wrapper = _load_model(model, attention=s.attention, pooling=s.pooling, lora=lora,
                                                trust_remote_code=s.trust_remote_code)
        identity = _run_identity(ckpt, objective, examples, eval_pairs, source_sha=source_sha, lora=lora,
                                 max_seq_len=s.max_seq_len)
        task = EseTask(ckpt, EseObjective.from_checkpoint(ckpt, objective, max_length=s.max_seq_len), examples,
                       eval_pairs=eval_pairs, identity=identity)
        trainer = Trainer(task, training, run_dir)
        ese_on = bool(objective.alpha or objective.beta)
        result = trainer.run(resume=resume, progress=("ESE" if ese_on else "fine-tuning") if progress and dist.main
                             else None)  # bars and tables on rank 0 only
        ckpt.model.cpu()
        if wrapper is not None:
            from espresso_export.model.lora import merge_lora

            merge_lora(ckpt, wrapper)
        eval_info = _eval_info(s.eval_sts, eval_pairs, result, task)
        prov = _provenance(ckpt, objective, examples, identity, training, result, eval_info, source_sha=source_sha,
                           lora=lora, processes=dist.world)
        output = write_trained(ckpt, output, prov, overwrite=overwrite, trainer=trainer,
                               keep_checkpoints=s.keep_checkpoints)
    return TrainResultSummary(
        output=output, source=ckpt.source, ese=ese_on, objective=objective.to_dict(), data=prov["data"],
        attention=prov.get("attention"), lora=prov.get("lora"), train=result.to_dict(), eval=eval_info,
        seconds=round(time.perf_counter() - start, 2), run_dir=str(run_dir), hints=_hints(output, data, s, objective),
        checkpoint=ckpt,
    )


def _hints(output, data, s: TrainSettings, objective: EseObjectiveSettings) -> list[str]:
    hints = [_cut_hint(output, objective)] if objective.alpha or objective.beta else []
    return hints + [w for flag, spec in (("--data", data), ("--eval-sts", s.eval_sts))  # as distill warns
                    if (w := test_split_warning(flag, spec, "scores reported on it are optimistic; train and choose "
                                                            "on train/dev splits, report on test"))]


def _eval_info(eval_sts, eval_pairs, result, task: EseTask) -> dict | None:
    if eval_pairs is None:
        return None
    return {"sts": spec_key(eval_sts), "pairs": len(eval_pairs), "initial": result.initial_score, "best": result.best_score,
            "best_step": result.best_step, "history": result.history, "last": task.last_eval,
            "score": "mean STS Spearman x100 over the cut points" if len(task.cut_points) > 1 else "STS Spearman x100",
            "cut_points": task.cut_points}


def _cut_hint(output, objective: EseObjectiveSettings) -> str:
    return (f"hint: cut it with `espresso-export shrink {output or 'OUT'} --layers L --dim {objective.compression_dim}` "
            "(first layers and first-k dims are picked automatically for ESE-trained models)")


def _load_model(model, *, attention, pooling, lora, trust_remote_code):
    """``(checkpoint, sha256 of its weights as loaded, LoRA wrapper or None)``, attention switched as asked."""
    ckpt = load(model, pooling=pooling, trust_remote_code=trust_remote_code)
    if any(isinstance(m, DenseLayer) for m in ckpt.post):
        raise ValidationError(f"{ckpt.source} has a Dense head after pooling; ESE trains the pooled backbone output "
                              "whose first k dims are kept, so a Dense head would undo it. Use a model without one")
    source_sha = ckpt.weights_sha256()
    if attention is not None and Attention(attention) is not Attention.CAUSAL:
        switch(ckpt, attention)
        if pooling is not None:
            ckpt.pooling = Pooling(pooling)
    wrapper = None
    if lora is not None:
        from espresso_export.model.lora import add_lora

        wrapper = add_lora(ckpt, lora)
    return ckpt, source_sha, wrapper


def _run_identity(ckpt, objective: EseObjectiveSettings, examples: EseData, eval_pairs, *, source_sha: str, lora,
                  max_seq_len: int | None) -> dict:
    """Everything that defines the run, checked on ``--resume`` (the task's part of the run hash)."""
    return {
        "source_sha256": source_sha, "objective": objective.to_dict(), "data": examples.describe(),
        "data_sha256": sentences_sha256(examples.anchor + examples.positive + (examples.negative or [])),
        "attention": describe_attention(ckpt.model), "lora": None if lora is None else lora.to_dict(),
        "pooling": ckpt.pooling.value, "max_seq_len": max_seq_len,
        "eval": None if eval_pairs is None else sentences_sha256(eval_pairs.sentence1 + eval_pairs.sentence2),
    }


def _provenance(ckpt, objective: EseObjectiveSettings, examples: EseData, identity: dict, training: LoopSettings, result,
                eval_info: dict | None, *, source_sha: str, lora, processes: int) -> dict:
    """The ``train`` step of the output's lineage; ``ese`` in it is what ``shrink`` reads to cut the model."""
    prov = {
        "espresso_version": __version__,
        "step": "train",
        "source": {"id": ckpt.source, "weights_sha256": source_sha, "depth": ckpt.depth, "hidden_size": ckpt.hidden_size},
        "pooling": ckpt.pooling.value,
        "objective": objective.to_dict(),
        "data": {**examples.describe(), "sha256": identity["data_sha256"]},
        # the settings, then what ran: the epochs trained (a fraction under --max-steps), as distill records them
        "training": {**training.identity(), "epochs_requested": training.epochs, "steps": result.steps,
                     "epochs": result.epochs, "processes": processes},
        "best_eval": eval_info,
    }
    if objective.alpha or objective.beta:  # read by Checkpoint.ese_trained: shrink then keeps the first layers and first k dims
        prov["ese"] = {"compression_dim": objective.compression_dim, "layers_from": objective.layers_from}
    if (att := describe_attention(ckpt.model)) is not None:
        prov["attention"] = att
    if lora is not None:
        prov["lora"] = {**lora.to_dict(), "merged": True}
    return prov
