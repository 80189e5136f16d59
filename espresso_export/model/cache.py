"""The on-disk cache every stage shares: where it lives, its keys, atomic files, and model fingerprints.

``distill`` keeps its teacher targets here and ``verify`` the source's embeddings, under one root
(``$ESPRESSO_CACHE``, else ``$XDG_CACHE_HOME/espresso-export`` or ``~/.cache/espresso-export``). A file
appears atomically (written under a temporary name, then renamed), so an interrupted run never leaves a
half-written array that a later run would trust.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from espresso_export.core.tempfiles import temp_name

# what a model's embeddings depend on besides its weights: configs, tokenizer, vocabulary, head weights
FINGERPRINT_SUFFIXES = (".json", ".txt", ".model", ".safetensors", ".onnx", ".onnx_data", ".data")
NOT_FINGERPRINTED = ("espresso.json", "README.md")  # provenance and docs change no vector


def default_cache_dir() -> Path:
    env = os.environ.get("ESPRESSO_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "espresso-export"


def cache_key(*parts) -> str:
    """A short hex key of ``parts`` (their ``str``), for cache file and folder names."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:20]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def folder_fingerprint(folder: Path, skip: Callable[[Path], bool] = lambda p: False) -> str:
    """SHA-256 over the relative path and content of every file of ``folder`` (symlinks followed, as in a Hub
    snapshot) that can change a model's output: weights, configs, tokenizer files (:data:`FINGERPRINT_SUFFIXES`),
    minus provenance and docs and whatever ``skip`` rejects (e.g. the graphs an export folder does not use)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if name in NOT_FINGERPRINTED or not name.endswith(FINGERPRINT_SUFFIXES) or skip(path):
                continue
            h.update(f"{path.relative_to(folder).as_posix()}\x1f{file_sha256(path)}\x1e".encode())
    return h.hexdigest()


def atomic_file(path: Path, writer: Callable[[Path], None]) -> None:
    """Call ``writer(tmp)`` on a temporary sibling of ``path`` owned by this process (removed by a later run if this
    one is killed: :mod:`espresso_export.core.tempfiles`), then rename it into place."""
    tmp = temp_name(path)
    try:
        writer(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
