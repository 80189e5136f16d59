"""The plan of one ``distill`` call: its settings, inputs and output as one object, checked before any file is read.

:func:`~espresso_export.distilling.run.distill` keeps its keyword signature (the public API) and packs its
arguments into a :class:`DistillPlan`; each phase (corpus -> teacher targets -> student and projection ->
training -> write) reads what it needs from that one object.
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
class DistillPlan(DistillSettings):
    """One ``distill`` call: its settings (:class:`DistillSettings`, declared once) plus the inputs, the output and
    how the call runs. :func:`resolve` returns a copy with ``loss`` and ``projection_init`` parsed and
    ``progress`` off on ranks other than 0."""

    teacher: str | os.PathLike
    output: str | os.PathLike | None
    resume: bool = False
    run_dir: str | os.PathLike | None = None
    overwrite: bool = False
    progress: bool = False
    on_step: Any = None


def resolve(plan: DistillPlan) -> tuple[DistillPlan, distributed.Dist]:
    """Parse the enums, apply ``threads``, join the torchrun group (if any) and check the plan.

    Returns the resolved plan and the process group handle."""
    import torch

    loss = Loss(plan.loss) if plan.loss is not None else (Loss.PAIR if plan.pairs is not None else Loss.MSE)
    projection_init = ProjectionInit(plan.projection_init)
    if plan.threads is not None:
        if plan.threads < 1:
            raise ValidationError(f"--threads must be at least 1, got {plan.threads}")
        torch.set_num_threads(plan.threads)
    dist = distributed.setup(plan.device)  # under torchrun: join the group; one process: nothing
    plan = replace(plan, loss=loss, projection_init=projection_init, amp=cpu_auto_amp(plan.amp, plan.device),
                   progress=plan.progress and dist.main)  # bars and tables on rank 0 only
    _check(plan)
    return plan, dist


def _check(plan: DistillPlan) -> None:
    """The checks that need no file: which inputs are given, and whether the loss fits them."""
    if plan.student is None and plan.student_layers is None:
        raise ValidationError("give a --student, or --student-layers L to heal the teacher cut to L layers")
    if plan.dim is None or plan.dim < 1:
        raise ValidationError(f"--dim must be at least 1, got {plan.dim}")
    if plan.pca_samples < 1:
        raise ValidationError(f"--pca-samples must be at least 1, got {plan.pca_samples}")
    if plan.corpus is None and plan.pairs is None:
        raise ValidationError("give a --corpus of sentences, or --pairs for a pair loss")
    if plan.loss.on_pairs != (plan.pairs is not None):
        raise ValidationError(f"--loss {plan.loss.value} needs --pairs" if plan.loss.on_pairs else
                              f"--pairs trains with a pair loss (pair or pair+mse), not --loss {plan.loss.value}")
    if plan.loss.on_pairs and plan.augment:
        raise ValidationError("--augment adds single sentences, which a pair loss does not train on; "
                              "drop --augment or the pairs")
