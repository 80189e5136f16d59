"""One interface over every model ``verify`` and ``sweep`` measure.

An :class:`Embedder` has ``encode(texts, batch_size) -> float32 (n, dim)``,
``dim``, ``n_params``, ``disk_bytes`` and ``load_seconds``. :func:`open_embedder`
picks the implementation from the spec: an export folder (``export.json``, as
:func:`espresso_export.runtime.is_export_folder` tells) is an ONNX export run by
:mod:`espresso_export.runtime` (no torch); a static model folder (model2vec's format) is run by
``model2vec``; anything else is loaded with
:func:`espresso_export.model.checkpoint.load` (folder, Hub id, alias).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export.core.extras import require
from espresso_export.core.prompts import StUsage
from espresso_export.runtime import OnnxEncoder, is_export_folder
from espresso_export.verification.verify_settings import declared_default


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (symlinks followed, as in a Hub cache snapshot)."""
    total = 0
    for root, _dirs, files in os.walk(folder, followlinks=True):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:  # a dangling symlink holds no bytes
                continue
    return total


@dataclass
class Embedder(ABC):
    """A model that turns texts into vectors, plus the facts ``verify`` reports about it."""

    spec: str  # what the user passed
    kind: str  # "pytorch", "onnx" or "openvino" (the runtime that runs it)
    dim: int
    n_params: int | None
    disk_bytes: int | None
    load_seconds: float
    path: Path | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @abstractmethod
    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Float32 embeddings, shape ``(len(texts), dim)``, in the order of ``texts``."""

    @property
    def usage(self) -> StUsage:
        """The model's prompts and similarity function (none, cosine for a model that declares none)."""
        return StUsage()

    def fingerprint(self) -> str | None:
        """A hash of everything that decides this model's vectors: weights, tokenizer, configs, settings (what
        the on-disk cache of :class:`EncodeCache` is keyed by). None: the vectors are not cached on disk."""
        return None

    @property
    def bytes_per_vector(self) -> int:
        return self.dim * np.dtype(np.float32).itemsize

    def info(self) -> dict:
        return {
            "spec": self.spec, "kind": self.kind, "path": str(self.path) if self.path else None, "dim": self.dim,
            "n_params": self.n_params, "disk_bytes": self.disk_bytes, "bytes_per_vector": self.bytes_per_vector,
            "load_seconds": round(self.load_seconds, 4), **self.details,
        }


@dataclass
class TorchEmbedder(Embedder):
    checkpoint: Any = None

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        from espresso_export.model.embed import encode

        return encode(self.checkpoint, texts, batch_size=batch_size)

    @property
    def usage(self) -> StUsage:
        return self.checkpoint.usage

    def fingerprint(self) -> str:
        from espresso_export.model.cache import cache_key, folder_fingerprint

        from espresso_export.model.embed import model_device

        c = self.checkpoint
        device = model_device(c.model).type  # another device rounds differently: its vectors are kept apart
        return cache_key(folder_fingerprint(c.path), c.pooling.value, c.max_seq_length, c.do_lower_case,
                         [type(p).__name__ for p in c.post], *([device] if device != "cpu" else []))

    @classmethod
    def from_checkpoint(cls, ckpt, *, spec: str | None = None, load_seconds: float = 0.0,
                        disk_bytes: int | None = None) -> TorchEmbedder:
        return cls(
            spec=spec or ckpt.source, kind="pytorch", dim=ckpt.output_dim,
            n_params=ckpt.n_params,
            disk_bytes=disk_bytes, load_seconds=load_seconds, path=ckpt.path,
            details={"layers": ckpt.depth, "pooling": ckpt.pooling.value}, checkpoint=ckpt,
        )


@dataclass
class OnnxEmbedder(Embedder):
    encoder: Any = None

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return np.asarray(self.encoder.encode(list(texts), batch_size=batch_size, prompt=""), dtype=np.float32)

    @property
    def usage(self) -> StUsage:
        return self.encoder.usage

    def fingerprint(self) -> str:
        from espresso_export.model.cache import cache_key, folder_fingerprint

        used = {self.path / self.encoder.file} | _graph_files(self.path / self.encoder.file)[1]
        other = {p for p in self.path.glob("*.onnx*")} - used  # the variants this run does not use
        return cache_key(folder_fingerprint(self.path, skip=lambda p: p in other), self.encoder.file)


@dataclass
class StaticEmbedder(Embedder):
    """A static model folder (model2vec's format), encoded by ``model2vec`` as its users encode it."""

    model: Any = None

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        return np.asarray(self.model.encode(list(texts), batch_size=max(batch_size, 1), use_multiprocessing=False),
                          dtype=np.float32).reshape(len(texts), self.dim)

    @property
    def provenance(self) -> dict | None:
        from espresso_export.model.checkpoint import PROVENANCE_FILE

        import json

        path = self.path / PROVENANCE_FILE if self.path else None
        return json.loads(path.read_text(encoding="utf-8")) if path and path.is_file() else None

    def fingerprint(self) -> str:
        from espresso_export.model.cache import cache_key, folder_fingerprint

        return cache_key("static", folder_fingerprint(self.path))


def open_static(folder: Path, spec: str) -> StaticEmbedder:
    """A static model folder, run by model2vec (the ``static`` extra)."""
    from espresso_export.model.static import load_static

    require("static")
    start = time.perf_counter()
    model = load_static(folder)
    seconds = time.perf_counter() - start
    return StaticEmbedder(spec=spec, kind="model2vec", dim=int(model.dim), n_params=int(model.embedding.size),
                          disk_bytes=folder_bytes(folder), load_seconds=seconds, path=folder,
                          details={"tokens": len(model.tokens)}, model=model)


def _graph_files(graph_file: Path) -> tuple[int | None, set[Path]]:
    """A graph's parameter count (initializers, weights not loaded) and the external-data files it reads.

    ``(None, set())`` without ``onnx``; an OpenVINO file: ``(None, {its .bin})``.
    """
    if graph_file.suffix == ".xml":
        return None, {graph_file.with_suffix(".bin")}
    try:
        import onnx
    except ImportError:
        return None, set()
    model = onnx.load(str(graph_file), load_external_data=False)
    total, external = 0, set()
    for init in model.graph.initializer:
        total += int(np.prod(init.dims)) if len(init.dims) else 1
        if init.data_location == onnx.TensorProto.EXTERNAL:
            external.update(graph_file.parent / e.value for e in init.external_data if e.key == "location")
    return total or None, external


def onnx_footprint(folder: Path, file: str) -> tuple[int | None, int]:
    """Parameters and bytes on disk of what serving ``file`` needs: that graph, its external data, the tokenizer.

    An export folder often holds several variants (fp32, int8, O2): a user deploys one, so the other graphs
    (and their external data) do not count.
    """
    chosen = folder / file
    n_params, needed = _graph_files(chosen)
    others: set[Path] = set()
    for graph in [*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx"), *folder.glob("openvino/*.xml")]:
        if graph != chosen:
            others |= {graph} | _graph_files(graph)[1]
    others -= needed
    skipped = sum(p.stat().st_size for p in others if p.is_file())
    return n_params, folder_bytes(folder) - skipped


def open_onnx(folder: Path, spec: str, *, threads: int | None, file: str | None = None) -> OnnxEmbedder:
    """An export folder's default file, or ``file`` (an ONNX or OpenVINO file the folder lists)."""
    openvino = file is not None and file.endswith(".xml")
    require("openvino-runtime" if openvino else "onnx-runtime")  # imports the library before the timer: load
    # time is the model's, not the library's

    start = time.perf_counter()
    encoder = OnnxEncoder(folder, file, threads=threads)
    seconds = time.perf_counter() - start
    n_params, disk_bytes = onnx_footprint(folder, encoder.file)
    details = {"threads_applied": threads is not None, "file": encoder.file}
    if openvino:
        details["inference_num_threads"] = int(encoder.session.compiled.get_property("INFERENCE_NUM_THREADS"))
    else:
        details["intra_op_threads"] = encoder.session.get_session_options().intra_op_num_threads
    return OnnxEmbedder(spec=spec, kind="openvino" if openvino else "onnx", dim=int(encoder.dim), n_params=n_params, disk_bytes=disk_bytes,
                        load_seconds=seconds, path=folder, details=details, encoder=encoder)


def export_graph(path: Path) -> tuple[Path, str] | None:
    """``(export folder, file)`` when ``path`` is a graph file inside an export folder (``OUT/onnx/model.onnx``,
    ``OUT/openvino/openvino_model_qint8_quantized.xml``): verify that file instead of the folder's default
    (:class:`OnnxEncoder` refuses a file the folder's ``export.json`` does not list)."""
    if path.suffix not in (".onnx", ".xml") or not path.is_file():
        return None
    for folder in path.resolve().parents[:2]:
        if is_export_folder(folder):
            return folder, path.resolve().relative_to(folder).as_posix()
    return None


def open_torch(spec: str, *, pooling=None, trust_remote_code: bool = False, device: str | None = None) -> TorchEmbedder:
    """A PyTorch checkpoint; with ``device`` (``cuda``, ``mps``) its model runs there (default: the CPU)."""
    import torch  # noqa: F401  (library imports happen before the timer)
    import transformers  # noqa: F401

    from espresso_export.model.checkpoint import load

    start = time.perf_counter()
    ckpt = load(spec, pooling=pooling, trust_remote_code=trust_remote_code)
    if device is not None:
        from espresso_export.training.schedule import resolve_device

        ckpt.model.to(resolve_device(device))
    seconds = time.perf_counter() - start
    embedder = TorchEmbedder.from_checkpoint(ckpt, spec=spec, load_seconds=seconds, disk_bytes=folder_bytes(ckpt.path))
    if device is not None:
        embedder.details["device"] = str(device)
    return embedder


def open_embedder(spec: str | os.PathLike, *, threads: int | None = None, pooling=None,
                  trust_remote_code: bool = False, device: str | None = None) -> Embedder:
    """Open ``spec`` as an :class:`Embedder`: an export folder (its default file), one graph file of an export
    folder, else a PyTorch checkpoint (run on ``device`` when given; exports run on the CPU)."""
    text = str(spec)
    local = Path(text).expanduser()
    if is_export_folder(local):
        return open_onnx(local.resolve(), text, threads=threads)
    if graph := export_graph(local):
        return open_onnx(graph[0], text, threads=threads, file=graph[1])
    from espresso_export.model.static import is_static_folder

    if is_static_folder(local):
        return open_static(local.resolve(), text)
    return open_torch(text, pooling=pooling, trust_remote_code=trust_remote_code, device=device)


EMBEDDING_CACHE_FORMAT = 1


def _save_npy(path: Path, rows: np.ndarray) -> None:
    with open(path, "wb") as fh:  # a file object: np.save would add ".npy" to a temporary name
        np.save(fh, rows)


class EncodeCache:
    """Encode each distinct text once per embedder: STS sets and retrieval sets share sentences.

    With a ``store`` folder, the vectors of each call's new texts are also kept on disk, keyed by the model's
    :meth:`Embedder.fingerprint`, the texts' hash and the batch size (batch composition decides the float
    rounding), so a later run with the same model and data reads them instead of encoding again.
    """

    def __init__(self, embedder: Embedder, *, batch_size: int = declared_default("batch_size"),
                 progress: str | None = None, store: Path | None = None) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self.progress = progress
        self.store = store
        self.reused = self.encoded = 0  # texts read from the store / encoded by the model
        self.nonfinite = 0  # distinct texts whose vector holds NaN or inf (never stored on disk)
        self._fingerprint: str | None = None
        self._rows: dict[str, np.ndarray] = {}

    def info(self) -> dict:
        """What the disk cache did: for the report."""
        return {"used": self.store is not None, "folder": str(self.store) if self.store else None,
                "reused_texts": self.reused, "encoded_texts": self.encoded}

    def _stored(self, texts: list[str]) -> tuple[Path | None, np.ndarray | None]:
        if self.store is None:
            return None, None
        from espresso_export.data import sentences_sha256
        from espresso_export.model.cache import cache_key

        if self._fingerprint is None:
            self._fingerprint = self.embedder.fingerprint() or ""
        if not self._fingerprint:  # a model without a fingerprint: nothing on disk could be trusted to match it
            return None, None
        key = cache_key(EMBEDDING_CACHE_FORMAT, self._fingerprint, sentences_sha256(texts), len(texts),
                        self.batch_size)
        path = self.store / f"embeddings-{key}.npy"
        try:
            rows = np.load(path) if path.is_file() else None
        except (OSError, ValueError):  # unreadable: encode again and replace it
            rows = None
        if rows is not None and rows.shape != (len(texts), self.embedder.dim):
            rows = None
        return path, rows

    def _encode_new(self, missing: list[str]) -> np.ndarray:
        from espresso_export.core.progress import track

        chunk = max(self.batch_size * 8, 256)
        pieces = [missing[i : i + chunk] for i in range(0, len(missing), chunk)]
        return np.concatenate([self.embedder.encode(piece, batch_size=self.batch_size) for piece in
                               track(pieces, description=self.progress, total_items=len(missing), count=len)])

    def _keep(self, path: Path, rows: np.ndarray) -> None:
        """Store ``rows`` at ``path``; a store that cannot be written (full disk, lost permission) is left off
        for the rest of the run with a one-line warning: the vectors were computed, the cache only saves time."""
        from espresso_export.model.cache import atomic_file

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_file(path, lambda tmp: _save_npy(tmp, rows))
        except OSError as e:
            from espresso_export.core.console import err_console

            err_console().print(f"warning: could not write to the cache {self.store} ({e.strerror or e}): the rest "
                                "of this run is not cached", highlight=False, markup=False, soft_wrap=True)
            self.store = None

    def encode(self, texts: Sequence[str], *, role: str | None = None) -> np.ndarray:
        """The vectors of ``texts`` as the model's users get them: each after the model's prompt for ``role``
        (``query``, ``document``; None: its default prompt), as sentence-transformers' encode methods do."""
        prompt = self.embedder.usage.prompt(role=role)
        if prompt:
            texts = [prompt + t for t in texts]
        missing = [t for t in dict.fromkeys(texts) if t not in self._rows]
        if missing:
            path, rows = self._stored(missing)
            if rows is not None:
                self.reused += len(missing)
            else:
                rows = self._encode_new(missing).astype(np.float32, copy=False)
                self.encoded += len(missing)
                if path is not None and np.isfinite(rows).all():
                    self._keep(path, rows)
            self.nonfinite += int((~np.isfinite(rows).all(axis=1)).sum())
            self._rows.update(zip(missing, rows))
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([self._rows[t] for t in texts]).astype(np.float32, copy=False)
