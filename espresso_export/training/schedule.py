"""The shape of a run: the batch order of every epoch, the device and precision, AdamW and its
learning-rate schedule (linear warm-up, then linear decay to zero at the last step)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export.core.errors import ValidationError

BUCKET_BATCHES = 32  # length bucketing sorts chunks of this many batches by length


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


def cpu_auto_amp(amp: str, device_name: str, cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """``amp`` with ``auto`` made ``bf16`` on a CPU that multiplies bf16 in hardware (:func:`espresso_export.core.cpu.bf16_isa`).

    Used by ``distill``, whose regression targets keep their accuracy in bf16, and by ``auto``'s scoring passes
    (:func:`encoding_precision`). Elsewhere ``auto`` stays full precision on CPU: without the instructions bf16
    products are converted in software."""
    if (amp or "auto").lower() != "auto" or (device_name or "cpu").lower() != "cpu":
        return amp
    import torch

    from espresso_export.core.cpu import bf16_isa

    mkldnn_bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    return "bf16" if bf16_isa(cpuinfo) and torch.backends.mkldnn.is_available() and mkldnn_bf16() else amp


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


def autocast(dtype, device_type: str = "cpu"):
    """``torch.autocast`` to ``dtype`` on ``device_type``, or a no-op context for full precision (``None``)."""
    import torch

    return torch.autocast(device_type, dtype=dtype) if dtype is not None else nullcontext()


def encoding_precision(amp: str, device_name: str):
    """The autocast context for passes that encode without training (``auto``'s scoring): the precision distill's
    teacher pass runs at on the same device (``amp`` auto: bf16 on a CPU with bf16 instructions and on CUDA),
    so a search's measured encoding speed is the teacher pass's too."""
    device = resolve_device(device_name)
    return autocast(amp_dtype(cpu_auto_amp(amp, device.type), device), device.type)


def param_groups(modules: dict[str, Any], weight_decay: float) -> list[dict]:
    """AdamW groups of the trainable parameters: no weight decay on biases and norms."""
    decay, no_decay = [], []
    for module in modules.values():
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def lr_factor(total: int, warmup_steps: int) -> Callable[[int], float]:
    """The learning-rate multiplier of each step: linear warm-up, then linear decay to 0 at ``total``."""
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return factor


def build_optimizer(modules: dict[str, Any], *, lr: float, weight_decay: float, warmup: float, total: int, amp, device):
    """``(params, optimizer, scheduler, scaler)`` for a run of ``total`` steps; the scaler only for fp16."""
    import torch

    groups = param_groups(modules, weight_decay)
    if not groups:
        raise ValidationError("the task has no trainable parameters")
    params = [p for g in groups for p in g["params"]]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(total, int(warmup * total)))
    scaler = torch.amp.GradScaler(device.type) if amp is torch.float16 else None
    return params, optimizer, scheduler, scaler
