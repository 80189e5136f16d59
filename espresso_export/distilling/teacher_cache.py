"""The on-disk teacher cache of ``distill``: its format and how its files are written (the root, keys and
atomic writes are shared with ``verify``: :mod:`espresso_export.model.cache`).

Files appear atomically (written under a temporary name owned by the writing process, then renamed), so an
interrupted run never leaves a half-written array that a later run would trust, and the temp files of a killed
run are removed by the next one (:mod:`espresso_export.core.tempfiles`). Under ``torchrun`` every rank fills its
share of the same memory-mapped ``.npy`` file (:func:`shared_memmaps`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from espresso_export.core.tempfiles import owner_tag, temp_name
from espresso_export.model.cache import atomic_file
from espresso_export.shrinking.heads import PCAFit
from espresso_export.training import distributed

CACHE_FORMAT = 1
LOCK = ".lock"


@contextmanager
def cache_lock(folder: Path):
    """Hold ``folder``'s lock while a teacher pass or a PCA fit fills it: a second process with the same teacher
    and corpus (another ``--dim``, another output) waits, then reuses what the first wrote, instead of the two
    writing the same chunks at once. ``flock``: the kernel releases it however its holder ends. Under
    ``torchrun`` only rank 0 locks; the other ranks follow it step by step."""
    if not distributed.current().main:
        yield
        return
    import fcntl

    from espresso_export.core.console import err_console

    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            err_console().print(f"waiting for another process's teacher pass on the same teacher and corpus ({folder})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock; the empty lock file stays for the next run


@contextmanager
def shared_memmaps(files: dict, n: int, what: str, align: int = 1):
    """``.npy`` memmaps of ``n`` rows (``files``: key -> (path, width, dtype)) filled by every rank, each its
    contiguous share of the rows, and renamed into place once all shares are written.

    Yields ``(arrays, start, stop)``: this rank writes rows ``start:stop``. One process writes all rows.
    Shares are whole blocks of ``align`` rows (the last may be shorter, a rank may get none): a pass that
    works in blocks of ``align`` then sees the same blocks, hence writes the same bytes, on any number of
    processes."""
    dist = distributed.current()
    # one temp name per file, shared by the ranks and owned by rank 0 (which creates, renames or removes it)
    token = dist.broadcast_json(owner_tag(), what=what)
    tmps = {k: temp_name(p, tag=token, unique=False) for k, (p, _, _) in files.items()}
    arrays: dict = {}
    try:
        if dist.main:
            for k, (_, width, dtype) in files.items():
                np.lib.format.open_memmap(tmps[k], mode="w+", dtype=dtype, shape=(n, width)).flush()
        dist.barrier(what)
        arrays.update({k: np.load(tmps[k], mmap_mode="r+") for k in files})
        start, stop = dist.shard_bounds(n, align)[dist.rank]
        yield arrays, start, stop
        for arr in arrays.values():
            arr.flush()
        arrays.clear()
        dist.barrier(f"{what}: waiting for every rank's share")
        if dist.main:
            for k, (path, _, _) in files.items():
                os.replace(tmps[k], path)
        dist.barrier(what)
    finally:
        arrays.clear()
        if dist.main:
            for tmp in tmps.values():
                if tmp.exists():
                    tmp.unlink()


def pca_arrays(pca: PCAFit) -> dict[str, np.ndarray]:
    return {"mean": pca.mean, "components": pca.components, "explained_variance_ratio": pca.explained_variance_ratio,
            "n_samples": np.array([pca.n_samples], dtype=np.int64)}


def pca_from_arrays(t: dict[str, np.ndarray]) -> PCAFit:
    return PCAFit(mean=t["mean"], components=t["components"], explained_variance_ratio=t["explained_variance_ratio"],
                  n_samples=int(t["n_samples"][0]))


def save_pca(pca: PCAFit, path: Path) -> None:
    from safetensors.numpy import save_file

    atomic_file(path, lambda tmp: save_file(pca_arrays(pca), str(tmp)))


def load_pca(path: Path) -> PCAFit:
    from safetensors.numpy import load_file

    return pca_from_arrays(load_file(str(path)))
