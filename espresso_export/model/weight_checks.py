"""Checks of a checkpoint's weights as they are loaded: readable safetensors, finite values in every module,
every tensor the model needs, shapes that fit the config, and a tokenizer that fits the embedding table."""

from __future__ import annotations

import re
from pathlib import Path

from espresso_export.core.errors import CorruptCheckpointError, ValidationError


def check_safetensors(files: list[Path]) -> None:
    """Refuse a safetensors file that cannot be opened or is cut short."""
    from safetensors import safe_open

    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                keys = list(fh.keys())
                if keys:  # touching the last tensor catches files cut short
                    fh.get_slice(keys[-1])
        except Exception as e:  # safetensors raises its own error type for any malformed file
            raise CorruptCheckpointError(f"corrupt or truncated safetensors file {f}: {e}") from e


def check_finite_tensors(tensors: dict, where: Path) -> None:
    """Refuse NaN or Inf in any floating-point tensor of ``tensors`` (a module's weights read from ``where``)."""
    import torch

    for name, p in tensors.items():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            raise CorruptCheckpointError(f"weights in {where} contain NaN or Inf (tensor {name})")


def check_complete(info: dict, tdir: Path) -> None:
    """Refuse a checkpoint that lacks tensors the model needs: transformers fills them with random ones (its
    warning silenced here). The pooler is left out of many sentence-transformers checkpoints and never used here."""
    missing = [k for k in info.get("missing_keys") or () if not k.startswith("pooler.") and "position_ids" not in k]
    if missing:
        shown = ", ".join(sorted(missing)[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise CorruptCheckpointError(f"the weights in {tdir} lack {len(missing)} tensors the model needs ({shown}): "
                                     "the checkpoint is incomplete")


def check_shapes(info: dict, tdir: Path) -> None:
    """A tensor whose shape is not the one the config gives is a corrupt checkpoint, named with both shapes."""
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched:
        key, found, wanted = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise CorruptCheckpointError(f"the weights in {tdir} do not fit its config.json: tensor {key} has shape "
                                     f"{list(found)} where the config gives {list(wanted)}{more}")


_LAYER_KEY = re.compile(r"^(?P<prefix>.*?\b(?:layer|layers|h|block|blocks)\.(?P<index>\d+))\.")


def warn_ignored(info: dict, n: int, tdir: Path) -> None:
    """Weights of layers the config does not have (config.json giving 1 layer over weights of 2) are ignored by
    transformers without a word: one warning line names them. Heads of other tasks (``cls.*``, ``lm_head``) are not
    layers and are not reported."""
    layers = sorted({m.group("prefix") for k in info.get("unexpected_keys") or () if (m := _LAYER_KEY.match(k))})
    if not layers:
        return
    from espresso_export.core.console import err_console

    shown = ", ".join(f"{p}.*" for p in layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
    err_console().print(f"warning: {tdir}/config.json gives {n} layer{'s' if n != 1 else ''} but the weights hold "
                        f"more: {shown} are ignored", markup=False, highlight=False, soft_wrap=True)


def check_tokenizer_fits(tokenizer, model, tdir: Path) -> None:
    """A folder without tokenizer files loads (transformers builds an empty tokenizer of 5 special tokens) and
    turns every word into [UNK]: refused, as is a tokenizer far smaller than the embedding table it feeds."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) < rows // 2:
        raise ValidationError(f"the tokenizer in {tdir} has {len(tokenizer):,} tokens for an embedding table of "
                              f"{rows:,} rows: its tokenizer files (tokenizer.json, vocab.txt, ...) are missing or "
                              "belong to another model")
