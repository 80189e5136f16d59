"""Bidirectional attention for decoder backbones (Qwen2, Qwen3, Llama, Mistral): ``all`` layers (ESE's LLM
recipe, with mean pooling) or only the ``last`` one (BeLLM).

``all`` uses transformers' own switch (``config.is_causal = False``), so plain transformers reloads it. ``last``
has no config switch: a forward pre-hook on the layer swaps the causal mask for
``create_bidirectional_mask`` built from the padding mask, through the model's own mask factory (eager, SDPA and
flex attention alike). The per-layer choice is recorded in the config (``espresso_attention``, sliced with the
layers) and :func:`apply` re-installs it; :func:`espresso_export.model.checkpoint.load` calls it for every
decoder, and a plain transformers user of a ``last`` model calls ``espresso_export.model.bidirectional.apply``.
"""

from __future__ import annotations

from collections.abc import Sequence

from espresso_export.core.errors import ValidationError
from espresso_export.core.types import Attention
from espresso_export.model.architectures import (
    Architecture,
    for_model_type,
    get_attr_path,
)

CONFIG_FIELD = "espresso_attention"
CAUSAL, BIDIRECTIONAL = "causal", "bidirectional"
_STATE = "_espresso_bidirectional_state"


def _arch(model, arch: Architecture | None) -> Architecture:
    return arch or for_model_type(getattr(model.config, "model_type", None))


def _attention_module(layer):
    attn = getattr(layer, "self_attn", None)
    if attn is None:
        raise ValidationError(f"{type(layer).__name__} has no self_attn module; cannot switch its attention")
    return attn


def bidirectional_layers(model) -> list[int]:
    """0-based indices of the layers the config records as bidirectional (empty for a causal model)."""
    per_layer = getattr(model.config, CONFIG_FIELD, None) or []
    return [i for i, kind in enumerate(per_layer) if kind == BIDIRECTIONAL]


def make_bidirectional(model, mode: Attention | str | Sequence[int], arch: Architecture | None = None) -> list[int]:
    """Make ``mode``'s layers bidirectional (in place), record it in ``model.config``; returns their 0-based indices.

    ``mode`` is ``all``, ``last``, ``causal`` (undo) or an explicit list of 0-based layer indices.
    """
    arch = _arch(model, arch)
    if not arch.decoder:
        raise ValidationError(f"--bidirectional applies to decoder models; {arch.family} already attends both ways")
    depth = len(get_attr_path(model, arch.layers_path))
    if isinstance(mode, (str, Attention)):
        mode = Attention(mode)
        chosen = {Attention.ALL: range(depth), Attention.LAST: [depth - 1], Attention.CAUSAL: []}[mode]
    else:
        chosen = list(mode)
        bad = [i for i in chosen if not 0 <= i < depth]
        if bad:
            raise ValidationError(f"bidirectional layer indices {bad} are out of range 0..{depth - 1}")
    chosen = set(chosen)
    setattr(model.config, CONFIG_FIELD, [BIDIRECTIONAL if i in chosen else CAUSAL for i in range(depth)])
    return apply(model, arch)


def apply(model, arch: Architecture | None = None) -> list[int]:
    """Install the attention the config records (idempotent); returns the bidirectional layers (0-based)."""
    arch = _arch(model, arch)
    stack = get_attr_path(model, arch.layers_path)
    per_layer = getattr(model.config, CONFIG_FIELD, None)
    _remove_hooks(model)
    if per_layer is None:
        return []
    if len(per_layer) != len(stack):
        raise ValidationError(f"config field {CONFIG_FIELD} lists {len(per_layer)} layers but the model has {len(stack)}")
    unknown = sorted({k for k in per_layer if k not in (CAUSAL, BIDIRECTIONAL)})
    if unknown:
        raise ValidationError(f"config field {CONFIG_FIELD} has unknown values {unknown}; expected {CAUSAL!r} or {BIDIRECTIONAL!r}")
    chosen = bidirectional_layers(model)
    everywhere = len(chosen) == len(stack)
    if everywhere:
        model.config.is_causal = False
    elif getattr(model.config, "is_causal", True) is False:
        model.config.is_causal = True
    for i, layer in enumerate(stack):
        _attention_module(layer).is_causal = i not in chosen
    if chosen and not everywhere:
        _install_hooks(model, [stack[i] for i in chosen])
    return chosen


def describe(model) -> dict | None:
    """What to record in espresso.json, or None for an unchanged (causal) model."""
    chosen = bidirectional_layers(model)
    if not chosen:
        return None
    depth = len(getattr(model.config, CONFIG_FIELD))
    mode = "all" if len(chosen) == depth else ("last" if chosen == [depth - 1] else "layers")
    return {"mode": mode, "bidirectional_layers": chosen, "config_field": CONFIG_FIELD,
            "config_is_causal": getattr(model.config, "is_causal", True)}


class _MaskHolder:
    """The 2D padding mask of the forward call in progress."""

    mask = None


def _install_hooks(model, layers) -> None:
    from transformers.masking_utils import create_bidirectional_mask

    holder = _MaskHolder()

    def capture(module, args, kwargs):
        holder.mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)

    def swap(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        mask = holder.mask
        if mask is not None and mask.dim() != 2:
            raise ValidationError("a partly bidirectional model needs a 2D (batch, seq) attention mask")
        kwargs["attention_mask"] = create_bidirectional_mask(
            config=model.config, inputs_embeds=hidden, attention_mask=mask, allow_is_bidirectional_skip=False
        )
        return args, kwargs

    handles = [model.register_forward_pre_hook(capture, with_kwargs=True)]
    handles += [layer.register_forward_pre_hook(swap, with_kwargs=True) for layer in layers]
    object.__setattr__(model, _STATE, handles)


def _remove_hooks(model) -> None:
    for handle in getattr(model, _STATE, None) or []:
        handle.remove()
    if hasattr(model, _STATE):
        object.__delattr__(model, _STATE)


def switch(ckpt, mode: Attention | str) -> list[int]:
    """Set a loaded checkpoint's attention; a bidirectional decoder pools by mean (ESE's LLM recipe)."""
    from espresso_export.core.types import Pooling

    chosen = make_bidirectional(ckpt.model, mode, ckpt.arch)
    if chosen:
        ckpt.pooling = Pooling.MEAN
    return chosen
