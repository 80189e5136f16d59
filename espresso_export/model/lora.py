"""LoRA adapters (via ``peft``) for backbones too big to fine-tune fully.

``add_lora`` injects low-rank adapters into every linear layer of the
checkpoint's backbone *in place* and freezes everything else, so the rest of
the toolkit (``EseObjective``, ``encode``) keeps using ``ckpt.model`` as before.
``merge_lora`` folds the adapters back into the weights before saving: the
output is a plain transformers model that needs neither peft nor espresso-export.
Defaults follow the ESE/BeLLM papers: ``r = 32``, ``alpha = 32``, dropout 0.1.

Needs the ``lora`` extra: ``pip install 'espresso-export[lora]'``.
"""

from __future__ import annotations

from dataclasses import dataclass

from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require


@dataclass(frozen=True)
class LoraSettings:
    r: int = 32
    alpha: int = 32
    dropout: float = 0.1
    target_modules: str | tuple[str, ...] = "all-linear"

    def to_dict(self) -> dict:
        tm = self.target_modules
        return {"r": self.r, "alpha": self.alpha, "dropout": self.dropout,
                "target_modules": tm if isinstance(tm, str) else list(tm)}


def _peft():
    require("lora")
    import peft

    return peft


def add_lora(ckpt, settings: LoraSettings = LoraSettings()):
    """Add LoRA adapters to ``ckpt.model`` in place; returns the peft wrapper (needed by :func:`merge_lora`)."""
    peft = _peft()
    if settings.r < 1:
        raise ValidationError(f"--lora-r must be at least 1, got {settings.r}")
    config = peft.LoraConfig(
        r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
        target_modules=settings.target_modules if isinstance(settings.target_modules, str) else list(settings.target_modules),
    )
    wrapper = peft.get_peft_model(ckpt.model, config)
    # get_peft_model swaps the targeted Linear modules inside ckpt.model itself and freezes the rest
    return wrapper


def trainable_parameters(model) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def merge_lora(ckpt, wrapper) -> None:
    """Fold the adapters into the base weights; ``ckpt.model`` becomes a plain model again."""
    merged = wrapper.merge_and_unload()
    for p in merged.parameters():
        p.requires_grad_(True)
    ckpt.model = merged
