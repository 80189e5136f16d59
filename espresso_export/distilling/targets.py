"""Phase 2 of ``distill``: the teacher's targets, computed once and cached (:mod:`.teacher_cache`).

One forward pass of the frozen teacher over the corpus writes its unit-normalised embeddings
(``embeddings.npy``) and, for layer targets, its pooled state after each wanted layer (``layer-<i>.npy``).
A PCA fitted on ``pca_samples`` of the embeddings gives the targets ``h_t = W_t (e_t - mean)``
(``targets-<key>.npy``, with the PCA beside it). Under ``torchrun`` each rank embeds its contiguous share
of whole chunks (the bytes one process writes) and projects its share; rank 0 fits the PCA and broadcasts
it. The pass keeps each finished chunk in ``parts/`` until it is done: a pass stopped by Ctrl-C, SIGTERM or
SIGKILL continues from there when run again.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core import signals
from espresso_export.core.batching import windows
from espresso_export.core.errors import ValidationError
from espresso_export.core.progress import track
from espresso_export.core.tempfiles import clean_stale
from espresso_export.data import sentences_sha256
from espresso_export.model.cache import cache_key, default_cache_dir
from espresso_export.model.checkpoint import Checkpoint
from espresso_export.model.embed import apply_post, encode_layers, model_device
from espresso_export.core.files import write_text_atomic
from espresso_export.model.post import renormalized
from espresso_export.shrinking.heads import PCAFit, fit_pca
from espresso_export.training import distributed
from espresso_export.distilling.teacher_cache import (
    cache_lock,
    CACHE_FORMAT,
    atomic_file,
    load_pca,
    pca_arrays,
    pca_from_arrays,
    save_pca,
    shared_memmaps,
)
from espresso_export.training.interrupt import interrupted
from espresso_export.training.schedule import autocast

# Sentences per teacher pass chunk: bounds the memory of the pooled layer states. Batches are length-sorted
# within a chunk, and batch composition decides the float rounding, so this also fixes the cached bytes: under
# torchrun each rank takes whole chunks, so the bytes do not depend on the number of processes (a distill that
# starts near its optimum, e.g. student and teacher truncating alike, amplifies even 1e-8 target differences).
TEACHER_CHUNK = 2048
PROJECT_CHUNK = 65536  # rows per step when projecting the embeddings onto the PCA
PARTS_DIR = "parts"  # the finished chunks of a teacher pass, until the whole pass is done


@dataclass
class TeacherTargets:
    targets: np.ndarray  # (n, dim) float32 memmap: h_t
    pca: PCAFit
    layers: dict[int, np.ndarray]  # teacher layer index (0-based) -> (n, hidden) float16 memmap of pooled states
    folder: Path
    reused: bool  # targets came from the cache (no teacher pass, no PCA)
    seconds: float
    resumed: int = 0  # sentences whose teacher outputs a stopped earlier pass had written (parts/)


def _part_files(folder: Path, files: dict, rng: range) -> dict[str, Path]:
    """The files of one chunk of the teacher pass: ``parts/<array>.<start>-<stop>.npy``."""
    return {k: folder / PARTS_DIR / f"{path.stem}.{rng.start}-{rng.stop}.npy" for k, (path, _, _) in files.items()}


def _load_chunk(parts: dict[str, Path], files: dict, rows: int) -> dict | None:
    """The arrays of a chunk that an earlier, stopped pass finished, or None when one is missing or unreadable."""
    out = {}
    for k, p in parts.items():
        try:
            a = np.load(p)
        except (OSError, ValueError):  # missing, or removed by a concurrent run that just finished
            return None
        if a.shape != (rows, files[k][1]) or a.dtype != files[k][2]:
            return None
        out[k] = a
    return out


def _write_npy(tmp: Path, array: np.ndarray) -> None:
    with open(tmp, "wb") as fh:  # a file object: np.save would append ".npy" to a temp name
        np.save(fh, array)


def _save_chunk(parts: dict[str, Path], chunk: dict) -> None:
    for k, p in parts.items():
        atomic_file(p, functools.partial(_write_npy, array=chunk[k]))


def _encode_chunk(teacher: Checkpoint, texts: list[str], wanted: list[int], need_final: bool,
                  layers: Sequence[int], batch_size: int, precision) -> dict:
    import torch

    with autocast(precision, model_device(teacher.model).type):  # on the device the teacher is on
        pooled = encode_layers(teacher, texts, wanted, batch_size=batch_size)
    chunk = {}
    # host: the post modules run on the whole chunk at once, in host memory (part of the cached bytes)
    if need_final:
        with torch.inference_mode():
            chunk["final"] = apply_post(torch.from_numpy(pooled[teacher.depth]), renormalized(teacher.post)).numpy()
    for i in layers:
        chunk[i] = pooled[i + 1].astype(np.float16)
    return chunk


def _teacher_pass(teacher: Checkpoint, sentences: Sequence[str], folder: Path, need_final: bool,
                  layers: Sequence[int], batch_size: int, progress: bool, precision) -> int:
    """One forward pass of the teacher over the corpus, writing embeddings.npy and layer-<i>.npy.

    Each chunk is also kept in ``parts/`` until the whole pass is done, so a pass stopped by Ctrl-C, SIGTERM
    or SIGKILL continues where it stopped (the chunk boundaries, hence the bytes, are the same). Returns how
    many sentences came from such an earlier pass. Under torchrun every rank embeds its contiguous share of
    whole chunks of the corpus into the same files."""
    files = {}
    if need_final:
        files["final"] = (folder / "embeddings.npy", teacher.output_dim, np.float32)
    for i in layers:
        files[i] = (folder / f"layer-{i}.npy", teacher.hidden_size, np.float16)
    wanted = sorted({teacher.depth} | {i + 1 for i in layers})  # encode_layers counts depth, 1-based
    (folder / PARTS_DIR).mkdir(exist_ok=True)
    kept = done = 0
    share = len(sentences)
    try:
        shared = shared_memmaps(files, len(sentences), "the teacher pass", align=TEACHER_CHUNK)
        with shared as (arrays, start, stop):
            share, chunks = stop - start, windows(start, stop, TEACHER_CHUNK)
            for rng in track(chunks, description="teacher targets" if progress else None,
                             total_items=stop - start, count=len):
                parts = _part_files(folder, files, rng)
                chunk = _load_chunk(parts, files, len(rng))
                if chunk is None:
                    chunk = _encode_chunk(teacher, [sentences[i] for i in rng], wanted, need_final, layers,
                                          batch_size, precision)
                    _save_chunk(parts, chunk)
                else:
                    kept += len(rng)
                for k, a in chunk.items():
                    arrays[k][rng.start : rng.stop] = a
                done += len(rng)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the finished chunks stay for the next run
        raise interrupted(f"in the teacher pass after {done} of {share} sentences; the finished chunks are "
                          f"kept in {folder / PARTS_DIR}: run the same command again (or with --resume) to continue",
                          signals.signum_of(e)) from e
    if distributed.current().main:  # every chunk is in the final files now
        _remove_parts(folder, files)
    return kept


def _remove_parts(folder: Path, files: dict) -> None:
    stems = tuple(f"{path.stem}." for path, _, _ in files.values())
    for p in (folder / PARTS_DIR).glob("*.npy"):
        if p.name.startswith(stems):
            p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (folder / PARTS_DIR).rmdir()  # empty unless parts of other layers wait for their own run


def pca_size(width: int, n: int, dim: int, pca_samples: int) -> int:
    """How many sentences the PCA is fitted on; checks that they and the teacher's width allow ``dim``.

    ``m`` sentences vary along at most ``m - 1`` directions around their mean, so ``dim`` needs ``dim + 1``: with
    fewer, the targets have a dimension (all of them, for one sentence) that carries nothing to learn."""
    if dim < 1 or dim > width:
        raise ValidationError(f"--dim {dim} is larger than the teacher's embedding width {width}" if dim > width
                              else f"--dim must be at least 1, got {dim}")
    m = min(pca_samples, n)
    if m < dim + 1:
        raise ValidationError(f"too few sentences for --dim {dim}: a PCA to {dim} dims needs at least {dim + 1} "
                              f"sentences, and --pca-samples {pca_samples} on a corpus of {n} sentences gives {m}; "
                              "add sentences or lower --dim")
    return m


def _cache_folder(teacher: Checkpoint, teacher_sha: str, corpus_sha: str, cache_dir, precision=None) -> Path:
    """The teacher cache folder of this teacher, corpus and precision, created (and checked shared across ranks).

    A full-precision pass keeps the key it had before mixed precision existed (its caches stay valid)."""
    key = cache_key(CACHE_FORMAT, teacher_sha, corpus_sha, teacher.pooling.value, teacher.max_seq_length,
                    [type(p).__name__ for p in teacher.post], *([str(precision)] if precision is not None else []))
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = folder / f"teacher-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    distributed.current().check_shared(folder, purpose="the teacher cache (--cache-dir)")
    return folder


def _fit_targets(folder: Path, targets_file: Path, n: int, m: int, dim: int, seed: int) -> PCAFit:
    """Rank 0 fits the PCA on ``m`` sampled embeddings; every rank projects its share of them into the targets."""
    dist = distributed.current()
    emb = np.load(folder / "embeddings.npy", mmap_mode="r")
    fitted = None
    if dist.main:
        idx = np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
        fitted = pca_arrays(fit_pca(np.asarray(emb[idx]), dim))
    pca = pca_from_arrays(dist.broadcast_arrays(fitted, what="the teacher PCA"))
    with shared_memmaps({"targets": (targets_file, dim, np.float32)}, n, "the PCA targets") as (arrays, lo, hi):
        for rng in windows(lo, hi, PROJECT_CHUNK):
            arrays["targets"][rng.start : rng.stop] = pca.transform(emb[rng.start : rng.stop]).astype(np.float32)
    return pca


def teacher_targets(
    teacher: Checkpoint,
    sentences: Sequence[str],
    *,
    dim: int,
    pca_samples: int,
    seed: int = 0,
    layers: Sequence[int] = (),
    cache_dir: str | os.PathLike | None = None,
    teacher_sha: str | None = None,
    batch_size: int = 64,
    progress: bool = False,
    precision=None,
) -> TeacherTargets:
    """PCA targets ``h_t`` (and pooled per-layer states) of the teacher on ``sentences``, cached on disk.

    ``precision``: the autocast dtype of the teacher pass (``torch.bfloat16``; None: full precision), part of
    the cache key. The pass runs on the device the teacher's model is on."""
    start = time.perf_counter()
    m = pca_size(teacher.output_dim, len(sentences), dim, pca_samples)
    teacher_sha = teacher_sha or teacher.weights_sha256()
    corpus_sha = sentences_sha256(list(sentences))
    folder = _cache_folder(teacher, teacher_sha, corpus_sha, cache_dir, precision)
    with cache_lock(folder):
        return _fill(teacher, sentences, folder, dim=dim, m=m, seed=seed, layers=layers, teacher_sha=teacher_sha,
                     corpus_sha=corpus_sha, batch_size=batch_size, progress=progress, precision=precision,
                     start=start)


def _fill(teacher, sentences, folder: Path, *, dim, m, seed, layers, teacher_sha, corpus_sha, batch_size, progress,
          precision, start) -> TeacherTargets:
    """What :func:`teacher_targets` does under the cache lock: reuse what is there, compute what is missing."""
    if distributed.current().main:  # temp files of killed runs (their owner process is gone)
        clean_stale(folder)
        clean_stale(folder / PARTS_DIR)
    pca_key = cache_key(dim, m, seed)
    targets_file, pca_file = folder / f"targets-{pca_key}.npy", folder / f"pca-{pca_key}.safetensors"
    dist = distributed.current()
    # rank 0 decides what is missing: every rank then takes the same path
    todo = dist.broadcast_json({
        "reused": targets_file.is_file() and pca_file.is_file(),
        "need_final": not (folder / "embeddings.npy").is_file(),
        "missing": [i for i in layers if not (folder / f"layer-{i}.npy").is_file()],
    } if dist.main else None, what="the teacher cache")
    reused, missing = todo["reused"], todo["missing"]
    need_final = not reused and todo["need_final"]
    resumed = 0
    if need_final or missing:
        resumed = _teacher_pass(teacher, sentences, folder, need_final, missing, batch_size, progress, precision)
    if dist.main:
        write_text_atomic(folder / "meta.json", json.dumps({
            "format": CACHE_FORMAT, "teacher": teacher.source, "teacher_sha256": teacher_sha,
            "corpus_sha256": corpus_sha, "sentences": len(sentences),
            "precision": "fp32" if precision is None else str(precision).removeprefix("torch.")}, indent=2) + "\n")
    if reused:
        pca = load_pca(pca_file)
    else:
        pca = _fit_targets(folder, targets_file, len(sentences), m, dim, seed)
        if dist.main:
            save_pca(pca, pca_file)
    return TeacherTargets(
        targets=np.load(targets_file, mmap_mode="r"), pca=pca,
        layers={i: np.load(folder / f"layer-{i}.npy", mmap_mode="r") for i in layers},
        folder=folder, reused=reused, seconds=time.perf_counter() - start, resumed=resumed,
    )
