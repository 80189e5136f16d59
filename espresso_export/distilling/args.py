"""The arguments of one ``distill`` call as one object, and their validation (before any file is read).

:func:`~espresso_export.distilling.run` keeps its keyword signature (the public API); it packs
its arguments into a :class:`DistillArgs` at once, and the phases (corpus -> teacher targets -> student and
projection -> training -> write) read the settings they need from that one object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from espresso_export.core.errors import ValidationError
from espresso_export.core.types import Loss, ProjectionInit
from espresso_export.training import distributed
from espresso_export.training.schedule import cpu_auto_amp
from espresso_export.distilling.distill_settings import DistillSettings


@dataclass(kw_only=True)
class DistillArgs(DistillSettings):
    """One ``distill`` call as one object: its settings (:class:`DistillSettings`, declared once) plus the inputs,
    the output and how the call runs. :func:`resolve` returns a copy with ``loss`` and ``projection_init``
    parsed and ``progress`` off on ranks other than 0."""

    teacher: str | os.PathLike
    output: str | os.PathLike | None
    resume: bool = False
    run_dir: str | os.PathLike | None = None
    overwrite: bool = False
    progress: bool = False
    on_step: Any = None


def resolve(args: DistillArgs) -> tuple[DistillArgs, distributed.Dist]:
    """Parse the enums, apply ``threads``, join the torchrun group (if any) and check the arguments.

    Returns the resolved arguments and the process group handle."""
    import torch

    loss = Loss(args.loss) if args.loss is not None else (Loss.PAIR if args.pairs is not None else Loss.MSE)
    projection_init = ProjectionInit(args.projection_init)
    if args.threads is not None:
        if args.threads < 1:
            raise ValidationError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    dist = distributed.setup(args.device)  # under torchrun: join the group; one process: nothing
    args = replace(args, loss=loss, projection_init=projection_init, amp=cpu_auto_amp(args.amp, args.device),
                   progress=args.progress and dist.main)  # bars and tables on rank 0 only
    _check(args)
    return args, dist


def _check(a: DistillArgs) -> None:
    """The checks that need no file: which inputs are given, and whether the loss fits them."""
    if a.student is None and a.student_layers is None:
        raise ValidationError("give a --student, or --student-layers L to heal the teacher cut to L layers")
    if a.dim is None or a.dim < 1:
        raise ValidationError(f"--dim must be at least 1, got {a.dim}")
    if a.pca_samples < 1:
        raise ValidationError(f"--pca-samples must be at least 1, got {a.pca_samples}")
    if a.corpus is None and a.pairs is None:
        raise ValidationError("give a --corpus of sentences, or --pairs for a pair loss")
    if a.loss.on_pairs != (a.pairs is not None):
        raise ValidationError(f"--loss {a.loss.value} needs --pairs" if a.loss.on_pairs else
                              f"--pairs trains with a pair loss (pair or pair+mse), not --loss {a.loss.value}")
    if a.loss.on_pairs and a.augment:
        raise ValidationError("--augment adds single sentences, which a pair loss does not train on; "
                              "drop --augment or the pairs")
