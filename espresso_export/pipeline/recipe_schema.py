"""A recipe's schema: each step's settings class (declared once, in its stage) plus the keys a recipe adds, and
the parsed :class:`Recipe` with its :class:`Step` list. :mod:`espresso_export.pipeline.recipes` reads a file into
these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from espresso_export.core.settings import setting, settings_fields
from espresso_export.distilling.distill_settings import DistillSettings
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.finetuning.train_settings import TrainSettings
from espresso_export.publishing.push_settings import PushSettings
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.verification.verify_settings import VerifySettings


# --- the schema: each step's settings class (declared once, in its stage), plus the recipe's own keys ------------
# The keys of a step are the fields of its settings class that are marked ``recipe=True``
# (:mod:`espresso_export.core.settings`), with their types and defaults; what a recipe adds is declared here.

ShrinkStep = ShrinkSettings
ExportStep = ExportSettings
AutoStep = AutoSettings  # searches from the source (or the previous model); its model and export feed the next steps


RUNS_FOLDER = "runs"  # the default run folder is runs/NAME: never a folder another command wrote


@dataclass
class DistillStep(DistillSettings):
    """``teacher`` defaults to the model the previous shrink step cut (else the source). Without ``student``: after
    a shrink step, the teacher cut to the same layers is healed (the shrink's layers and dim are the defaults);
    after a train/distill step, that step's model is the student; as the first step, ``student_layers`` is needed."""

    teacher: Optional[str] = setting(None, path="model", cli=False, help="The teacher (default: the model the "
                                     "shrink step cut, else the source).")


@dataclass(kw_only=True)
class TrainStep(TrainSettings):
    """``train`` on the previous step's model (or the source)."""

    data: str = setting(path="data", cli=False, help="Training data (as `train --data`).")


@dataclass
class VerifyStep(VerifySettings):
    """verify the last export (else the last model) against ``against``; the thresholds are the gate: a failed one
    stops the run (exit 3)."""

    against: Optional[str] = setting(None, path="model", cli=False, help="The source model (default: the recipe's "
                                                                         "source).")


@dataclass(kw_only=True)
class PushStep(PushSettings):
    """push the last model with the last export and verify report. The token is never part of a recipe: it comes
    from HF_TOKEN or `hf auth login`. ``dry_run: true`` stages the upload in the step's folder."""

    repo_id: str = setting(cli=False, help="Hub repository, owner/name.")
    dry_run: bool = setting(False, cli=False, help="Stage the upload in the step's folder; upload nothing.")


def step_fields(cls: type) -> list:
    """The recipe keys of a step class (:class:`~espresso_export.core.settings.Field` objects)."""
    return [f for f in settings_fields(cls) if f.spec.recipe]


STEP_TYPES: dict[str, type] = {
    "shrink": ShrinkStep, "distill": DistillStep, "train": TrainStep, "export": ExportStep, "verify": VerifyStep,
    "push": PushStep, "auto": AutoStep,
}
MODEL_STEPS = ("shrink", "distill", "train")  # steps that write a model folder
REMOTE_CODE_KEY = "trust_remote_code"  # only the command line turns it on (`run --trust-remote-code`)
TOP_KEYS = ("name", "description", "source", "output", "threads", "steps")


@dataclass
class Step:
    kind: str
    config: Any  # one of the *Step dataclasses
    line: int | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, **{f.name: _plain(getattr(self.config, f.name)) for f in step_fields(type(self.config))}}


@dataclass
class Recipe:
    name: str
    source: str
    steps: list[Step]
    path: Path | None = None  # the recipe file
    output: Path | None = None  # the run folder (None: runs/NAME under the current folder)
    threads: int | None = None
    description: str | None = None

    def step(self, kind: str) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def folder(self, step: Step) -> Path:
        """The step's folder inside the run folder: ``1-shrink``, ``2-distill``, ..."""
        return self.run_folder / f"{self.steps.index(step) + 1}-{step.kind}"

    @property
    def run_folder(self) -> Path:
        return (self.output or Path.cwd() / RUNS_FOLDER / self.name).resolve()

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source,
                "recipe": str(self.path) if self.path else None, "output": str(self.run_folder),
                "threads": self.threads, "steps": [s.to_dict() for s in self.steps]}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
