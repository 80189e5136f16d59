"""A sentence-transformers folder's module chain: ``modules.json`` and the configs it points at (pooling, head,
length, prompts and similarity), read without loading any weights."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from espresso_export.core.errors import (
    CorruptCheckpointError,
    UnsupportedModelError,
    ValidationError,
)
from espresso_export.core.prompts import StUsage
from espresso_export.core.types import Pooling

_ST_POOLING_KEYS = {
    "pooling_mode_cls_token": Pooling.CLS,
    "pooling_mode_mean_tokens": Pooling.MEAN,
    "pooling_mode_lasttoken": Pooling.LAST_TOKEN,
    "pooling_mode_max_tokens": Pooling.MAX,
}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptCheckpointError(f"cannot read {path}: {e}") from e


@dataclass
class _StLayout:
    transformer_dir: Path
    pooling: Pooling | None = None
    post: list[tuple[str, Path]] = field(default_factory=list)  # ("Dense" | "Normalize", folder)
    max_seq_length: int | None = None
    do_lower_case: bool = False
    usage: StUsage = field(default_factory=StUsage)
    pooling_error: str | None = None  # a pooling we cannot run: refused unless --pooling picks another


def read_usage(folder: Path, pooling_config: dict | None) -> StUsage:
    """The prompts and similarity of the sentence-transformers folder ``folder`` (none for a plain one)."""
    path = folder / "config_sentence_transformers.json"
    try:
        return StUsage.from_config(read_json(path) if path.is_file() else {}, where=str(path),
                                   include_prompt=(pooling_config or {}).get("include_prompt", True))
    except ValidationError as e:
        raise CorruptCheckpointError(e.message) from None


def read_st_layout(folder: Path) -> _StLayout:
    """Read ``modules.json`` and the module configs it points at."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return _StLayout(transformer_dir=folder)
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    layout: _StLayout | None = None
    rest: list[dict] = []
    for m in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = m.get("type", "").rsplit(".", 1)[-1]
        sub = _module_folder(folder, m.get("path", ""), modules_file)
        if kind == "Transformer" and layout is None:
            layout = _StLayout(transformer_dir=sub)
            cfg_file = next((sub / n for n in ("sentence_bert_config.json", "sentence_transformer_config.json")
                             if (sub / n).is_file()), None)
            if cfg_file is not None:
                cfg = read_json(cfg_file)
                layout.max_seq_length = cfg.get("max_seq_length")
                layout.do_lower_case = bool(cfg.get("do_lower_case", False))
        else:
            rest.append({"kind": kind, "dir": sub})
    if layout is None:
        raise UnsupportedModelError(f"{modules_file} has no Transformer module; only transformer-based models are supported")
    pooling_config = None
    for m in rest:
        kind, sub = m["kind"], m["dir"]
        if kind == "Pooling":
            pooling_config = read_json(sub / "config.json")
            try:
                layout.pooling = _pooling_from_st_config(pooling_config)
            except UnsupportedModelError as e:
                layout.pooling_error = f"{e.message} in {sub / 'config.json'}"
        elif kind in ("Dense", "Normalize"):
            layout.post.append((kind, sub))
        else:
            raise UnsupportedModelError(f"unsupported sentence-transformers module {kind!r} in {modules_file}")
    layout.usage = read_usage(folder, pooling_config)
    return layout


def _module_folder(folder: Path, path: str, modules_file: Path) -> Path:
    """A module's folder, which must resolve inside ``folder``: weights are never read from elsewhere."""
    sub = folder / path
    if not sub.resolve().is_relative_to(folder.resolve()):
        raise ValidationError(f"{modules_file}: module path {path!r} resolves to {sub.resolve()}, outside {folder}")
    return sub


def _pooling_from_st_config(cfg: dict) -> Pooling:
    if "pooling_mode" in cfg:  # sentence-transformers >= 6 style
        mode = cfg["pooling_mode"]
        mode = mode[0] if isinstance(mode, list) else mode
        try:
            return Pooling(mode)
        except ValueError as e:
            raise UnsupportedModelError(f"unsupported pooling mode {mode!r}{_POOLING_CHOICES}") from e
    for key, mode in _ST_POOLING_KEYS.items():
        if cfg.get(key):
            return mode
    on = [k.removeprefix("pooling_mode_") for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
    raise UnsupportedModelError(f"unsupported pooling mode {', '.join(on) or 'none'}{_POOLING_CHOICES}")


_POOLING_CHOICES = (f" (supported: {', '.join(p.value for p in Pooling)}; --pooling picks one, which changes the "
                    "embeddings: verify the output against the source)")


__all__ = ["read_json", "read_st_layout", "read_usage"]
