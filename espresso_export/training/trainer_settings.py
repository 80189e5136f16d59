"""The options every trainer shares (``distill`` and ``train``), declared once in the base class both settings
classes extend, so the two commands cannot drift apart. Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from espresso_export.core.settings import setting
from espresso_export.core.types import Pooling
from espresso_export.core.common_settings import (
    pooling_setting, seed_setting, trust_remote_code_setting,
)


def bucket_setting():
    """Length-bucketed batches: a ``distill`` option, and the loop's default for a trainer without the option."""
    return setting(True, help="Length-bucketed batches (less padding).")


@dataclass
class TrainerSettings:
    """The options every trainer has, with the same meaning and default (``distill`` and ``train``)."""

    epochs: int = setting(1, min=1, help="Passes over the training data.")
    warmup: float = setting(0.1, min=0.0, max=1.0, help="Fraction of steps of linear warm-up.")
    weight_decay: float = setting(0.01, min=0.0, help="AdamW weight decay.")
    max_grad_norm: float = setting(1.0, min=0.0, help="Gradient clipping norm.")
    max_steps: Optional[int] = setting(None, min=1, help="Stop after this many steps.")
    eval_sts: Optional[str] = setting(None, path="data", help="STS file evaluated after every epoch; the best "
                                      "checkpoint is kept. Never the test split you report on.")
    eval_limit: Optional[int] = setting(None, min=2, help="Evaluate on N pairs taken evenly over the set (as verify's "
                                                           "--sts-limit; files are often sorted by score).")
    seed: int = seed_setting()
    device: str = setting("cpu", help="cpu, cuda or mps.")
    amp: str = setting("auto", help="Mixed precision: auto, off, bf16, fp16. auto is on for CUDA and, for distill "
                                    "(training and the teacher pass) and auto (its heals and scoring), bf16 on a "
                                    "CPU with bf16 instructions (AVX512-BF16, AMX, Arm BF16).")
    threads: Optional[int] = setting(None, min=1, cpus=True, recipe=False,
                                     help="CPU threads for torch (a recipe sets them once, at the top).")
    checkpoint_every: int = setting(200, min=0, help="Save a resumable checkpoint every N steps (0: only at epoch "
                                                     "ends and on Ctrl-C).")
    keep_checkpoints: bool = setting(False, help="Keep the run folder after success.")
    pooling: Optional[Pooling] = pooling_setting()
    trust_remote_code: bool = trust_remote_code_setting()
