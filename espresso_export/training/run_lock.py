"""One run at a time in a run folder: an exclusive lock on a file inside it, held by the running process.

Two runs writing the same checkpoints would each train for nothing and one fail at the end; the second is
refused at once instead. The lock is ``flock``: the kernel releases it when its process ends, however it ends,
so a killed run never leaves a folder locked (its lock file stays, harmless, and is reused).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from espresso_export.core.errors import ValidationError

LOCK = ".espresso-run.lock"
_HELD: dict[str, dict] = {}  # the run folders this process holds: {"created": made to lock it, "remove": on release}


def _key(run_dir: Path) -> str:
    return str(Path(run_dir).resolve())


def created_here(run_dir: Path) -> bool:
    """Whether this process created ``run_dir`` to lock it (the folder is then the tool's to remove)."""
    return _HELD.get(_key(run_dir), {}).get("created", False)


def remove_on_release(run_dir: Path) -> bool:
    """Have the held lock remove ``run_dir`` (if empty) when it is released, the folder being the tool's;
    ``False`` when this process does not hold it."""
    held = _HELD.get(_key(run_dir))
    if held is not None:
        held["created"] = held["remove"] = True
    return held is not None


def remove_stale(run_dir: Path) -> None:
    """Remove the lock file a finished or killed run left, unless a live run holds it."""
    import fcntl

    try:
        fd = os.open(run_dir / LOCK, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _release(fd, run_dir / LOCK)
    except OSError:
        os.close(fd)


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[Path]:
    """Hold ``run_dir``'s lock for the ``with`` block, creating the folder if needed; refuse (exit 2) when another
    process holds it. On exit the lock file goes, and the folder too when it was created here and is empty."""
    run_dir = Path(run_dir)
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # the folders this lock creates, deepest first
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValidationError(f"cannot create the run folder {run_dir}: {e.strerror or e}") from None
    try:
        fd = _acquire(run_dir / LOCK, run_dir)
    except BaseException:
        _remove_empty(made)
        raise
    held = _HELD[_key(run_dir)] = {"created": bool(made), "remove": bool(made)}
    try:
        yield run_dir
    finally:
        _HELD.pop(_key(run_dir), None)
        _release(fd, run_dir / LOCK)
        if held["remove"]:
            _remove_empty(made or [run_dir])


def _acquire(path: Path, run_dir: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock, with this process named in the file."""
    import fcntl

    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ValidationError(f"cannot write in the run folder {run_dir}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise ValidationError(f"run folder {run_dir} is in use by another run ({holder}); wait for it to end, "
                                  "or give another -o or --run-dir") from None
        if _same_file(fd, path):
            break
        os.close(fd)  # the run that held it removed the file as it finished: lock the one now there
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _release(fd: int, path: Path) -> None:
    """Remove the lock file (unless it is already gone or replaced), then let the lock go."""
    try:
        if _same_file(fd, path):
            path.unlink()
    except OSError:
        pass  # e.g. a read-only folder: the file stays, unlocked, and the next run reuses it
    finally:
        os.close(fd)


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            return
