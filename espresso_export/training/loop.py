"""The training loop every trainer shares (``distill`` and ``train``).

A trainer describes *what* to learn as a :class:`TrainingTask` (modules, a loss over a batch of item indices, an
optional evaluation) and *how* as :class:`LoopSettings`; the loop owns the rest: AdamW with warm-up and decay
(:mod:`.schedule`), seeded length-bucketed batches, progress, an evaluation per epoch keeping the best weights,
checkpoints that ``resume=True`` continues exactly (:mod:`.resume`), Ctrl-C and SIGTERM (:mod:`.interrupt`), and
data-parallel runs under ``torchrun`` (:mod:`.distributed`).
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from espresso_export.core.renamed import old_names
from espresso_export.core.errors import ValidationError
from espresso_export.core.progress import Bar
from espresso_export.training import distributed
from espresso_export.training.interrupt import TrainingInterrupted, interrupted, stop_flag, stop_requested
from espresso_export.training.run_files import remove_run_files, stopped_early
from espresso_export.training.resume import (
    BEST_DIR, CHECKPOINT_DIR, load_checkpoint, read_checkpoint_meta, restore_best_weights, save_best, save_checkpoint,
)
from espresso_export.training.run_folder import prepare_run, write_trained
from espresso_export.training.schedule import (
    amp_dtype, autocast, build_optimizer, epoch_batches, resolve_device, steps_per_epoch,
)
from espresso_export.training.task import LOSS_LABEL, LoopSettings, TrainingTask, TrainResult

# the loop's own names and those trainers, the recipe runner and the tests take from here
__all__ = [
    "BEST_DIR", "CHECKPOINT_DIR", "LoopSettings", "TrainResult", "Trainer", "TrainingInterrupted", "TrainingTask",
    "epoch_batches", "prepare_run", "read_checkpoint_meta", "train", "write_trained",
]


def _check_config(n: int, config: LoopSettings) -> None:
    if n == 0:
        raise ValidationError("nothing to train on: the training set is empty")
    if n < config.batch_size:
        raise ValidationError(f"the training set has {n} items, fewer than one batch (--batch-size "
                              f"{config.batch_size}); lower --batch-size or add data")
    if config.epochs < 1:
        raise ValidationError(f"--epochs must be at least 1, got {config.epochs}")
    if config.lr <= 0:
        raise ValidationError(f"--lr must be positive, got {config.lr}")


@dataclass
class _Pace:
    """This invocation's throughput, for the bar and the result."""

    start: float = field(default_factory=time.perf_counter)
    items: int = 0

    def add(self, items: int) -> None:
        self.items += items

    def rate(self) -> float:
        return self.items / max(time.perf_counter() - self.start, 1e-9)


class Trainer:
    """Holds the optimiser, the schedule and the position; :func:`train` is the one-call form."""

    def __init__(self, task: TrainingTask, config: LoopSettings, run_dir: str | Path):
        self.task = task
        self.config = config
        self.run_dir = Path(run_dir).expanduser()
        n = len(task)
        _check_config(n, config)
        self.device = resolve_device(config.device)
        self.dist = distributed.setup(config.device)  # joins torchrun's process group (no-op for one process)
        if config.batch_size < self.dist.world:
            raise ValidationError(f"--batch-size {config.batch_size} is the global batch, split across the "
                                  f"{self.dist.world} processes: it must be at least {self.dist.world}")
        self.amp = amp_dtype(config.amp, self.device)
        self.lengths = task.lengths() if config.bucket else None
        self.per_epoch = steps_per_epoch(n, config.batch_size)
        total = config.epochs * self.per_epoch
        self.total = min(total, config.max_steps) if config.max_steps else total
        self.modules = task.modules()
        for m in self.modules.values():
            m.to(self.device)
        self.params, self.optimizer, self.scheduler, self.scaler = build_optimizer(
            self.modules, lr=config.lr, weight_decay=config.weight_decay, warmup=config.warmup, total=self.total,
            amp=self.amp, device=self.device)
        self.identity = {"task": task.config(), "train": config.identity(), "items": n}
        self.step = 0
        self.epoch = 0
        self.position = 0  # batches of the current epoch already done
        self.best: dict | None = None
        self.history: list[dict] = []
        self.initial_score: float | None = None
        self.epoch_loss = [0.0, 0]  # sum and count of this epoch's step losses: the one loss shown (LOSS_LABEL)
        self.last_epoch_loss: float | None = None  # that mean at the end of the last epoch (or of the run)
        self.ddp = None  # the DistributedDataParallel wrapper when world > 1 (made in run, after a resume)
        self._stop_any = False

    # -- persistence (:mod:`.resume`) -----------------------------------------------------------------
    def save(self) -> Path:
        return save_checkpoint(self)

    def load(self) -> None:
        load_checkpoint(self)

    def restore_best(self) -> None:
        """Load the best evaluated weights into the task's modules (if an evaluation ran)."""
        restore_best_weights(self)

    # -- one step -------------------------------------------------------------------------------------
    def _evaluate(self, bar: Bar, label: str, epochs_done: int = 0) -> float | None:
        """Score the model; its history entry's ``epoch`` counts the epochs finished (0 before training, 1 after
        the first: it said 0 there too, while the progress line said "epoch 1")."""
        import torch

        for m in self.modules.values():
            m.eval()
        score = None
        if self.dist.main:  # one rank evaluates; the others wait for its score
            with torch.inference_mode(), bar.paused():
                score = self.task.evaluate()
        for m in self.modules.values():
            m.train()
        if self.dist.enabled:
            score = self.dist.broadcast_json(score, what=f"{label}: waiting for rank 0's evaluation")
        if score is None:
            return None
        improved = self.best is None or score > self.best["score"]
        loss = self._mean_loss()
        self.history.append({"epoch": epochs_done, "step": self.step, "score": round(float(score), 4),
                             "loss": None if loss is None else round(loss, 6)})
        if improved:
            save_best(self, float(score))
        bar.note(f"{label}: {self.task.score_label} {score:.2f}" + (" (best)" if improved else f" (best {self.best['score']:.2f})")
                 + ("" if loss is None else f", {LOSS_LABEL} {loss:.4g}"))
        return float(score)

    def _mean_loss(self) -> float | None:
        return self.epoch_loss[0] / self.epoch_loss[1] if self.epoch_loss[1] else None

    def _step(self, batch: list[int], flag: dict | None = None) -> float:
        ctx = autocast(self.amp, self.device.type)
        if self.ddp is None:
            with ctx:
                loss = self.task.loss(batch)
            value = float(loss.detach())
        else:  # this rank's slice; DDP averages gradients over the ranks, hence the factor world
            with ctx, self.dist.guard(f"step {self.step + 1}"):
                term = self.ddp(batch, self.dist.shard(batch))
            stop = bool(flag and stop_requested(flag))
            value, stops = self.dist.sum_floats([float(term.detach()), float(stop)], what=f"step {self.step + 1}")
            self._stop_any = stops > 0  # a Ctrl-C on any rank: every rank stops after this same step
            loss = term * self.dist.world
        if not math.isfinite(value):
            from espresso_export.core.errors import RuntimeFailure

            if self.step == 0:  # no weight has moved yet: the learning rate is not the cause
                raise RuntimeFailure(f"the loss is {value} at step 1, before any update: the training data gives no "
                                     "finite loss (too few or identical items for these settings?)")
            raise RuntimeFailure(f"the loss became {value} at step {self.step + 1}; lower --lr")
        self.optimizer.zero_grad(set_to_none=True)
        with self.dist.guard(f"the gradient all-reduce of step {self.step + 1}"):
            self._backward(loss)
        self.scheduler.step()
        return value

    def _backward(self, loss) -> None:
        import torch

        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
            self.optimizer.step()

    # -- the loop -------------------------------------------------------------------------------------
    def _begin(self, resume: bool) -> int | None:
        """Load the checkpoint (returning its step) or seed every RNG for a fresh start (also when resuming a run
        that stopped before its first checkpoint: rank 0 tells)."""
        import torch

        early = self.dist.broadcast_json(read_checkpoint_meta(self.run_dir) is None and stopped_early(self.run_dir)
                                         if resume and self.dist.main else None, what="checking the run folder")
        if resume and not early:
            self.load()
            return self.step
        random.seed(self.config.seed)
        np.random.seed(self.config.seed)
        torch.manual_seed(self.config.seed)
        return None

    def _train_batch(self, batch: list[int], bar: Bar, flag: dict, pace: _Pace,
                     on_step: Callable[[int], None] | None) -> None:
        loss = self._step(batch, flag)
        self.step += 1
        self.position += 1
        self.epoch_loss[0] += loss
        self.epoch_loss[1] += 1
        pace.add(len(batch))
        bar.advance(1, {LOSS_LABEL: f"{self._mean_loss():.4g}", f"{self.task.item_unit}/s": f"{pace.rate():.0f}"})
        if on_step is not None:
            on_step(self.step)
        if (self._stop_any if self.ddp is not None else stop_requested(flag)):
            where = self.save()
            raise interrupted(f"at step {self.step}/{self.total}; resumable checkpoint saved in {where.parent} "
                              "(run the same command with --resume to continue)", flag.get("signum"))
        if self.config.checkpoint_every and self.step % self.config.checkpoint_every == 0 and self.step < self.total:
            self.save()

    def _run_epoch(self, bar: Bar, flag: dict, pace: _Pace, on_step: Callable[[int], None] | None) -> None:
        """The rest of the current epoch (or up to the last step), then its evaluation and checkpoint."""
        cfg = self.config
        batches = epoch_batches(len(self.task), cfg.batch_size, cfg.seed, self.epoch, self.lengths)
        while self.position < len(batches) and self.step < self.total:
            self._train_batch(batches[self.position], bar, flag, pace, on_step)
        epoch_done = self.position >= len(batches)  # else the run stopped at its last step mid-epoch
        self.last_epoch_loss = self._mean_loss() if self.epoch_loss[1] else self.last_epoch_loss
        self._evaluate(bar, f"epoch {self.epoch + 1}" if epoch_done else f"step {self.step}",
                       self.epoch + 1 if epoch_done else self.epoch)
        self.epoch_loss = [0.0, 0]
        if epoch_done:
            self.epoch += 1
            self.position = 0
        if self.step < self.total:
            self.save()

    def run(self, *, resume: bool = False, progress: str | None = None,
            on_step: Callable[[int], None] | None = None) -> TrainResult:
        resumed_from = self._begin(resume)
        if self.dist.enabled and self.ddp is None:
            self.ddp = self.dist.wrap(self.modules, self.task_shard_loss, self.device)
        pace = _Pace()
        unit = self.task.item_unit
        bar = Bar(progress if self.dist.main else None, self.total, done=self.step,
                  fields=((LOSS_LABEL, f"{LOSS_LABEL} {{}}"), (f"{unit}/s", f"{{}} {unit}/s")))
        try:
            with stop_flag(repeat_interrupts=not self.dist.enabled) as flag, bar:
                if self.step == 0 and self.initial_score is None:
                    self.initial_score = self._evaluate(bar, "before training", self.epoch)
                for m in self.modules.values():
                    m.train()
                while self.step < self.total:
                    self._run_epoch(bar, flag, pace, on_step)
        finally:
            # the wrapper's forward refers back to this trainer (a cycle): left to the garbage collector, its
            # gloo work could be freed after the interpreter began to finalize, which aborts the process
            # (SIGABRT, "terminate called without an active exception") after a finished run
            if self.ddp is not None:  # a single process holds no such wrapper: nothing to collect
                self.ddp = None
                gc.collect()
        seconds = time.perf_counter() - pace.start
        self.restore_best()
        for m in self.modules.values():
            m.eval()
        return TrainResult(
            steps=self.step, total_steps=self.total, epochs=round(self.step / self.per_epoch, 3),
            initial_score=self.initial_score, best_score=self.best["score"] if self.best else None,
            best_step=self.best["step"] if self.best else None, epoch_mean_loss=self.last_epoch_loss, seconds=round(seconds, 2),
            items_per_second=round(pace.items / max(seconds, 1e-9), 1), history=self.history,
            resumed_from=resumed_from,
        )

    def task_shard_loss(self, batch: list[int], part: list[int]):
        return self.task.shard_loss(batch, part, self.dist)

    def cleanup(self) -> None:
        """Remove the run's checkpoints after a finished run (rank 0 only); nothing else in the run folder."""
        if self.dist.main:
            remove_run_files(self.run_dir)


__getattr__ = old_names(__name__, {"TrainConfig": ("LoopSettings", lambda: LoopSettings)})


def train(task: TrainingTask, config: LoopSettings, run_dir: str | Path, *, resume: bool = False,
          progress: str | None = None, on_step: Callable[[int], None] | None = None) -> TrainResult:
    """Train ``task`` to the end (or raise :class:`TrainingInterrupted` after saving on Ctrl-C).

    On return the task's modules hold the best evaluated weights (the last ones without evaluation).
    """
    return Trainer(task, config, run_dir).run(resume=resume, progress=progress, on_step=on_step)
