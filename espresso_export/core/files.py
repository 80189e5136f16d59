"""Writing outputs so nothing is lost: a folder or file appears whole or not at all, and an existing output is
replaced only when it is the tool's own and ``--overwrite`` says so.

Every writer assembles its output in a temp name beside the target and renames it into place at the end, so a
crash, Ctrl-C or SIGTERM leaves nothing half-written. The temp names carry their owner process
(:mod:`espresso_export.core.tempfiles`): the next command writing beside them removes those of killed runs.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from espresso_export.core.errors import (
    OutputExistsError,
    RuntimeFailure,
    ValidationError,
    write_failure,
)
from espresso_export.core.ownership import RECORDS, foreign_entries
from espresso_export.core.tempfiles import OLD, clean_stale, note_written, temp_name


def is_within(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def check_output(target: str | os.PathLike, *, overwrite: bool, inputs: Sequence[str | os.PathLike] = ()) -> Path:
    """Validate an output path before any work is done; returns it resolved.

    ``inputs``: the models and files read (lists are flattened; ``None`` skipped); those that exist locally must
    not be the output, nor inside an output ``--overwrite`` would replace. Hub ids, ``builtin`` and in-memory
    checkpoints are skipped."""
    target = Path(target).expanduser().resolve()
    if is_within(Path.cwd().resolve(), target):  # -o "" (an unset variable) and -o . are the current folder
        raise ValidationError(f"output {target} is the current folder or contains it; give the output a folder of "
                              "its own (e.g. -o out/NAME)")
    for src in local_paths(inputs):
        if target == src:
            raise ValidationError(f"output {target} is the input {'folder' if src.is_dir() else 'file'}; "
                                  "choose another -o")
        if overwrite and is_within(src, target):
            raise ValidationError(f"--overwrite of {target} would delete the input {src}")
    clean_stale(target.parent)  # temp folders of killed runs (their owner process is gone)
    if target.exists():
        if not target.is_dir():
            raise OutputExistsError(f"output {target} exists and is a file")
        if not overwrite:
            raise OutputExistsError(f"output folder {target} already exists; pass --overwrite (Python: overwrite=True) to replace it")
        check_replaceable(target)
    parent = _existing_ancestor(target.parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValidationError(f"output location {parent} is not writable")
    return target


def check_outside(target: Path, inputs: Sequence[str | os.PathLike], *, beside: Path | None = None) -> None:
    """Refuse an output (or ``beside``, a folder the command writes next to it) inside an input folder: what the
    command writes would land among the user's data, and a later run would read it as input."""
    for src in local_paths(inputs):
        for path in (target, beside):
            if path is not None and src.is_dir() and path != src and is_within(path, src):
                raise ValidationError(f"output {path} is inside the input folder {src}: choose an -o outside it")


def check_replaceable(folder: Path) -> None:
    """``--overwrite`` replaces only an empty folder or one espresso-export wrote, decided by content: a record
    whose fields the tool writes, and no entry that kind of output does not hold (a thesis, photos)."""
    foreign = foreign_entries(folder)
    if foreign == []:
        return
    entries = foreign if foreign else sorted(p.name for p in folder.iterdir())
    shown_entries = ", ".join(entries[:4]) + (f" and {len(entries) - 4} more" if len(entries) > 4 else "")
    why = (f"it holds {shown_entries}, which espresso-export does not write" if foreign else
           f"no {', '.join(RECORDS[:3])}, ... written by it; it holds {shown_entries}")
    raise ValidationError(f"--overwrite replaces only a folder espresso-export wrote, and {folder} is not one "
                          f"({why}): remove its files yourself or choose another output")


def local_paths(inputs) -> Iterator[Path]:
    """The entries of ``inputs`` (nested lists flattened) that exist on this machine, resolved."""
    for src in inputs:
        if isinstance(src, (list, tuple)):
            yield from local_paths(src)
        elif isinstance(src, (str, os.PathLike)) and Path(src).expanduser().exists():
            yield Path(src).expanduser().resolve()


def _existing_ancestor(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


@contextmanager
def atomic_output(target: str | os.PathLike, *, overwrite: bool, inputs: Sequence[str | os.PathLike] = ()) -> Iterator[Path]:
    """Yield a temp folder beside ``target``; on success rename it to ``target``.

    On any exception (Ctrl-C and SIGTERM included) the temp folder is removed and an
    existing ``target`` is left untouched; after SIGKILL the next command writing beside it removes the temp
    folder (:func:`check_output`), or renames an existing ``target`` back if the kill came between the renames.
    """
    target = check_output(target, overwrite=overwrite, inputs=inputs)
    old = temp_name(target, OLD)  # an existing target waits here while the new one is renamed in
    # the name is chosen before the folder exists and created inside the try, so a signal landing just after the
    # mkdir (tempfile.mkdtemp returns too late to be cleaned up) still removes it
    tmp = temp_name(target)
    renaming = False
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(tmp, 0o700)
        except OSError as e:
            raise _write_error(target, e) from e
        yield tmp
        apply_umask(tmp)
        if target.exists():
            os.rename(target, old)
        renaming = True
        os.rename(tmp, target)
        note_written(target)
    except BaseException as e:
        if renaming and not os.path.lexists(tmp):  # stopped just after the rename: the new output is whole
            note_written(target)
            shutil.rmtree(old, ignore_errors=True)  # the previous output, replaced as in a finished run
            raise
        if old.exists() and not target.exists():
            os.rename(old, target)  # stopped between the two renames: the previous output goes back
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise _write_error(target, e) from e
        raise
    if old.exists():
        trash = temp_name(target)  # a tmp name: a later run removes it if this process dies while deleting
        os.rename(old, trash)
        try:
            shutil.rmtree(trash, ignore_errors=True)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM just now: the output is in place; finish the cleanup
            shutil.rmtree(trash, ignore_errors=True)
            raise


def current_umask() -> int:
    """The process umask. Linux reports it in /proc; elsewhere it is set and restored (os has no getter)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(root: Path) -> None:
    """Give ``root`` and everything under it the modes a plain ``mkdir``/``open`` would (0777/0666 less the umask).

    ``mkdtemp``/``mkstemp`` (and transformers' shard writer) create owner-only entries, and the mode survives the
    rename: without this an output would be unreadable to the group and other users whatever their umask."""
    mask = current_umask()
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        wanted = (0o777 if path.is_dir() else 0o666 | (mode & 0o111)) & ~mask
        if mode & 0o777 != wanted:
            os.chmod(path, wanted)


def _write_error(target: Path, e: OSError) -> RuntimeFailure:
    return write_failure(target, e)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write one file via a temp file beside it and a rename: readers never see half a file.

    A path that exists and is not a regular file (``/dev/stdout``, ``/dev/null``, a FIFO a reader waits on) is
    written in place: a rename over it replaced the device or the FIFO with a plain file (as root, /dev/null
    itself), and ``/dev/stdout`` resolved to ``/proc/PID/fd/pipe:[...]``, which cannot be opened."""
    given = Path(path).expanduser()
    if given.exists() and not given.is_file() and not given.is_dir():
        try:
            with open(given, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as e:
            raise _write_error(given, e) from e
        return given
    path = given.resolve()
    if path.is_dir():
        raise ValidationError(f"{path} is a folder; expected a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(path.parent)
        # the name is chosen before the file exists and created inside the try (as in atomic_output): a signal
        # landing just after tempfile.mkstemp created its file, before it returned the name, left the file behind
        tmp = temp_name(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes it owner-only: the mode open() would give
            os.replace(tmp, path)
            note_written(path)
        except BaseException:
            if not os.path.lexists(tmp):  # stopped just after the replace: the new file is whole
                note_written(path)
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise _write_error(path, e) from e
    return path
