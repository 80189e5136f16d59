"""The run folder's state (``run.json``) and the checks made before a recipe runs.

``run.json`` records each finished step: its settings, a fingerprint of what it read, its status and summary;
``--resume`` keeps a step only when those are unchanged. It is written atomically after every step; one that
cannot be read is an error, never an empty state (which would rerun every step over the finished outputs).
An existing folder is used only with ``--resume`` or ``--overwrite``, and only when its run.json is this tool's
by content: a user's own run.json is never replaced.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from espresso_export.core.errors import OutputExistsError, ValidationError
from espresso_export.core.files import is_within, local_paths, write_text_atomic
from espresso_export.core.ownership import is_own_record, read_record
from espresso_export.pipeline.recipes import Recipe, Step, step_fields

STATE_FILE = "run.json"
REPORT_JSON = "report.json"  # a verify step's report, which its gate is read from
INPUT_KINDS = ("model", "data", "file")  # path settings a step reads (a cache "dir" is written, not an input)


def read_state(folder: Path) -> dict:
    """The state of a previous run in ``folder`` (``{}`` when there is none); an unreadable one is refused."""
    path = folder / STATE_FILE
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValidationError(f"cannot resume: the run state {path} is unreadable ({reason}); delete it to run "
                              "every step again, or pass --overwrite instead of --resume") from None
    if not is_own_record(path):  # the user's own run.json (another tool's, or any JSON) is never replaced
        raise ValidationError(f"cannot resume: {path} is not a run.json written by espresso-export; give `run` a new "
                              "or empty folder with -o")
    return state


def _own_state(folder: Path) -> bool:
    """``folder``'s run.json is one this tool wrote: its content says so, or it is unreadable (a damaged state, which
    ``--resume`` refuses with its own message) beside nothing but step folders."""
    path = folder / STATE_FILE
    if is_own_record(path):
        return True
    others = [p.name for p in folder.iterdir() if p.name != STATE_FILE]
    return (read_record(path) is None and bool(others)
            and all(re.fullmatch(r"\d+-[a-z]+(\.run)?", name) for name in others))


def write_state(folder: Path, state: dict) -> None:
    write_text_atomic(folder / STATE_FILE, json.dumps(state, indent=2) + "\n")


def step_paths(step: Step) -> list:
    """The files, folders and models a step's settings name (``teacher``, ``corpus``, ``sts``, ...)."""
    return [getattr(step.config, f.name) for f in step_fields(type(step.config)) if f.spec.path in INPUT_KINDS]


def fingerprint(inputs: Iterable) -> dict[str, str]:
    """Local path -> a digest of the names, sizes and modification times of the files under it.

    Hub ids and ``builtin`` are not local and are compared through the settings. Sizes and times, not contents:
    a 400 MB model is not read again on every resume, and editing or replacing a file changes its time."""
    out: dict[str, str] = {}
    for path in local_paths(list(inputs)):
        h = hashlib.sha256()
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            st = f.stat()
            h.update(f"{f.relative_to(path).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        out[str(path)] = h.hexdigest()[:20]
    return out


def check_run_folder(recipe: Recipe, *, resume: bool, overwrite: bool) -> None:
    """Before anything runs: the run folder's state, and no input in a folder the run replaces."""
    if resume and overwrite:
        raise ValidationError("--resume and --overwrite exclude each other")
    folder = recipe.run_folder
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"run folder {folder} exists and is a file")
    step_folders = [recipe.folder(s) for s in recipe.steps]
    for path in local_paths([recipe.source, *(step_paths(s) for s in recipe.steps)]):
        if path == folder:
            raise ValidationError(f"the run folder {folder} is an input of the recipe; choose another -o")
        inside = next((f for f in step_folders if is_within(path, f)), None)
        if inside is not None:
            raise ValidationError(f"the recipe reads {path}, inside the step folder {inside} that the run writes; "
                                  "move it out of the run folder or choose another -o")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / STATE_FILE).is_file():
        # a model folder, a checkout, anything else: --resume would write into it, --overwrite replace its files
        raise ValidationError(f"{folder} is not a run folder (no {STATE_FILE}) and is not empty; give `run` a new "
                              "or empty folder with -o (default: runs/NAME)")
    if (folder / STATE_FILE).is_file() and not _own_state(folder):
        # a run.json of the user's (its name alone proves nothing): --resume and --overwrite would replace it
        raise ValidationError(f"{folder} is not a run folder: its {STATE_FILE} was not written by espresso-export; "
                              "give `run` a new or empty folder with -o (default: runs/NAME)")
    if folder.is_dir() and any(folder.iterdir()) and not (resume or overwrite):
        raise OutputExistsError(f"run folder {folder} already exists; pass --resume to keep the finished steps or "
                                "--overwrite to run every step again")
    if resume:
        read_state(folder)  # a corrupt state file is refused before any step runs


__all__ = ["REPORT_JSON", "STATE_FILE", "check_run_folder", "fingerprint", "read_state", "step_paths", "write_state"]


def remove_stale(later: list[tuple[int, str, Path]], written_before: dict) -> None:
    """A run stopped at its gate makes the previous run's later step folders stale: it left the old ``5-push``
    whose card said "passed" beside a report that failed. Only folders the previous run recorded (same index and
    kind in its run.json) are removed. A run stopped by Ctrl-C or an error removes nothing: removing them before
    their steps ran again lost a finished distill, export and report to an interrupt that said "existing outputs
    are unchanged" (run.json records which folders the last run wrote)."""
    for index, kind, folder in later:
        if written_before.get(index) == kind and folder.is_dir():
            shutil.rmtree(folder)
