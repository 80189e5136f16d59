"""A training run's checkpoint (written every N steps, at epoch ends and on Ctrl-C) and its exact resume.

Checkpoint folder (no pickle anywhere)::

    RUN/checkpoint/  model.safetensors      trainable modules' state dicts ("<module>/<key>")
                     optimizer.safetensors  optimizer state tensors ("<param idx>/<key>")
                     rng.safetensors        torch (and CUDA) RNG states, numpy's MT state
                     trainer.json           step, epoch, position, scheduler, optimizer scalars,
                                            python RNG, best score, history, run config + hash
    RUN/best/        model.safetensors + best.json   the best evaluated weights so far

A checkpoint is refused when it was written by a run with another configuration, naming the difference.
The functions taking a ``trainer`` read and set the :class:`~espresso_export.training.loop.Trainer`'s state.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.files import atomic_output, write_json
from espresso_export.training import run_files
from espresso_export.training.run_files import BEST_DIR, CHECKPOINT_DIR

if TYPE_CHECKING:
    from espresso_export.training.loop import Trainer

FORMAT = 1


def run_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- tensors <-> files ---------------------------------------------------------------------------------

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

    # host: RNG states are saved from host memory, whatever the device
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


# --- the resume check ----------------------------------------------------------------------------------

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


def _checked_meta(trainer: Trainer) -> dict:
    """:func:`check_resumable` on rank 0's view, refused on every rank when any rank sees another checkpoint."""
    try:
        meta, refused = check_resumable(trainer.run_dir, trainer.identity), None
    except ValidationError as e:
        meta, refused = None, e
    seen = trainer.dist.all_gather_json(refused.message if refused else meta["step"],
                                        what="checking the checkpoint every rank resumes from")
    if refused is not None:
        raise refused
    if len(set(map(str, seen))) > 1:
        raise ValidationError(f"cannot resume: the ranks see different checkpoints in {trainer.run_dir} ({seen}); "
                              "the run folder must be one folder every node shares")
    return meta


# --- a trainer's state ---------------------------------------------------------------------------------

def save_checkpoint(trainer: Trainer) -> Path:
    """Write ``trainer``'s whole state to ``RUN/checkpoint`` (rank 0 only: every rank holds the same state)."""
    from safetensors.torch import save_file

    t = trainer
    target = t.run_dir / CHECKPOINT_DIR
    if not t.dist.main:
        return target
    opt_tensors, opt_meta = _optimizer_split(t.optimizer)
    py = random.getstate()
    meta = {
        "format": FORMAT, "run_hash": run_hash(t.identity), "run": t.identity,
        "step": t.step, "epoch": t.epoch, "position": t.position, "total_steps": t.total,
        "scheduler": t.scheduler.state_dict(), "optimizer": opt_meta,
        "scaler": t.scaler.state_dict() if t.scaler else None,
        "python_random": [py[0], list(py[1]), py[2]], "best": t.best, "history": t.history,
        "initial_score": t.initial_score, "epoch_loss": t.epoch_loss, "last_epoch_loss": t.last_epoch_loss, "saved": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    run_files.claim(t.run_dir)
    with atomic_output(target, overwrite=True) as tmp:
        save_file(_module_tensors(t.modules), str(tmp / "model.safetensors"))
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        save_file({k: v.contiguous() for k, v in _rng_tensors().items()}, str(tmp / "rng.safetensors"))
        write_json(tmp / "trainer.json", meta)
    return target


def load_checkpoint(trainer: Trainer) -> None:
    """Continue exactly where ``RUN/checkpoint`` stopped: weights, optimizer, scheduler, RNGs, position, best."""
    from safetensors.torch import load_file

    t = trainer
    meta = _checked_meta(t)
    src = t.run_dir / CHECKPOINT_DIR
    _load_module_tensors(t.modules, src / "model.safetensors")
    t.optimizer.load_state_dict(_optimizer_join(load_file(str(src / "optimizer.safetensors")), meta["optimizer"]))
    t.scheduler.load_state_dict(meta["scheduler"])
    if t.scaler is not None and meta.get("scaler"):
        t.scaler.load_state_dict(meta["scaler"])
    _restore_rng(load_file(str(src / "rng.safetensors")), meta["python_random"])
    t.step, t.epoch, t.position = meta["step"], meta["epoch"], meta["position"]
    t.best, t.history = meta.get("best"), meta.get("history", [])
    t.initial_score = meta.get("initial_score")
    t.epoch_loss = meta.get("epoch_loss", [0.0, 0])
    t.last_epoch_loss = meta.get("last_epoch_loss")


def save_best(trainer: Trainer, score: float) -> None:
    """Record ``score`` as the best so far and keep the current weights in ``RUN/best`` (rank 0 writes)."""
    from safetensors.torch import save_file

    t = trainer
    t.best = {"score": score, "step": t.step, "epoch": t.epoch}
    if not t.dist.main:
        return
    run_files.claim(t.run_dir)
    with atomic_output(t.run_dir / BEST_DIR, overwrite=True) as tmp:
        save_file(_module_tensors(t.modules), str(tmp / "model.safetensors"))
        write_json(tmp / "best.json", t.best)


def restore_best_weights(trainer: Trainer) -> None:
    """Load the best evaluated weights into the task's modules (if an evaluation ran)."""
    f = trainer.run_dir / BEST_DIR / "model.safetensors"
    if trainer.best is not None and trainer.dist.main and f.is_file():
        _load_module_tensors(trainer.modules, f)
