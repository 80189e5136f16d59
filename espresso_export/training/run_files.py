"""Which files of a run folder are the tool's: a training run deletes only what it wrote.

A run folder (``--run-dir``, default ``OUT.run``) may be a folder the user named, so a finished run or
``--overwrite`` never removes the folder wholesale: it removes the entries in :data:`OWN_ENTRIES` (and their
temp siblings), then the marker, then the folder itself only when the tool created it and it is empty.

The marker file :data:`MARKER` says the tool owns the folder's run files; a non-empty folder without it is
refused, unless every entry in it is one a run writes. The lock file (:mod:`.run_lock`) is the tool's too.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.training.run_lock import LOCK, created_here, locked, remove_on_release, remove_stale

MARKER = ".espresso-run"
CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"
# a run stopped before its first checkpoint (in distill's teacher pass): ``--resume`` then trains from step 0,
# the work already done being kept where it belongs (the teacher cache's finished chunks)
STOPPED_EARLY = "stopped-before-training.json"
OWN_ENTRIES = [CHECKPOINT_DIR, BEST_DIR, STOPPED_EARLY]  # what a training run writes in its folder


def _is_own(name: str) -> bool:
    """An entry a run writes: the marker, an :data:`OWN_ENTRIES` folder, or one's temp/old sibling
    (``.checkpoint.tmp-*`` / ``.checkpoint.old-*`` from :func:`~espresso_export.core.files.atomic_output`)."""
    if name in (MARKER, LOCK) or name in OWN_ENTRIES:
        return True
    return any(name.startswith((f".{e}.tmp-", f".{e}.old-")) for e in OWN_ENTRIES)


def check_foreign(run_dir: Path) -> None:
    """Refuse a run folder that is a file, or that holds entries the tool did not write and has no marker."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ValidationError(f"run folder {run_dir} is a file; give a folder for --run-dir")
    if not run_dir.is_dir() or (run_dir / MARKER).is_file():
        return
    foreign = sorted(p.name for p in run_dir.iterdir() if not _is_own(p.name))
    if foreign:
        raise ValidationError(f"run folder {run_dir} is not empty and was not created by espresso-export (it holds "
                              f"{foreign[0]!r}); give a new or empty folder for --run-dir")


def claim(run_dir: Path) -> None:
    """Create the run folder if needed and mark it as the tool's (recording whether the tool created it)."""
    marker = run_dir / MARKER
    if marker.is_file():
        return
    created = not run_dir.exists() or created_here(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"tool": "espresso-export", "created_folder": created}) + "\n", encoding="utf-8")


@contextlib.contextmanager
def held(run_dir: Path) -> Iterator[Path]:
    """Lock ``run_dir`` for the ``with`` block (:func:`~.run_lock.locked`), marked as the tool's when the lock
    created it (so a killed run's folder is still known as the tool's); on exit a folder of the tool's that holds
    nothing to resume is removed."""
    with locked(run_dir) as run_dir:
        if created_here(run_dir):
            claim(run_dir)
        try:
            yield run_dir
        finally:
            names = {p.name for p in run_dir.iterdir()} if run_dir.is_dir() else set()
            if names <= {MARKER, LOCK} and _created_folder(run_dir):
                (run_dir / MARKER).unlink(missing_ok=True)
                remove_on_release(run_dir)


def _created_folder(run_dir: Path) -> bool:
    try:
        return bool(json.loads((run_dir / MARKER).read_text(encoding="utf-8")).get("created_folder"))
    except (OSError, ValueError, AttributeError):
        return False


def remove_run_files(run_dir: Path) -> None:
    """Delete what a run wrote in ``run_dir`` (never anything else); the folder too if the tool made it and it is
    now empty."""
    if not run_dir.is_dir():
        return
    created = _created_folder(run_dir)
    for entry in run_dir.iterdir():
        if entry.name in (MARKER, LOCK) or not _is_own(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    (run_dir / MARKER).unlink(missing_ok=True)
    if created and not remove_on_release(run_dir):  # a held lock removes the folder as it lets go
        remove_stale(run_dir)
        if not any(run_dir.iterdir()):
            run_dir.rmdir()


def mark_stopped_early(run_dir: Path, phase: str) -> None:
    """Record that the run in ``run_dir`` stopped in ``phase``, before its first checkpoint: ``--resume`` is then
    accepted and starts the training from step 0."""
    from espresso_export.core.files import write_text_atomic

    claim(run_dir)
    write_text_atomic(run_dir / STOPPED_EARLY, json.dumps({"stopped_in": phase}) + "\n")


def stopped_early(run_dir: Path) -> bool:
    """Whether a run stopped in ``run_dir`` before its first checkpoint (:func:`mark_stopped_early`)."""
    return (Path(run_dir) / STOPPED_EARLY).is_file()


__all__ = ["BEST_DIR", "CHECKPOINT_DIR", "LOCK", "MARKER", "OWN_ENTRIES", "STOPPED_EARLY", "check_foreign", "claim",
           "held", "mark_stopped_early", "remove_run_files", "stopped_early"]
