"""The work folder of ``auto``: every finished measurement and heal of a search, so that a stopped search
(Ctrl-C, SIGTERM, a crash) continues where it stopped and a second run with a bigger budget reuses the first's.

It sits beside the output (``OUT.auto-work``) and holds ``auto-state.json``: what the search is (the
settings that change what is measured: not the budget, the threads or what is kept), and one record per
finished step; it is made with the first step's files, so a search refused or stopped before any work leaves none.
A folder without that file is not ours and is never removed; a state for other settings is
replaced only with ``--overwrite``, and then only in part when just the healing settings changed: rung 0 (the
source's pass and the plain cuts) does not depend on them, so it is kept and only the heals are done again. The
folder is removed once the output is written, unless ``--keep-work``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

from espresso_export.core.errors import ValidationError
from espresso_export.core.files import write_text_atomic
from espresso_export.core.tempfiles import note_kept

STATE = "auto-state.json"
WORK_SUFFIX = ".auto-work"  # the work folder is the output's sibling OUT.auto-work
# 2: known-item queries by sentence first; 3: the healing settings keyed apart; 4: vectors' keys renamed;
# 5: the known-item retention the lower of two reads (earlier scores are not comparable)
FORMAT = 5
# the answer's choice, not what a step computes
NOT_MEASURED = ("time_budget", "threads", "keep_work", "objective", "min_retention", "max_latency_ratio",
                "latency_budget", "sts", "retrieval", "precision", "prune_vocab", "judgments", "write_judging",
                "judged_choice", "judge_command", "judge_per_query")
# what only the heals depend on (the healing texts: they leave out every query the final check asks); the user's
# --queries are measured (every candidate is scored on them, .asked) and left out of the healing texts too
HEALING = ("sentences", "doc_share", "doc_sentences", "max_texts", "max_seq_len", "batch_size", "corpus_queries")
HEALING_FILES = ("healing-texts.txt", "heals", "runs", "teacher-cache")  # what the heals wrote
PLAIN_STEP, HEAL_STEP = "plain-", "heal-"  # the step names' prefixes: a candidate plain, a candidate healed
WINDOW_STEP = "window"  # the share of the sample's documents the source's window cuts (model/window.py)


def plain_step(name: str) -> str:
    """The step recording candidate ``name`` plain (rung 0)."""
    return f"{PLAIN_STEP}{name}"


def heal_step(name: str, texts: int) -> str:
    """The step recording candidate ``name`` healed on ``texts`` texts."""
    return f"{HEAL_STEP}{name}-{texts}"


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


class Key(NamedTuple):
    """A search's identity: ``measured``, what rung 0 depends on; ``healing``, what only the heals do."""

    measured: str
    healing: str


def _digest(fields: dict, inputs: list) -> str:
    text = json.dumps({"format": FORMAT, **fields,
                       "inputs": {str(spec): stamp(spec) for spec in inputs if spec is not None}},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(source: str, settings: Any) -> Key:
    """What makes two searches' steps interchangeable: the source and the settings every step depends on, and
    the contents of the inputs they read (a corpus edited in place, or a checkpoint trained again into the same
    folder, is another search, not stale steps reused); the healing settings and inputs apart."""
    from dataclasses import asdict

    fields = {k: v for k, v in asdict(settings).items() if k not in NOT_MEASURED}
    measured = {k: v for k, v in fields.items() if k not in HEALING}
    return Key(_digest({"source": str(source), **measured},
                       [str(source), *settings.corpus, *settings.queries, settings.student]),
               _digest({k: fields[k] for k in HEALING}, [*settings.sentences, *settings.queries]))


class Work:
    """The work folder and its state; :meth:`done` / :meth:`put` read and record finished steps."""

    def __init__(self, folder: Path, state: dict, *, created: bool = False) -> None:
        self.folder, self.state = folder, state
        self.created = created  # this search made the folder (it held no earlier search's work)

    @classmethod
    def open(cls, output: Path, key: Key, *, overwrite: bool) -> Work:
        folder = output.with_name(output.name + WORK_SUFFIX)
        marker = folder / STATE
        if folder.exists() and not marker.is_file():
            raise ValidationError(f"{folder} exists and is not an auto work folder (no {STATE}): move it away")
        if marker.is_file():
            state = json.loads(marker.read_text(encoding="utf-8"))
            if state.get("fingerprint") == key.measured:
                work = cls(folder, state)
                if state.get("healing") != key.healing:
                    if not overwrite:
                        raise ValidationError(f"{folder} holds a search with other healing settings: pass "
                                              "--overwrite to heal again (its rung 0, the plain cuts, is kept), "
                                              "or use another -o")
                    work._forget_heals(key.healing)
                return work
            if not overwrite:
                raise ValidationError(f"{folder} holds a search of another source or other settings: pass "
                                      "--overwrite to start over (it is removed), or use another -o")
            shutil.rmtree(folder)
        # made on the first step written: a search refused or stopped before any work leaves no folder behind
        return cls(folder, {"format": FORMAT, "fingerprint": key.measured, "healing": key.healing, "steps": {}},
                   created=True)

    def reused(self) -> str | None:
        """What an earlier search of this folder left for this one (None: nothing), as the search says it."""
        steps = self.state["steps"]
        if not steps or self.created:
            return None
        plain = sum(k.startswith(PLAIN_STEP) for k in steps)
        heals = sum(k.startswith(HEAL_STEP) for k in steps)
        parts = [f"rung 0 ({plain} plain cut{'s' * (plain != 1)})" if plain else "the source's pass"]
        if heals:
            parts.append(f"{heals} heal{'s' * (heals != 1)}")
        return f"continuing the search in {self.folder}: {' and '.join(parts)} reused"

    def discard_if_empty(self) -> None:
        """A folder this search made and recorded no step in holds nothing worth keeping: removed."""
        if self.created and not self.state["steps"] and self.folder.is_dir():
            shutil.rmtree(self.folder, ignore_errors=True)

    def _forget_heals(self, healing: str) -> None:
        """Drop what the heals of other healing settings measured and wrote (a plain cut whose head was fitted on
        the healing texts too); keep the rest, recorded first so that a stop here leaves a consistent folder."""
        self.state["steps"] = {k: v for k, v in self.state["steps"].items() if not _of_heals(k, v)}
        self.state["healing"] = healing
        self.save()
        for name in HEALING_FILES:
            path = self.folder / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.is_file():
                path.unlink()

    def path(self, *parts: str) -> Path:
        if not (self.folder / STATE).is_file():
            self.save()  # the folder is ours from its first file on: its state marks it
        p = self.folder.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def done(self, step: str) -> Any:
        return self.state["steps"].get(step)

    def heals_of(self, name: str) -> list[dict]:
        """The heals of candidate ``name`` recorded in this folder, in the order of their step names."""
        prefix = f"{HEAL_STEP}{name}-"
        return [v for k, v in sorted(self.state["steps"].items()) if k.startswith(prefix)]

    def put(self, step: str, value: Any) -> Any:
        self.state["steps"][step] = value
        self.save()
        return value

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        note_kept(self.folder, "the search's work so far: the same command continues it")
        write_text_atomic(self.folder / STATE, json.dumps(self.state, indent=1, default=str) + "\n")

    def remove(self) -> None:
        """Remove the folder: ours (it holds our state file), never anything else."""
        if (self.folder / STATE).is_file():
            shutil.rmtree(self.folder, ignore_errors=True)


def _of_heals(step: str, value: Any) -> bool:
    """Whether a recorded step depends on the healing texts: they, the teacher's pass over them, the heals, and
    a plain cut (not the student) whose PCA head was fitted on them (a corpus of no more documents than the head's
    width)."""
    if step in ("healing_texts", "teacher") or step.startswith(HEAL_STEP):
        return True
    return step.startswith(PLAIN_STEP) and value.get("student") is None and value.get("calibration") is None

