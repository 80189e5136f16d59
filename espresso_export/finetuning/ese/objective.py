"""The ESE objective of one batch, :class:`EseObjective`: task loss + alpha * learn-to-express +
beta * learn-to-compress over the trained layers (the formulas: :mod:`espresso_export.finetuning.ese`)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from espresso_export.core.errors import ValidationError
from espresso_export.finetuning.ese.compress import compress_loss
from espresso_export.finetuning.ese.config import EseObjectiveSettings, LayerWeighting, log_layer_weights
from espresso_export.finetuning.ese.data import EseBatch
from espresso_export.finetuning.ese.losses import sentence_loss


class EseObjective(torch.nn.Module):
    """The ESE loss of one batch: ``total, parts = objective.loss(batch)``.

    ``parts`` holds floats for logging: ``task``, ``express``, ``compress``,
    ``total``, and the per-layer values ``express/L{i}``, ``compress/L{i}``.
    With ``layer_weights='learned'`` the objective has parameters: give
    ``objective.parameters()`` to the optimizer with the model's.
    """

    def __init__(self, config: EseObjectiveSettings, depth: int, hidden_size: int, ckpt=None, *, max_length: int | None = None):
        super().__init__()
        self.config = config
        self.depth = depth
        self.hidden_size = hidden_size
        self.ckpt = ckpt
        self.max_length = max_length  # tokens per text while training (None: the checkpoint's limit)
        k = config.compression_dim
        if not 1 <= k <= hidden_size:
            raise ValidationError(f"--compression-dim must be between 1 and {hidden_size} (the model's hidden size), got {k}")
        if config.alpha < 0 or config.beta < 0:
            raise ValidationError(f"--alpha and --beta must be >= 0, got {config.alpha} and {config.beta}")
        self.layers = list(range(config.layers_from, depth + 1))
        log_layer_weights(depth, config.layers_from)  # validates layers_from
        weighting = LayerWeighting(config.layer_weights)
        n_shallow = len(self.layers) - 1
        self.logits = torch.nn.Parameter(torch.zeros(n_shallow)) if weighting is LayerWeighting.LEARNED else None

    @classmethod
    def from_checkpoint(cls, ckpt, config: EseObjectiveSettings, *, max_length: int | None = None) -> EseObjective:
        return cls(config, ckpt.depth, ckpt.hidden_size, ckpt=ckpt, max_length=max_length)

    @property
    def uses_layers(self) -> list[int]:
        """Layers whose pooled output the loss reads (1-based; the last is always included)."""
        return self.layers if (self.config.alpha or self.config.beta) else [self.depth]

    def layer_weights(self, grad_scale: float = 1.0) -> dict[int, torch.Tensor]:
        """``{i: w_i}`` for the trained layers; the last layer's weight is 1.

        ``grad_scale`` scales the gradient the learned logits receive (not their value): data-parallel
        ranks that each compute the whole batch's loss pass ``1 / world``."""
        weighting = LayerWeighting(self.config.layer_weights)
        shallow = self.layers[:-1]
        device = self._device()
        if weighting is LayerWeighting.LOG:
            values = torch.tensor(log_layer_weights(self.depth, self.config.layers_from)[:-1], device=device)
        elif weighting is LayerWeighting.UNIFORM:
            values = torch.ones(len(shallow), device=device)
        else:
            logits = self.logits if grad_scale == 1.0 else self.logits * grad_scale + self.logits.detach() * (1 - grad_scale)
            values = len(shallow) * torch.softmax(logits, dim=0)
        out = {i: values[j] for j, i in enumerate(shallow)}
        out[self.depth] = torch.ones((), device=device)
        return out

    def _device(self) -> torch.device:
        """Where the model (or the learned logits) is: the tensors the loss makes must be there too."""
        if self.logits is not None:
            return self.logits.device
        if self.ckpt is not None:
            from espresso_export.model.embed import model_device

            return model_device(self.ckpt.model)
        return torch.device("cpu")

    def compute(self, pooled: Mapping[int, torch.Tensor], batch: EseBatch, *,
                param_grad_scale: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss from pooled per-layer embeddings ``{i: (len(batch.texts), d)}`` (pure; no model).

        ``param_grad_scale`` scales the gradient of the objective's own parameters (see :meth:`layer_weights`)."""
        cfg = self.config
        k = cfg.compression_dim
        last = self.depth
        full = batch.split(pooled[last])
        task = sentence_loss(cfg.loss, full, cfg.angle)
        parts: dict[str, torch.Tensor] = {"task": task.detach()}
        total = task
        if cfg.alpha or cfg.beta:
            weights = self.layer_weights(param_grad_scale)
            express = task.new_zeros(())
            compress = task.new_zeros(())
            for i in self.layers:
                w = weights[i].to(task)
                x = pooled[i]
                if cfg.alpha:
                    term = sentence_loss(cfg.loss, batch.split(x).first(k), cfg.angle)
                    express = express + w * term
                    parts[f"express/L{i}"] = term.detach()
                if cfg.beta:
                    term = compress_loss(x, k, temperature=cfg.kl_temperature)
                    compress = compress + w * term
                    parts[f"compress/L{i}"] = term.detach()
            total = total + cfg.alpha * express + cfg.beta * compress
            parts["express"] = express.detach()
            parts["compress"] = compress.detach()
        parts["total"] = total.detach()
        # one device-to-host copy for every logged value: a float() per term would wait on the device each time
        values = torch.stack([v.float().reshape(()) for v in parts.values()]).tolist()
        return total, dict(zip(parts, values))

    def pooled(self, batch: EseBatch) -> dict[int, torch.Tensor]:
        """Forward ``batch``'s texts through the checkpoint (one pass): ``{i: (len(batch.texts), d)}`` for the used layers."""
        from espresso_export.model.embed import model_device, model_inputs, pooled_layer_states, to_device, tokenize

        if self.ckpt is None:
            raise ValueError("EseObjective.loss needs a checkpoint; use EseObjective.from_checkpoint")
        inputs = tokenize(self.ckpt, batch.texts, self.max_length)
        inputs = to_device(inputs, model_inputs(self.ckpt.model), model_device(self.ckpt.model))
        return pooled_layer_states(self.ckpt, inputs, self.uses_layers)

    def loss(self, batch: EseBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Forward ``batch`` through the checkpoint (one pass, all hidden states) and return the loss."""
        return self.compute(self.pooled(batch), batch)
