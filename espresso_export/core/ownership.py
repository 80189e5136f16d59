"""Which folders are espresso-export's own outputs: ``--overwrite`` replaces those and nothing else.

A folder is the tool's when a record in it says so by its content (``espresso.json``, ``export.json``,
``sweep.json``, ``run.json``, ... each has fields only the tool writes) and every other entry in it is one that
kind of output holds. A file name alone proves nothing: a user's ``report.json`` beside a thesis is not an output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from espresso_export.core.tempfiles import is_temp_name

# the files a sentence-transformers folder written by the tool holds (backbone, tokenizer, module chain, card)
MODEL_FILES = frozenset({
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "sentencepiece.bpe.model", "spiece.model", "spm.model", "tokenizer.model",
    "chat_template.jinja", "chat_template.json", "modules.json", "sentence_bert_config.json",
    "config_sentence_transformers.json", "README.md", ".gitattributes", "espresso.json", "export.json",
    "verify_report.json", "onnx", "openvino",
})
MODEL_PATTERNS = (r"model-\d+-of-\d+\.safetensors", r"\d+_[A-Za-z]+")  # weight shards; module folders (1_Pooling)
CARD_MARK = "espresso-export"  # a staged card (push --dry-run of a folder without espresso.json) names the tool


def _dict(data) -> dict:
    return data if isinstance(data, dict) else {}


def _versioned(data, *keys: str) -> bool:
    d = _dict(data)
    return isinstance(d.get("espresso_version"), str) and all(k in d for k in keys)


# record -> (its content is the tool's, the names the other entries may have)
KINDS: dict[str, tuple[Callable[[object], bool], frozenset[str], tuple[str, ...]]] = {
    "espresso.json": (lambda d: _versioned(d), MODEL_FILES, MODEL_PATTERNS),
    "export.json": (lambda d: _versioned(d, "format_version"), MODEL_FILES, MODEL_PATTERNS),
    "sweep.json": (lambda d: _versioned(d, "source"), frozenset({"sweep.csv", "sweep.png"}), ()),
    "report.json": (lambda d: _versioned(d, "gate", "sts"), frozenset({"report.md"}), ()),
    "run.json": (lambda d: isinstance(_dict(d).get("recipe"), dict) and isinstance(_dict(d).get("steps"), list)
                 and "output" in d["recipe"], frozenset(), (r"\d+-[a-z-]+(\.run)?",)),  # step folders
    "push.json": (lambda d: isinstance(_dict(d).get("repo_id"), str) and isinstance(_dict(d).get("files"), list)
                  and isinstance(_dict(d).get("card"), dict), frozenset(), ()),
    "trainer.json": (lambda d: "format" in _dict(d) and "run_hash" in _dict(d),  # a training checkpoint
                     frozenset({"model.safetensors", "optimizer.safetensors", "rng.safetensors"}), ()),
    "auto.json": (lambda d: _versioned(d, "objective", "candidates"),
                  frozenset({"auto.csv", "auto.png", "model", "export", "verify.json", "README.md", "recipe.yaml",
                             # the texts its recipe reads (searching.recipe_file; core imports no stage)
                             "healing-texts.txt", "calibration-texts.txt", "vocab-texts.txt"}), ()),
    "best.json": (lambda d: set(_dict(d)) == {"score", "step", "epoch"}, frozenset({"model.safetensors"}), ()),
}
RECORDS = tuple(KINDS)


def read_record(path: Path):
    """The JSON in ``path``, or ``None`` when it is not a readable JSON file."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 64 << 20:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def is_own_record(path: Path) -> bool:
    """``path`` is one of the tool's records (by its name) and its content is what the tool writes there."""
    kind = KINDS.get(path.name)
    return kind is not None and kind[0](read_record(path))


def _card_is_ours(folder: Path) -> bool:
    card = folder / "README.md"
    try:
        text = card.read_text(encoding="utf-8", errors="replace")[:20000] if card.is_file() else ""
    except OSError:
        return False
    return text.startswith("---") and CARD_MARK in text


def _fits(name: str, allowed: frozenset[str], patterns: tuple[str, ...]) -> bool:
    return name in allowed or is_temp_name(name) or any(re.fullmatch(p, name) for p in patterns)


def foreign_entries(folder: Path) -> list[str] | None:
    """The entries of ``folder`` the tool did not write (``[]``: the folder is the tool's, or empty);
    ``None`` when no record in it shows it is the tool's."""
    entries = sorted(p.name for p in folder.iterdir())
    if not entries:
        return []
    for record, (_, allowed, patterns) in KINDS.items():
        if is_own_record(folder / record):
            return [n for n in entries if n != record and not _fits(n, allowed, patterns)]
    if _card_is_ours(folder):  # a push --dry-run folder of a model the tool did not make
        return [n for n in entries if not _fits(n, MODEL_FILES, MODEL_PATTERNS)]
    return None


__all__ = ["KINDS", "MODEL_FILES", "RECORDS", "foreign_entries", "is_own_record", "read_record"]
