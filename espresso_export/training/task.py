"""What a trainer hands to the shared loop: a :class:`TrainingTask`, a :class:`LoopSettings`; what it gets back:
a :class:`TrainResult`. The loop itself is :mod:`espresso_export.training.loop`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from espresso_export.core.renamed import old_names
from espresso_export.core.settings import field_of
from espresso_export.training.trainer_settings import TrainerSettings, bucket_setting

# The one training loss shown everywhere (progress bar, epoch lines, tables, JSON): the mean of the step losses
# of the current epoch, so the bar, the line printed at the epoch's end and the result agree.
LOSS_LABEL = "epoch-mean loss"


class TrainingTask(ABC):
    """What to train. ``train`` owns the loop; a task owns the model and the loss.

    Items are addressed by index ``0 .. len(task) - 1``; a batch is a list of indices.
    """

    item_unit = "sent"  # what an item is, in the progress bar's rate ("sent/s")
    score_label = "eval"  # how the progress lines name evaluate()'s score (a mean over cuts says so)

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


def _declared(name: str):
    """The default :class:`TrainerSettings` declares for ``name``: the loop repeats no trainer default."""
    return field_of(TrainerSettings, name).default


@dataclass(kw_only=True)
class LoopSettings:
    """What the loop is told: the optimiser, the schedule, the batches, where it runs.

    The defaults are the declared ones (:class:`~espresso_export.training.trainer_settings.TrainerSettings`);
    ``batch_size`` and ``lr`` have none because each trainer declares its own."""

    epochs: int = _declared("epochs")
    batch_size: int
    lr: float
    weight_decay: float = _declared("weight_decay")
    warmup: float = _declared("warmup")  # fraction of the total steps spent warming up
    max_grad_norm: float = _declared("max_grad_norm")
    seed: int = _declared("seed")
    bucket: bool = bucket_setting().default  # length-bucketed batches
    max_steps: int | None = _declared("max_steps")  # stop (and schedule) at this many steps
    amp: str = _declared("amp")  # auto | off | bf16 | fp16 (distill resolves auto to bf16 on a bf16 CPU first)
    checkpoint_every: int = _declared("checkpoint_every")  # steps; 0 = only at epoch ends and on Ctrl-C
    device: str = _declared("device")

    def identity(self) -> dict:
        """The fields a resumed run must share with the run that wrote the checkpoint."""
        d = asdict(self)
        for k in ("checkpoint_every", "device"):
            d.pop(k)
        return d


__getattr__ = old_names(__name__, {"TrainConfig": ("LoopSettings", lambda: LoopSettings)})


@dataclass
class TrainResult:
    steps: int
    total_steps: int
    epochs: float
    initial_score: float | None
    best_score: float | None
    best_step: int | None
    epoch_mean_loss: float | None  # the mean step loss of the last epoch (LOSS_LABEL): the loss every view shows
    seconds: float  # training time of this invocation
    items_per_second: float
    history: list[dict] = field(default_factory=list)
    resumed_from: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)
