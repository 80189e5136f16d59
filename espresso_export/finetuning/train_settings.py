"""The settings of ``train``, declared once: the API, the command and the recipe step derive from this class
(:mod:`espresso_export.core.settings`). Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from espresso_export.core.settings import check_choices, setting
from espresso_export.core.types import Attention
from espresso_export.core.common_settings import attention_setting
from espresso_export.training.trainer_settings import TrainerSettings

SENTENCE_LOSSES = ("angle", "cosent", "infonce")  # finetuning.ese.SentenceLoss
LAYER_WEIGHTINGS = ("log", "uniform", "learned")  # finetuning.ese.LayerWeighting


@dataclass
class TrainSettings(TrainerSettings):
    """:func:`espresso_export.finetuning.train.train_ese`: ESE (``ese``) or plain fine-tuning of the last layer.
    The ESE objective's and the loop's defaults are read from here."""

    ese: bool = setting(False, flags=("--ese/--no-ese",), help="Train every layer's first-k dims (ESE). Without it: "
                                                              "plain fine-tuning of the last layer.")
    loss: str = setting("angle", choices=SENTENCE_LOSSES, help="angle (AnglE: cosine + in-batch negatives + angle), cosent, or infonce.")
    compression_dim: int = setting(128, min=1, flags=("--compression-dim", "-k"),
                                   help="k: the leading dims ESE trains to carry the meaning.")
    alpha: float = setting(1.0, min=0.0, help="Weight of learn-to-express.")
    beta: float = setting(1.0, min=0.0, help="Weight of learn-to-compress.")
    layer_weights: str = setting("log", choices=LAYER_WEIGHTINGS, help="log (1/(1+ln i)), uniform, or learned.")
    layers_from: int = setting(1, min=1, help="First layer (1-based) ESE trains.")
    positive_threshold: Optional[float] = setting(
        None, help="Scored pairs at or above this score are positives for in-batch negatives (default: 80% of the "
                   "score range, 4.0 on STS-B).")
    data_limit: Optional[int] = setting(None, min=2, help="Use the first N examples.")
    attention: Optional[Attention] = attention_setting()
    lora: bool = setting(False, help="Train LoRA adapters only (needs the `lora` extra); merged into the weights at "
                                     "the end.")
    lora_r: int = setting(32, min=1, help="LoRA rank (alpha = rank).")
    batch_size: int = setting(32, min=1, help="Examples per batch.")
    lr: float = setting(2e-5, min=0.0, help="Peak learning rate (AdamW).")
    max_seq_len: Optional[int] = setting(None, min=8, help="Truncate training texts to this many tokens.")

    def __post_init__(self) -> None:
        check_choices(self)

    def objective(self):
        """The ESE objective these settings stand for (``alpha = beta = 0`` without ``ese``: the control)."""
        from espresso_export.finetuning.ese import EseObjectiveSettings, LayerWeighting, SentenceLoss

        return EseObjectiveSettings(loss=SentenceLoss(self.loss), compression_dim=self.compression_dim,
                                    alpha=self.alpha if self.ese else 0.0, beta=self.beta if self.ese else 0.0,
                                    layer_weights=LayerWeighting(self.layer_weights), layers_from=self.layers_from)

    def loop(self):
        """The training loop's settings (:class:`~espresso_export.training.task.LoopSettings`)."""
        from espresso_export.training.task import LoopSettings

        return LoopSettings(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, warmup=self.warmup,
                            weight_decay=self.weight_decay, max_grad_norm=self.max_grad_norm,
                            max_steps=self.max_steps, amp=self.amp, seed=self.seed,
                            checkpoint_every=self.checkpoint_every, device=self.device)

    def lora_settings(self):
        """The LoRA adapters to train, or ``None`` without ``lora``."""
        if not self.lora:
            return None
        from espresso_export.model.lora import LoraSettings

        return LoraSettings(r=self.lora_r, alpha=self.lora_r)
