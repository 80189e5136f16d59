"""Temporary names beside an output, tagged with the process that owns them, and the removal of stale ones.

Every output is assembled under a hidden sibling name and renamed into place (:mod:`espresso_export.core.files`).
A killed process cannot remove its temporary files, so their names say who owns them
(``.OUT.tmp-<pid>-<machine>-<boot>-<random>``, and ``.OUT.old-...`` for the previous output moved aside by
``--overwrite``). :func:`clean_stale` removes an entry only when its owner is certainly gone (same machine, and
no such process or an earlier boot), and renames a stale ``.old`` back when ``OUT`` is missing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import uuid
from functools import lru_cache
from pathlib import Path

TMP, OLD = "tmp", "old"
_TAGGED = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-(?P<machine>[0-9a-f]{8})-(?P<boot>[0-9a-f]{8})"
                     r"(?:-[^/]*)?$")


def is_temp_name(name: str) -> bool:
    """``name`` is a tagged temp or old name of this module (``.OUT.tmp-...``, ``.OUT.old-...``)."""
    return _TAGGED.match(name) is not None


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return ""


@lru_cache(maxsize=1)
def _machine_and_boot() -> tuple[str, str]:
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = ""
    return _short_hash(f"{socket.gethostname()}\x1f{pid_ns}"), _short_hash(_read("/proc/sys/kernel/random/boot_id"))


def owner_tag(pid: int | None = None) -> str:
    """``<pid>-<machine>-<boot>`` of this process (or of ``pid`` on this machine)."""
    machine, boot = _machine_and_boot()
    return f"{os.getpid() if pid is None else pid}-{machine}-{boot}"


def temp_name(target: str | os.PathLike, kind: str = TMP, tag: str | None = None, *, unique: bool = True) -> Path:
    """The hidden sibling of ``target`` owned by this process (``tag``: another owner's :func:`owner_tag`)."""
    target = Path(target)
    suffix = f"-{uuid.uuid4().hex[:8]}" if unique else ""
    return target.with_name(f".{target.name}.{kind}-{tag or owner_tag()}{suffix}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return True  # cannot tell: keep the file
    return True


def owner_gone(pid: int, machine: str, boot: str) -> bool:
    """Whether the process that tagged a name is certainly not running (see the module docstring)."""
    my_machine, my_boot = _machine_and_boot()
    if machine != my_machine:
        return False  # another container or computer: its processes are not ours to see
    if boot != my_boot:
        return True  # this machine rebooted since
    return pid != os.getpid() and not _pid_alive(pid)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_stale(folder: str | os.PathLike) -> list[Path]:
    """Remove the tagged temporary entries in ``folder`` whose owner is gone; returns what it removed or restored.

    A stale ``.OUT.old-*`` is renamed back to ``OUT`` when ``OUT`` is missing, else removed."""
    folder = Path(folder)
    done: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # missing or unreadable: nothing of ours to clean
        return done
    for entry in sorted(entries, key=lambda e: e.name):
        m = _TAGGED.match(entry.name)
        if m is None or not owner_gone(int(m["pid"]), m["machine"], m["boot"]):
            continue
        path = Path(entry.path)
        target = folder / m["name"]
        try:
            if m["kind"] == OLD and not os.path.lexists(target):
                os.rename(path, target)  # killed between the two renames of an --overwrite: put it back
            else:
                _remove(path)
        except OSError:
            continue  # e.g. a read-only folder: leave it, the command itself reports what it cannot write
        done.append(path)
    return done


_written: list[Path] = []  # outputs this process renamed into place (for the message after a stop)


def note_written(path: str | os.PathLike) -> None:
    """Record that ``path`` is now in place whole: a stop after this point is reported with it."""
    path = Path(path)
    if path not in _written:
        _written.append(path)


_kept: dict[Path, str] = {}  # folders of work a stopped command keeps on purpose, and what they are for


def note_kept(path: str | os.PathLike, what: str) -> None:
    """Record that ``path`` (a folder of work, e.g. ``auto``'s) is kept after a stop, for ``what``."""
    _kept[Path(path)] = what


def kept() -> dict[Path, str]:
    """The folders :func:`note_kept` recorded that exist, and what each is for."""
    return {p: what for p, what in _kept.items() if p.exists()}


def written() -> list[Path]:
    """The outputs renamed into place since the last :func:`forget_written` that are still there: not one inside a
    temporary folder (removed with it) or inside a kept folder (named by :func:`kept`), nor a file of a folder
    listed whole."""
    folders = [*_kept, *(p for p in _written if p.is_dir())]
    return [p for p in _written if p.exists() and not any(is_temp_name(part) for part in p.parts)
            and not any(p != f and f in p.parents for f in folders)]


def forget_written() -> None:
    _written.clear()
    _kept.clear()


__all__ = ["OLD", "TMP", "clean_stale", "forget_written", "kept", "note_kept", "note_written", "owner_gone",
           "owner_tag", "temp_name", "written"]
