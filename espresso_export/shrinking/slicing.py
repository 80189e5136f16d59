"""Keep a subset of an encoder's layers.

Layer indices are 0-based positions in the layer stack: a 6-layer model has
layers 0..5, and "the first 3" are 0, 1, 2.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from espresso_export.model.architectures import Architecture, get_attr_path, set_attr_path
from espresso_export.core.errors import ValidationError
from espresso_export.core.parsing import parse_layers  # noqa: F401  (re-exported: callers import it from here)
from espresso_export.core.types import Select


def spread(depth: int, count: int) -> list[int]:
    """``count`` layers evenly over ``depth``, always ending with the last one.

    6 layers, 3 kept -> [1, 3, 5]; 12 layers, 4 kept -> [2, 5, 8, 11].
    """
    return [round((i + 1) * depth / count) - 1 for i in range(count)]


def select_layers(depth: int, layers: int | Sequence[int], select: Select = Select.AUTO, *, ese_trained: bool = False,
                  option: str = "--layers") -> list[int]:
    """The sorted 0-based indices to keep; validates against ``depth`` (``option`` names the flag in errors)."""
    if isinstance(layers, int):
        if not 1 <= layers <= depth:
            raise ValidationError(f"{option} {layers}: {depth_hint(depth)}")
        mode = Select(select)
        if mode is Select.AUTO:
            mode = Select.FIRST if ese_trained else Select.SPREAD
        return list(range(layers)) if mode is Select.FIRST else spread(depth, layers)
    chosen = list(layers)
    if not chosen:
        raise ValidationError(f"{option} list is empty: {depth_hint(depth)}")
    if len(set(chosen)) != len(chosen):
        raise ValidationError(f"{option} {','.join(map(str, chosen))} has duplicates: {depth_hint(depth)}")
    bad = [i for i in chosen if i < 0 or i >= depth]
    if bad:
        raise ValidationError(f"{option} indices {bad} are out of range: {depth_hint(depth)}")
    return sorted(chosen)


def depth_hint(depth: int, *, indices: bool = True) -> str:
    """What a layer option accepts for a model of ``depth`` layers, for every error about it."""
    if not indices:
        return f"the model has {depth} layers; give layer counts from 1 to {depth}"
    example = ",".join(map(str, range(0, depth, 2))) if depth > 2 else "0"
    return (f"the model has {depth} layers; give a count from 1 to {depth} or distinct layer indices from 0 to "
            f"{depth - 1} ({example})")


def cut(model, arch: Architecture, keep: Sequence[int]) -> None:
    """Keep only the layers ``keep`` in ``model`` (in place) and make its config say so.

    After this, ``model.save_pretrained`` writes only the kept weights, renumbered
    0..L-1, and ``AutoModel.from_pretrained`` rebuilds exactly this model.
    """
    import torch

    stack = get_attr_path(model, arch.layers_path)
    kept = torch.nn.ModuleList([stack[i] for i in keep])
    set_attr_path(model, arch.layers_path, kept)
    config = model.config
    old_depth = getattr(config, arch.depth_field)
    setattr(config, arch.depth_field, len(keep))
    for name in arch.per_layer_fields:
        values = getattr(config, name, None)
        if isinstance(values, (list, tuple)) and len(values) == old_depth:
            setattr(config, name, [values[i] for i in keep])
    for new_idx, layer in enumerate(kept):
        for module in layer.modules():  # decoders index their KV cache by layer
            if hasattr(module, "layer_idx"):
                module.layer_idx = new_idx


@contextmanager
def temporary_cut(model, arch: Architecture, keep: Sequence[int]) -> Iterator[None]:
    """Run ``model`` with only the layers ``keep`` inside the block, then restore it exactly.

    No weights are copied: the kept blocks are the model's own. Used to time or
    encode several depths of one loaded model (``sweep``).
    """
    stack = get_attr_path(model, arch.layers_path)
    config = model.config
    saved = {name: getattr(config, name) for name in (arch.depth_field, *arch.per_layer_fields) if hasattr(config, name)}
    layer_idx = [(m, m.layer_idx) for m in stack.modules() if hasattr(m, "layer_idx")]
    cut(model, arch, keep)
    try:
        yield
    finally:
        set_attr_path(model, arch.layers_path, stack)
        for name, value in saved.items():
            setattr(config, name, value)
        for module, idx in layer_idx:
            module.layer_idx = idx
