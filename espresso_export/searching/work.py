"""The work folder of ``auto``: every finished measurement and heal of a search, so that a stopped search
(Ctrl-C, SIGTERM, a crash) continues where it stopped and a second run with a bigger budget reuses the first's.

It sits beside the output (``OUT.auto-work``) and holds ``auto-state.json``: what the search is (the
settings that change what is measured: not the budget, the threads or what is kept), and one record per
finished step. A folder without that file is not ours and is never removed; a state for other settings is
replaced only with ``--overwrite``. The folder is removed once the output is written, unless ``--keep-work``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from espresso_export.core.errors import ValidationError
from espresso_export.core.files import write_text_atomic

STATE = "auto-state.json"
FORMAT = 2  # 2: known-item queries by sentence first
# the answer's choice, not what a step computes
NOT_MEASURED = ("time_budget", "threads", "keep_work", "objective", "min_retention", "max_latency_ratio", "sts",
                "retrieval", "queries", "precision", "prune_vocab", "check_queries")


def stamp(spec: str | None) -> Any:
    """An input's contents, cheaply: each file's size and modification time (a folder's files, all of them), as
    make and rsync tell a changed file; None for what is not a local path (a Hub id, an alias)."""
    if spec is None:
        return None
    path = Path(str(spec)).expanduser()
    if path.is_file():
        return [path.stat().st_size, path.stat().st_mtime_ns]
    if path.is_dir():
        return sorted([str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns]
                      for f in path.rglob("*") if f.is_file())
    return None


def fingerprint(source: str, settings: Any) -> str:
    """What makes two searches' steps interchangeable: the source and the settings every step depends on, and
    the contents of the inputs they read (a corpus edited in place, or a checkpoint trained again into the same
    folder, is another search, not stale steps reused)."""
    from dataclasses import asdict

    fields = {k: v for k, v in asdict(settings).items() if k not in NOT_MEASURED}
    inputs = [str(source), *settings.corpus, *settings.sentences, settings.student]
    text = json.dumps({"source": str(source), "format": FORMAT, **fields,
                       "inputs": {str(spec): stamp(spec) for spec in inputs if spec is not None}},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Work:
    """The work folder and its state; :meth:`done` / :meth:`put` read and record finished steps."""

    def __init__(self, folder: Path, state: dict) -> None:
        self.folder, self.state = folder, state

    @property
    def resumed(self) -> int:
        return len(self.state["steps"])

    @classmethod
    def open(cls, output: Path, key: str, *, overwrite: bool) -> Work:
        folder = output.with_name(output.name + ".auto-work")
        marker = folder / STATE
        if folder.exists() and not marker.is_file():
            raise ValidationError(f"{folder} exists and is not an auto work folder (no {STATE}): move it away")
        if marker.is_file():
            state = json.loads(marker.read_text(encoding="utf-8"))
            if state.get("fingerprint") == key:
                return cls(folder, state)
            if not overwrite:
                raise ValidationError(f"{folder} holds a search of another source or other settings: pass "
                                      "--overwrite to start over (it is removed), or use another -o")
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        work = cls(folder, {"format": FORMAT, "fingerprint": key, "steps": {}})
        work.save()
        return work

    def path(self, *parts: str) -> Path:
        p = self.folder.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def done(self, step: str) -> Any:
        return self.state["steps"].get(step)

    def put(self, step: str, value: Any) -> Any:
        self.state["steps"][step] = value
        self.save()
        return value

    def save(self) -> None:
        write_text_atomic(self.folder / STATE, json.dumps(self.state, indent=1, default=str) + "\n")

    def remove(self) -> None:
        """Remove the folder: ours (it holds our state file), never anything else."""
        if (self.folder / STATE).is_file():
            shutil.rmtree(self.folder, ignore_errors=True)
