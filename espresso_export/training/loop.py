"""The training loop every trainer shares (``distill`` now, ``train --ese`` later).

A trainer describes *what* to learn as a :class:`TrainingTask` (its modules,
a loss over a batch of item indices, an optional evaluation); :func:`train`
does the rest:

* AdamW (no weight decay on biases and norms), linear warm-up then linear decay,
  gradient clipping, mixed precision where the device supports it;
* a seeded, length-bucketed batch order that depends only on ``(seed, epoch)``;
* a rich progress bar with the loss, sentences/s and the ETA;
* data-parallel under ``torchrun`` (:mod:`espresso_export.distributed`): each rank
  takes its contiguous slice of every global batch (``batch_size`` stays the
  global batch), gradients are averaged by DistributedDataParallel so a step
  equals the single-process step on the same batch; only rank 0 shows
  progress, evaluates and writes; checkpoints do not depend on the world size;
* evaluation after every epoch (and before the first) keeping the best weights;
* a checkpoint every N steps, at every epoch end and on Ctrl-C, that
  ``resume=True`` continues from *exactly*: weights, optimizer, scheduler,
  RNG states and the position in the data order. A checkpoint is refused
  when it was written by a run with another configuration, naming the difference.

Checkpoint folder (no pickle anywhere)::

    RUN/checkpoint/  model.safetensors      trainable modules' state dicts ("<module>/<key>")
                     optimizer.safetensors  optimizer state tensors ("<param idx>/<key>")
                     rng.safetensors        torch (and CUDA) RNG states, numpy's MT state
                     trainer.json           step, epoch, position, scheduler, optimizer scalars,
                                            python RNG, best score, history, run config + hash
    RUN/best/        model.safetensors + best.json   the best evaluated weights so far
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export.training import distributed
from espresso_export.core.errors import EXIT_INTERRUPTED, EspressoError, ValidationError
from espresso_export.model.layout import atomic_output, write_json

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"
FORMAT = 1
BUCKET_BATCHES = 32  # length bucketing sorts chunks of this many batches by length


class TrainingInterrupted(EspressoError):
    """Ctrl-C during training: a resumable checkpoint was saved. Exit code 130."""

    exit_code = EXIT_INTERRUPTED


class TrainingTask(ABC):
    """What to train. ``train`` owns the loop; a task owns the model and the loss.

    Items are addressed by index ``0 .. len(task) - 1``; a batch is a list of indices.
    """

    item_unit = "sent"  # what an item is, in the progress bar's rate ("sent/s")

    @abstractmethod
    def __len__(self) -> int:
        """Number of training items (sentences, pairs, ...)."""

    @abstractmethod
    def modules(self) -> dict[str, Any]:
        """The modules to train and checkpoint, by a stable name. Parameters with
        ``requires_grad=False`` are saved but not optimised."""

    @abstractmethod
    def loss(self, batch: Sequence[int]):
        """A scalar loss tensor for the items ``batch`` (on the modules' device)."""

    def evaluate(self) -> float | None:
        """A score where higher is better (e.g. STS Spearman), or None for no evaluation."""
        return None

    def config(self) -> dict:
        """Everything that defines this run's task (JSON-able); part of the resume check."""
        return {}

    def lengths(self) -> Sequence[int] | None:
        """Per-item lengths for length bucketing (fewer pad tokens), or None."""
        return None

    def shard_loss(self, batch: Sequence[int], part: Sequence[int], dist):
        """This rank's term of ``loss(batch)`` when it holds ``part`` (its slice) of the global ``batch``.

        Contract: summed over the ranks, the terms' values give ``loss(batch)`` and the gradients
        their parameters receive give its gradient. This default is right for a loss that is a mean
        over the items (each term is the part's mean weighted by its share); a loss that couples the
        items of a batch (in-batch negatives, rankings) overrides it and gathers what it needs.
        """
        if not part:  # the last batch has fewer items than ranks: join the all-reduce with a zero gradient
            return self.loss(batch[:1]) * 0.0
        return self.loss(part) * (len(part) / len(batch))


@dataclass
class TrainConfig:
    epochs: int = 1
    batch_size: int = 64
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup: float = 0.1  # fraction of the total steps spent warming up
    max_grad_norm: float = 1.0
    seed: int = 0
    bucket: bool = True  # length-bucketed batches
    max_steps: int | None = None  # stop (and schedule) at this many steps
    amp: str = "auto"  # auto (on for CUDA) | off | bf16 | fp16
    checkpoint_every: int = 200  # steps; 0 = only at epoch ends and on Ctrl-C
    device: str = "cpu"

    def identity(self) -> dict:
        """The fields a resumed run must share with the run that wrote the checkpoint."""
        d = asdict(self)
        for k in ("checkpoint_every", "device"):
            d.pop(k)
        return d


@dataclass
class TrainResult:
    steps: int
    total_steps: int
    epochs: float
    initial_score: float | None
    best_score: float | None
    best_step: int | None
    final_loss: float | None
    seconds: float  # training time of this invocation
    items_per_second: float
    history: list[dict] = field(default_factory=list)
    resumed_from: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def run_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, lengths: Sequence[int] | None = None) -> list[list[int]]:
    """The batch order of ``epoch``: a function of ``(n, batch_size, seed, epoch)`` only.

    With ``lengths``, each chunk of ``BUCKET_BATCHES`` batches of the shuffled order is
    sorted by length before it is cut into batches, and the batches are shuffled again:
    batches hold similar lengths (little padding) and still come in random order.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n)
    if lengths is None:
        return [order[s : s + batch_size].tolist() for s in range(0, n, batch_size)]
    lens = np.asarray(lengths)
    chunk = batch_size * BUCKET_BATCHES
    batches = []
    for s in range(0, n, chunk):
        part = order[s : s + chunk]
        part = part[np.argsort(lens[part], kind="stable")]
        batches += [part[i : i + batch_size].tolist() for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def steps_per_epoch(n: int, batch_size: int) -> int:
    return math.ceil(n / batch_size)


def resolve_device(name: str):
    import torch

    name = (name or "cpu").lower()
    if name == "cuda" and not torch.cuda.is_available():
        raise ValidationError("--device cuda: no CUDA device is available on this machine")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValidationError("--device mps: Apple MPS is not available on this machine")
    if name not in ("cpu", "cuda", "mps"):
        raise ValidationError(f"--device must be cpu, cuda or mps, got {name!r}")
    return torch.device(name)


def amp_dtype(amp: str, device):
    """The autocast dtype for ``amp`` on ``device`` (None = full precision)."""
    import torch

    amp = (amp or "auto").lower()
    if amp not in ("auto", "off", "bf16", "fp16"):
        raise ValidationError(f"--amp must be auto, off, bf16 or fp16, got {amp!r}")
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if amp == "fp16" and device.type == "cpu":
        raise ValidationError("--amp fp16 needs a GPU; on CPU use --amp bf16 or off")
    return torch.bfloat16 if amp == "bf16" else torch.float16


def _param_groups(modules: dict[str, Any], weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for module in modules.values():
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _schedule(total: int, warmup_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return factor


# --- checkpoint files ----------------------------------------------------------------------------------

def _module_tensors(modules: dict[str, Any]) -> dict:
    return {f"{name}/{k}": v.detach().cpu().clone().contiguous()
            for name, m in modules.items() for k, v in m.state_dict().items()}


def _load_module_tensors(modules: dict[str, Any], path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    for name, m in modules.items():
        prefix = f"{name}/"
        state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        m.load_state_dict(state, strict=True)


def _optimizer_split(optimizer) -> tuple[dict, dict]:
    """Optimizer state as (tensors for safetensors, the rest for JSON)."""
    import torch

    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{idx}/{k}"] = v.detach().cpu().clone().contiguous()
            else:
                scalars.setdefault(str(idx), {})[k] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _optimizer_join(tensors: dict, meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        idx, k = key.split("/", 1)
        state.setdefault(int(idx), {})[k] = v
    for idx, st in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(st)
    return {"state": state, "param_groups": meta["param_groups"]}


def _rng_tensors() -> dict:
    import torch

    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"cuda{i}"] = s
    _, keys, pos, has_gauss, cached = np.random.get_state()
    out["numpy_keys"] = torch.from_numpy(keys.astype(np.int64))
    out["numpy_meta"] = torch.tensor([pos, has_gauss], dtype=torch.int64)
    out["numpy_cached"] = torch.tensor([cached], dtype=torch.float64)
    return out


def _restore_rng(tensors: dict, py_state) -> None:
    import torch

    torch.set_rng_state(tensors["torch"])
    cuda = sorted(k for k in tensors if k.startswith("cuda"))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda])
    meta = tensors["numpy_meta"].tolist()
    np.random.set_state(("MT19937", tensors["numpy_keys"].numpy().astype(np.uint32), int(meta[0]), int(meta[1]),
                         float(tensors["numpy_cached"][0])))
    random.setstate((py_state[0], tuple(py_state[1]), py_state[2]))


def _diff(stored: dict, current: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(stored) | set(current)):
        a, b = stored.get(k, "<absent>"), current.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} there, {b!r} now")
    return out


def read_checkpoint_meta(run_dir: Path) -> dict | None:
    f = Path(run_dir) / CHECKPOINT_DIR / "trainer.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValidationError(f"cannot resume: {f} is unreadable ({e})") from e


def check_resumable(run_dir: Path, identity: dict) -> dict:
    """The checkpoint's metadata, or a ValidationError saying why this run cannot continue it."""
    meta = read_checkpoint_meta(run_dir)
    if meta is None:
        raise ValidationError(f"nothing to resume: no checkpoint in {Path(run_dir) / CHECKPOINT_DIR}")
    if meta.get("format") != FORMAT:
        raise ValidationError(f"cannot resume: checkpoint format {meta.get('format')} in {run_dir} is not {FORMAT}")
    if meta.get("run_hash") != run_hash(identity):
        diffs = _diff(meta.get("run", {}), identity)
        shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        raise ValidationError(
            f"cannot resume: the checkpoint in {run_dir} belongs to another run (run hash {meta.get('run_hash')} "
            f"vs {run_hash(identity)}): {shown or 'different configuration'}"
        )
    return meta


@contextmanager
def _sigint_flag(repeat_interrupts: bool = True):
    """First Ctrl-C sets a flag (the loop saves and stops); a second one interrupts at once.

    Under torchrun a single Ctrl-C reaches each worker twice (from the terminal and forwarded by
    the agent), so there (``repeat_interrupts=False``) every Ctrl-C only sets the flag: the ranks
    agree on the step to stop after, rank 0 saves, all exit."""
    state = {"stop": False}

    def handler(signum, frame):
        if state["stop"] and repeat_interrupts:
            raise KeyboardInterrupt
        state["stop"] = True

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no handler, Ctrl-C behaves as usual
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


class _Bar:
    """A rich bar: steps, loss, items/s, ETA. Silent when ``label`` is None."""

    def __init__(self, label: str | None, total: int, done: int, unit: str = "sent"):
        self.progress = self.lines = None
        if not label:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        from espresso_export.core.console import err_console
        from espresso_export.core.progress import LogLines

        if not err_console().is_terminal:  # a log: plain lines instead of a live bar that would print nothing
            self.lines = LogLines(label, total, done)
            self.rate_key = f"{unit}/s"
            return

        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn(f"{{task.fields[rate]}} {unit}/s"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err_console(), transient=True,
        )
        self.task = self.progress.add_task(label, total=total, completed=done, loss="-", rate="-")

    def __enter__(self):
        if self.progress:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.__exit__(*exc)

    def update(self, loss: float, rate: float) -> None:
        if self.progress:
            self.progress.update(self.task, advance=1, loss=f"{loss:.4g}", rate=f"{rate:.0f}")
        elif self.lines:
            self.lines.advance(1, loss=f"{loss:.4g}", **{self.rate_key: f"{rate:.0f}"})

    def note(self, text: str) -> None:
        if self.progress:
            self.progress.console.print(text, highlight=False)
        elif self.lines:
            self.lines.console.print(text, highlight=False)


class Trainer:
    """Holds the optimiser, the schedule and the position; :func:`train` is the one-call form."""

    def __init__(self, task: TrainingTask, config: TrainConfig, run_dir: str | Path):
        import torch

        self.task = task
        self.config = config
        self.run_dir = Path(run_dir).expanduser()
        n = len(task)
        if n == 0:
            raise ValidationError("nothing to train on: the training set is empty")
        if n < config.batch_size:
            raise ValidationError(f"the training set has {n} items, fewer than one batch (--batch-size "
                                  f"{config.batch_size}); lower --batch-size or add data")
        if config.epochs < 1:
            raise ValidationError(f"--epochs must be at least 1, got {config.epochs}")
        if config.lr <= 0:
            raise ValidationError(f"--lr must be positive, got {config.lr}")
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
        groups = _param_groups(self.modules, config.weight_decay)
        if not groups:
            raise ValidationError("the task has no trainable parameters")
        self.params = [p for g in groups for p in g["params"]]
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _schedule(self.total, int(config.warmup * self.total)))
        self.scaler = torch.amp.GradScaler(self.device.type) if self.amp is torch.float16 else None
        self.identity = {"task": task.config(), "train": config.identity(), "items": n}
        self.step = 0
        self.epoch = 0
        self.position = 0  # batches of the current epoch already done
        self.best: dict | None = None
        self.history: list[dict] = []
        self.initial_score: float | None = None
        self.epoch_loss = [0.0, 0]
        self.ddp = None  # the DistributedDataParallel wrapper when world > 1 (made in run, after a resume)
        self._stop_any = False

    # -- persistence ----------------------------------------------------------------------------------
    def save(self) -> Path:
        from safetensors.torch import save_file

        target = self.run_dir / CHECKPOINT_DIR
        if not self.dist.main:  # one writer: every rank holds the same state
            return target
        opt_tensors, opt_meta = _optimizer_split(self.optimizer)
        py = random.getstate()
        meta = {
            "format": FORMAT, "run_hash": run_hash(self.identity), "run": self.identity,
            "step": self.step, "epoch": self.epoch, "position": self.position, "total_steps": self.total,
            "scheduler": self.scheduler.state_dict(), "optimizer": opt_meta,
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "python_random": [py[0], list(py[1]), py[2]], "best": self.best, "history": self.history,
            "initial_score": self.initial_score, "epoch_loss": self.epoch_loss, "saved": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        with atomic_output(target, overwrite=True) as tmp:
            save_file(_module_tensors(self.modules), str(tmp / "model.safetensors"))
            save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
            save_file({k: v.contiguous() for k, v in _rng_tensors().items()}, str(tmp / "rng.safetensors"))
            write_json(tmp / "trainer.json", meta)
        return target

    def load(self) -> None:
        from safetensors.torch import load_file

        try:
            meta, refused = check_resumable(self.run_dir, self.identity), None
        except ValidationError as e:
            meta, refused = None, e
        seen = self.dist.all_gather_json(refused.message if refused else meta["step"],
                                         what="checking the checkpoint every rank resumes from")
        if refused is not None:
            raise refused
        if len(set(map(str, seen))) > 1:
            raise ValidationError(f"cannot resume: the ranks see different checkpoints in {self.run_dir} ({seen}); "
                                  "the run folder must be one folder every node shares")
        src = self.run_dir / CHECKPOINT_DIR
        _load_module_tensors(self.modules, src / "model.safetensors")
        self.optimizer.load_state_dict(_optimizer_join(load_file(str(src / "optimizer.safetensors")), meta["optimizer"]))
        self.scheduler.load_state_dict(meta["scheduler"])
        if self.scaler is not None and meta.get("scaler"):
            self.scaler.load_state_dict(meta["scaler"])
        _restore_rng(load_file(str(src / "rng.safetensors")), meta["python_random"])
        self.step, self.epoch, self.position = meta["step"], meta["epoch"], meta["position"]
        self.best, self.history = meta.get("best"), meta.get("history", [])
        self.initial_score = meta.get("initial_score")
        self.epoch_loss = meta.get("epoch_loss", [0.0, 0])

    def _save_best(self, score: float) -> None:
        from safetensors.torch import save_file

        self.best = {"score": score, "step": self.step, "epoch": self.epoch}
        if not self.dist.main:
            return
        with atomic_output(self.run_dir / BEST_DIR, overwrite=True) as tmp:
            save_file(_module_tensors(self.modules), str(tmp / "model.safetensors"))
            write_json(tmp / "best.json", self.best)

    def restore_best(self) -> None:
        """Load the best evaluated weights into the task's modules (if an evaluation ran)."""
        f = self.run_dir / BEST_DIR / "model.safetensors"
        if self.best is not None and self.dist.main and f.is_file():
            _load_module_tensors(self.modules, f)

    # -- the loop -------------------------------------------------------------------------------------
    def _evaluate(self, bar: _Bar, label: str) -> float | None:
        import torch

        for m in self.modules.values():
            m.eval()
        score = None
        if self.dist.main:  # one rank evaluates; the others wait for its score
            with torch.inference_mode():
                score = self.task.evaluate()
        for m in self.modules.values():
            m.train()
        if self.dist.enabled:
            score = self.dist.broadcast_json(score, what=f"{label}: waiting for rank 0's evaluation")
        if score is None:
            return None
        improved = self.best is None or score > self.best["score"]
        loss = self.epoch_loss[0] / self.epoch_loss[1] if self.epoch_loss[1] else None
        self.history.append({"epoch": self.epoch, "step": self.step, "score": round(float(score), 4),
                             "loss": None if loss is None else round(loss, 6)})
        if improved:
            self._save_best(float(score))
        bar.note(f"{label}: eval {score:.2f}" + (" (best)" if improved else f" (best {self.best['score']:.2f})")
                 + ("" if loss is None else f", mean loss {loss:.4g}"))
        return float(score)

    def _step(self, batch: list[int], flag: dict | None = None) -> float:
        import torch

        ctx = torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None else nullcontext()
        if self.ddp is None:
            with ctx:
                loss = self.task.loss(batch)
            value = float(loss.detach())
        else:  # this rank's slice; DDP averages gradients over the ranks, hence the factor world
            with ctx, self.dist.guard(f"step {self.step + 1}"):
                term = self.ddp(batch, self.dist.shard(batch))
            stop = bool(flag and flag["stop"])
            value, stops = self.dist.sum_floats([float(term.detach()), float(stop)], what=f"step {self.step + 1}")
            self._stop_any = stops > 0  # a Ctrl-C on any rank: every rank stops after this same step
            loss = term * self.dist.world
        if not math.isfinite(value):
            from espresso_export.core.errors import RuntimeFailure

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

    def run(self, *, resume: bool = False, progress: str | None = None,
            on_step: Callable[[int], None] | None = None) -> TrainResult:
        import torch

        cfg = self.config
        resumed_from = None
        if resume:
            self.load()
            resumed_from = self.step
        else:
            random.seed(cfg.seed)
            np.random.seed(cfg.seed)
            torch.manual_seed(cfg.seed)
        n = len(self.task)
        if self.dist.enabled and self.ddp is None:
            self.ddp = self.dist.wrap(self.modules, self.task_shard_loss, self.device)
        start = time.perf_counter()
        done_items = 0
        loss_ema = None
        last_loss = None
        progress = progress if self.dist.main else None
        with _sigint_flag(repeat_interrupts=not self.dist.enabled) as flag, _Bar(progress, self.total, self.step, self.task.item_unit) as bar:
            if self.step == 0 and self.initial_score is None:
                self.initial_score = self._evaluate(bar, "before training")
            for m in self.modules.values():
                m.train()
            while self.step < self.total:
                batches = epoch_batches(n, cfg.batch_size, cfg.seed, self.epoch, self.lengths)
                while self.position < len(batches) and self.step < self.total:
                    batch = batches[self.position]
                    last_loss = self._step(batch, flag)
                    self.step += 1
                    self.position += 1
                    self.epoch_loss[0] += last_loss
                    self.epoch_loss[1] += 1
                    done_items += len(batch)
                    loss_ema = last_loss if loss_ema is None else 0.95 * loss_ema + 0.05 * last_loss
                    bar.update(loss_ema, done_items / max(time.perf_counter() - start, 1e-9))
                    if on_step is not None:
                        on_step(self.step)
                    if (self._stop_any if self.ddp is not None else flag["stop"]):
                        where = self.save()
                        raise TrainingInterrupted(
                            f"interrupted at step {self.step}/{self.total}; resumable checkpoint saved in {where.parent} "
                            "(run the same command with --resume to continue)")
                    if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < self.total:
                        self.save()
                if self.position >= len(batches) or self.step >= self.total:
                    label = f"epoch {self.epoch + 1}" if self.position >= len(batches) else f"step {self.step}"
                    self._evaluate(bar, label)
                    self.epoch_loss = [0.0, 0]
                    if self.position >= len(batches):
                        self.epoch += 1
                        self.position = 0
                    if self.step < self.total:
                        self.save()
        seconds = time.perf_counter() - start
        self.restore_best()
        for m in self.modules.values():
            m.eval()
        return TrainResult(
            steps=self.step, total_steps=self.total, epochs=round(self.step / self.per_epoch, 3),
            initial_score=self.initial_score, best_score=self.best["score"] if self.best else None,
            best_step=self.best["step"] if self.best else None, final_loss=last_loss, seconds=round(seconds, 2),
            items_per_second=round(done_items / max(seconds, 1e-9), 1), history=self.history,
            resumed_from=resumed_from,
        )

    def task_shard_loss(self, batch: list[int], part: list[int]):
        return self.task.shard_loss(batch, part, self.dist)

    def cleanup(self) -> None:
        """Remove the run folder (checkpoints) after a finished run (rank 0 only)."""
        if self.dist.main:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def train(task: TrainingTask, config: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          progress: str | None = None, on_step: Callable[[int], None] | None = None) -> TrainResult:
    """Train ``task`` to the end (or raise :class:`TrainingInterrupted` after saving on Ctrl-C).

    On return the task's modules hold the best evaluated weights (the last ones without evaluation).
    """
    return Trainer(task, config, run_dir).run(resume=resume, progress=progress, on_step=on_step)


def check_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """The run-folder rule of every training command: resume needs a checkpoint; a fresh start refuses to
    clobber an unfinished run unless ``overwrite``."""
    meta = read_checkpoint_meta(run_dir)
    if resume and meta is None:
        raise ValidationError(f"nothing to resume: no checkpoint in {run_dir} (was the run started with this -o?)")
    if not resume and meta is not None:
        if not overwrite:
            raise ValidationError(f"a checkpoint of an unfinished run (step {meta.get('step')}) is in {run_dir}: "
                                  "pass --resume to continue it, or --overwrite to start over")
        shutil.rmtree(run_dir)


def prepare_run(output, run_dir, *, resume: bool, overwrite: bool) -> Path:
    """Check the output folder and apply :func:`check_run_dir` (on rank 0; its verdict reaches every rank).

    Returns the run folder (default: ``OUT.run`` beside the output)."""
    from espresso_export.model.layout import check_output

    dist = distributed.current()
    if output is not None:
        dist.on_main(lambda: check_output(output, overwrite=overwrite) and None, what="checking the output folder")
    if run_dir is None:
        if output is None:
            raise ValidationError("give an output folder or a run folder for the training checkpoints")
        run_dir = Path(str(Path(output).expanduser().resolve()) + ".run")
    run_dir = Path(run_dir).expanduser()
    dist.on_main(lambda: check_run_dir(run_dir, resume=resume, overwrite=overwrite), what="checking the run folder")
    return run_dir


def write_trained(ckpt, output, prov: dict, *, overwrite: bool, trainer: "Trainer", keep_checkpoints: bool):
    """Chain ``prov`` onto the checkpoint's lineage and write the trained model folder atomically.

    Returns the resolved output folder (``None`` when ``output`` is ``None``: in-memory runs)."""
    from espresso_export.model.layout import save_checkpoint

    if ckpt.provenance:
        prov["parent"] = ckpt.provenance
    ckpt.provenance = prov
    if output is None or not distributed.current().main:  # in memory, or not the writing rank
        return None
    with atomic_output(output, overwrite=overwrite, inputs=[ckpt.path]) as tmp:
        save_checkpoint(ckpt, tmp, post=ckpt.post, provenance=prov)
    if not keep_checkpoints:
        trainer.cleanup()
    return Path(output).expanduser().resolve()
