"""The ESE objective's settings: which sentence loss, the compression width ``k``, the term weights, the layer
weights. Their defaults are those ``train`` declares (:class:`~espresso_export.finetuning.train_settings.
TrainSettings`). Torch-free, so that settings and recipes can check these values without loading torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from espresso_export.core.renamed import old_names
from espresso_export.core.errors import ValidationError
from espresso_export.core.settings import field_of
from espresso_export.finetuning.train_settings import TrainSettings

DEFAULT_SCALE = 20.0  # 1 / temperature 0.05, the AnglE/CoSENT/SimCSE default


class LayerWeighting(str, Enum):
    LOG = "log"  # w_i = 1 / (1 + ln i): the paper's default
    UNIFORM = "uniform"
    LEARNED = "learned"  # softmax-normalised learnable logits


class SentenceLoss(str, Enum):
    ANGLE = "angle"  # CoSENT cosine term + in-batch negatives + angle term (AnglE)
    COSENT = "cosent"  # ranking of pair cosines by their score
    INFONCE = "infonce"  # in-batch negatives (and hard negatives) with a temperature


def log_layer_weights(depth: int, start: int = 1) -> list[float]:
    """``[w_start, ..., w_n]``: ``1 / (1 + ln i)`` for ``i < n``, and 1 for the last layer."""
    if not 1 <= start <= depth:
        raise ValidationError(f"--layers-from must be between 1 and {depth} (the model's depth), got {start}")
    return [1.0 / (1.0 + math.log(i)) for i in range(start, depth)] + [1.0]


@dataclass(frozen=True)
class AngleWeights:
    """Weights and scales of AnglE's three terms (its ``cosine_w``, ``ibn_w``, ``angle_w``)."""

    cosine: float = 1.0
    ibn: float = 1.0
    angle: float = 1.0
    cosine_scale: float = DEFAULT_SCALE
    ibn_scale: float = DEFAULT_SCALE
    angle_scale: float = DEFAULT_SCALE


def _declared(name: str):
    """The default ``train`` declares for ``name``: the objective repeats none of them."""
    return field_of(TrainSettings, name).default


@dataclass(frozen=True)
class EseObjectiveSettings:
    """What :class:`~espresso_export.finetuning.ese.objective.EseObjective` computes; ``alpha = beta = 0`` is plain
    fine-tuning (the control). ``kl_temperature`` and ``angle`` are not options of ``train``."""

    loss: SentenceLoss = SentenceLoss(_declared("loss"))
    compression_dim: int = _declared("compression_dim")  # k
    alpha: float = _declared("alpha")  # weight of learn-to-express
    beta: float = _declared("beta")  # weight of learn-to-compress
    layer_weights: LayerWeighting = LayerWeighting(_declared("layer_weights"))
    layers_from: int = _declared("layers_from")  # first (1-based) layer trained by the ESE terms
    kl_temperature: float = 1.0
    angle: AngleWeights = field(default_factory=AngleWeights)

    def to_dict(self) -> dict:
        return {
            "loss": SentenceLoss(self.loss).value, "compression_dim": self.compression_dim, "alpha": self.alpha,
            "beta": self.beta, "layer_weights": LayerWeighting(self.layer_weights).value,
            "layers_from": self.layers_from, "kl_temperature": self.kl_temperature,
            "angle": dict(self.angle.__dict__),
        }


__getattr__ = old_names(__name__, {"EseConfig": ("EseObjectiveSettings", lambda: EseObjectiveSettings)})
