"""Phase 2 of ``distill``: the teacher's targets, computed once and cached (:mod:`.cache`).

One forward pass of the frozen teacher over the corpus writes its unit-normalised embeddings
(``embeddings.npy``) and, for layer targets, its pooled state after each wanted layer (``layer-<i>.npy``).
A PCA fitted on ``pca_samples`` of the embeddings gives the targets ``h_t = W_t (e_t - mean)``
(``targets-<key>.npy``, with the PCA beside it). Under ``torchrun`` each rank embeds and projects its
contiguous share; rank 0 fits the PCA and broadcasts it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.batching import windows
from espresso_export.core.errors import ValidationError
from espresso_export.core.progress import track
from espresso_export.data import sentences_sha256
from espresso_export.model.cache import cache_key, default_cache_dir
from espresso_export.model.checkpoint import Checkpoint
from espresso_export.model.embed import apply_post, encode_layers
from espresso_export.model.layout import write_json
from espresso_export.model.post import renormalized
from espresso_export.shrinking.heads import PCAFit, fit_pca
from espresso_export.training import distributed
from espresso_export.training.distill.cache import (
    CACHE_FORMAT,
    load_pca,
    pca_arrays,
    pca_from_arrays,
    save_pca,
    shared_memmaps,
)

# Sentences per teacher pass chunk: bounds the memory of the pooled layer states. Batches are length-sorted
# within a chunk, and batch composition decides the float rounding, so this also fixes the cached bytes.
TEACHER_CHUNK = 2048
PROJECT_CHUNK = 65536  # rows per step when projecting the embeddings onto the PCA


@dataclass
class TeacherTargets:
    targets: np.ndarray  # (n, dim) float32 memmap: h_t
    pca: PCAFit
    layers: dict[int, np.ndarray]  # teacher layer index (0-based) -> (n, hidden) float16 memmap of pooled states
    folder: Path
    reused: bool  # targets came from the cache (no teacher pass, no PCA)
    seconds: float


def _teacher_pass(teacher: Checkpoint, sentences: Sequence[str], folder: Path, need_final: bool,
                  layers: Sequence[int], batch_size: int, progress: bool) -> None:
    """One forward pass of the teacher over the corpus, writing embeddings.npy and layer-<i>.npy.

    Under torchrun every rank embeds its contiguous share of the corpus into the same files."""
    import torch

    depth = teacher.depth
    post = renormalized(teacher.post)
    files = {}
    if need_final:
        files["final"] = (folder / "embeddings.npy", teacher.output_dim, np.float32)
    for i in layers:
        files[i] = (folder / f"layer-{i}.npy", teacher.hidden_size, np.float16)
    wanted = sorted({depth} | {i + 1 for i in layers})  # encode_layers counts depth, 1-based
    with shared_memmaps(files, len(sentences), "the teacher pass") as (arrays, start, stop):
        chunks = windows(start, stop, TEACHER_CHUNK)
        for rng in track(chunks, description="teacher targets" if progress else None, total_items=stop - start,
                         count=len):
            pooled = encode_layers(teacher, [sentences[i] for i in rng], wanted, batch_size=batch_size)
            if need_final:  # the post modules run on the whole chunk at once (part of the cached bytes)
                with torch.inference_mode():
                    final = apply_post(torch.from_numpy(pooled[depth]), post).numpy()
                arrays["final"][rng.start : rng.stop] = final
            for i in layers:
                arrays[i][rng.start : rng.stop] = pooled[i + 1].astype(np.float16)


def _pca_size(width: int, n: int, dim: int, pca_samples: int) -> int:
    """How many sentences the PCA is fitted on; checks that they and the teacher's width allow ``dim``."""
    if dim < 1 or dim > width:
        raise ValidationError(f"--dim {dim} is larger than the teacher's embedding width {width}" if dim > width
                              else f"--dim must be at least 1, got {dim}")
    m = min(pca_samples, n)
    if m < dim:
        raise ValidationError(f"a PCA to {dim} dims needs at least {dim} sentences; --pca-samples {pca_samples} "
                              f"on a corpus of {n} gives {m}")
    return m


def _cache_folder(teacher: Checkpoint, teacher_sha: str, corpus_sha: str, cache_dir) -> Path:
    """The teacher cache folder of this teacher and corpus, created (and checked shared across ranks)."""
    key = cache_key(CACHE_FORMAT, teacher_sha, corpus_sha, teacher.pooling.value, teacher.max_seq_length,
                    [type(p).__name__ for p in teacher.post])
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
) -> TeacherTargets:
    """PCA targets ``h_t`` (and pooled per-layer states) of the teacher on ``sentences``, cached on disk."""
    start = time.perf_counter()
    m = _pca_size(teacher.output_dim, len(sentences), dim, pca_samples)
    teacher_sha = teacher_sha or teacher.weights_sha256()
    corpus_sha = sentences_sha256(list(sentences))
    folder = _cache_folder(teacher, teacher_sha, corpus_sha, cache_dir)
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
    if need_final or missing:
        _teacher_pass(teacher, sentences, folder, need_final, missing, batch_size, progress)
    if dist.main:
        write_json(folder / "meta.json", {"format": CACHE_FORMAT, "teacher": teacher.source,
                                          "teacher_sha256": teacher_sha, "corpus_sha256": corpus_sha,
                                          "sentences": len(sentences)})
    if reused:
        pca = load_pca(pca_file)
    else:
        pca = _fit_targets(folder, targets_file, len(sentences), m, dim, seed)
        if dist.main:
            save_pca(pca, pca_file)
    return TeacherTargets(
        targets=np.load(targets_file, mmap_mode="r"), pca=pca,
        layers={i: np.load(folder / f"layer-{i}.npy", mmap_mode="r") for i in layers},
        folder=folder, reused=reused, seconds=time.perf_counter() - start,
    )
