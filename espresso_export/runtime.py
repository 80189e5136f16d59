"""A torch-free encoder for export folders: onnxruntime + tokenizers + numpy.

This module is what an edge deployment ships. It imports only onnxruntime,
tokenizers, numpy and the standard library (a test checks that ``torch`` is
never imported), and openvino for an OpenVINO file (``export --format onnx,openvino``)::

    from espresso_export.runtime import OnnxEncoder

    enc = OnnxEncoder("out/minilm-L3-d128-onnx")      # the file export.json recommends
    vectors = enc.encode(["a sentence", "another"])   # float32, (2, enc.dim), unit length

The ONNX graph already contains pooling, the head and L2 normalisation, so
its first output is the final embedding; this class only tokenises
(lower-casing, truncation and padding as the source model did), batches by
token length and runs the graph.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from espresso_export.core.batching import (
    length_sorted_batches,  # stdlib-only, as errors
)
from espresso_export.core.cpu import usable_cores  # stdlib-only
from espresso_export.core.errors import (
    ValidationError,  # stdlib-only: keeps the runtime torch-free
)
from espresso_export.core.extras import require  # stdlib-only

EXPORT_FILE = "export.json"
TOKENIZER_FILE = "tokenizer.json"
EMBEDDING_OUTPUT = "sentence_embedding"
TOKEN_OUTPUT = "last_hidden_state"  # the name optimum and transformers.js read
LEGACY_TOKEN_OUTPUT = "token_embeddings"  # export folders of format 1


class ExportFolderError(ValidationError, ValueError):
    """The folder is not a usable export folder (missing or malformed files). Exit code 2."""


def is_export_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder written by ``espresso-export export`` (it holds export.json)."""
    return (Path(path) / EXPORT_FILE).is_file()


def graph_bytes(path: Path) -> int:
    """A graph file's bytes with its weights beside it: OpenVINO's ``NAME.bin`` for ``NAME.xml``, ONNX external
    data ``NAME.onnx.data`` (as ``export`` writes it) for ``NAME.onnx``."""
    weights = path.with_suffix(".bin") if path.suffix == ".xml" else path.with_name(path.name + ".data")
    return path.stat().st_size + (weights.stat().st_size if weights.is_file() else 0)


def read_export_info(folder: str | os.PathLike) -> dict:
    """The parsed ``export.json`` of an export folder."""
    path = Path(folder) / EXPORT_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ExportFolderError(f"{folder} is not an export folder: no {EXPORT_FILE}") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportFolderError(f"cannot read {path}: {e}") from e
    if not isinstance(info, dict) or not info.get("files"):
        raise ExportFolderError(f"{path} lists no ONNX files")
    return info


def _file_key(name: str) -> str:
    """The same graph under either layout: ``onnx/model_quantized.onnx`` is format 1's ``model_int8.onnx``."""
    return name.removeprefix("onnx/").replace("_quantized", "_int8")


def _find_file(names: list[str], wanted: str) -> str | None:
    if wanted in names:
        return wanted
    return next((n for n in names if _file_key(n) == _file_key(wanted)), None)


class _SignalStack(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


@contextlib.contextmanager
def keep_signal_stack():
    """Give the calling thread its own signal stack back after the block.

    OpenVINO 2026.4's CPU plugin points the thread that compiles a model at a signal stack of its own
    (``sigaltstack``) and frees that memory later; Python handles every signal on the signal stack, so the next
    Ctrl-C on that thread crashed the process (SIGSEGV, seen in the test run after an export with OpenVINO
    files) instead of raising KeyboardInterrupt. Hand-written: no library restores it. Linux only (glibc)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    own = _SignalStack()
    saved = libc.sigaltstack(None, ctypes.byref(own)) == 0
    try:
        yield
    finally:
        if saved:
            libc.sigaltstack(ctypes.byref(own), None)


def compile_openvino(model, config: dict | None = None):
    """OpenVINO's CPU compiled model of ``model`` (a path or an ``ov.Model``) in fp32 inference precision, the
    thread's signal stack kept (:func:`keep_signal_stack`): how every OpenVINO file here is run."""
    require("openvino-runtime")  # first: it keeps OpenVINO's usage reports off (core/telemetry.py)
    import openvino as ov

    with keep_signal_stack():
        return ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", **(config or {})})


class _Port:
    def __init__(self, name: str) -> None:
        self.name = name


# One text of up to 64 tokens can run on a copy of the model compiled for a fixed shape (1, W), W the smallest
# of these widths that holds it (the text padded and masked out): OpenVINO's CPU plugin re-prepares every node
# when the input shape changes from one call to the next, which at batch 1 can cost more than a small model's
# compute, while the padding costs compute. So the export times both ways on its probe sentences and writes the
# widths into the file's export.json entry (``fixed_widths``) only when the copies were faster in every round
# (exporting/timing.py; measured 1.30x the dynamic model on all-MiniLM-L6-v2 L3/d128 int8 and 0.88x on
# all-mpnet-base-v2 L4/d128 int8, 1 thread; benchmarks/README.md, "OpenVINO at batch 1"). Batches, longer texts
# and older exports use the dynamic model.
FIXED_WIDTHS = (16, 32, 48, 64)


# With streams, ``encode`` makes at least this many batches a stream (smaller batches, never larger): texts
# sorted by length make batches of unequal cost, and a stream left with the longest of two batches runs it
# alone. Measured (all-MiniLM-L6-v2 L3/d128, 2 threads, 2 streams, paired to one 2-thread stream): 256 texts
# at batch 128 (2 batches) 0.76x for int8, as 8 batches of 32 1.75x; 32 texts as 2 batches 1.12x, as 8
# batches of 4 1.64x (fp32 1.00x -> 1.37x).
BATCHES_PER_STREAM = 4


class _Requests:
    """``n`` infer requests of one compiled OpenVINO model, each used by one call at a time (:meth:`take`)."""

    def __init__(self, compiled, n: int) -> None:
        import queue

        self.compiled = compiled
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(max(1, n)):
            self.free.put(compiled.create_infer_request())

    @contextlib.contextmanager
    def take(self):
        request = self.free.get()  # waits while every request is in use
        try:
            yield request
        finally:
            self.free.put(request)


class OpenVinoSession:
    """An OpenVINO file (``openvino/*.xml`` of an export folder) behind onnxruntime's session interface
    (``get_inputs``, ``get_outputs``, ``run``), so :class:`OnnxEncoder` tokenises and batches for it the same way.

    fp32 inference precision (``INFERENCE_PRECISION_HINT``): OpenVINO's CPU default is bf16 on CPUs with bf16
    instructions, where the fp32 file then misses the fp32 gate (min cosine 0.99989 on all-mpnet-base-v2
    L4/d128); a file cannot carry that setting. The int8 file's activation group size is OpenVINO's own
    reading of the file. With ``fixed_widths`` (see :data:`FIXED_WIDTHS`), one short text runs on a fixed-shape
    copy of the model; the outputs are the same (token outputs cut back to the text's width)."""

    def __init__(self, path: Path, threads: int | None = None, *, pad_token_id: int = 0,
                 padding_side: str = "right", fixed_widths: Sequence[int] = (), streams: int = 1) -> None:
        # LATENCY: each call is one batch; ``streams`` > 1 splits the threads into streams that run calls at once
        self.config: dict = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": int(streams)}
        if threads is not None:
            self.config["INFERENCE_NUM_THREADS"] = int(threads)
        self.path, self.streams = Path(path), int(streams)
        self.compiled = compile_openvino(str(path), self.config)
        # an infer request is not safe to share between threads (calls from a server's threads gave other texts'
        # vectors, max |diff| 0.24), where onnxruntime's run is: a call takes one of ``streams`` requests
        self.requests = _Requests(self.compiled, self.streams)
        self.pad_token_id, self.padding_side = pad_token_id, padding_side
        self.fixed_widths = tuple(sorted(int(w) for w in fixed_widths))
        self.fixed: dict[int, _Requests] = {}  # width -> its copy's requests, compiled on first use
        self.lock = threading.Lock()  # compiling a fixed-shape copy

    def get_inputs(self) -> list[_Port]:
        return [_Port(p.get_any_name()) for p in self.compiled.inputs]

    def get_outputs(self) -> list[_Port]:
        return [_Port(p.get_any_name()) for p in self.compiled.outputs]

    def run(self, outputs: Sequence[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        rows, width = next(iter(feed.values())).shape
        fixed = next((w for w in self.fixed_widths if w >= width), None) if rows == 1 else None
        # shared buffers (no copy of the inputs in, nor of the outputs not asked for); the asked ones are copied out
        if fixed is None:
            with self.requests.take() as request:
                result = request.infer(feed, share_inputs=True, share_outputs=True)
                return [result[self.compiled.output(name)].copy() for name in outputs]
        requests = self._fixed(fixed)
        with requests.take() as request:
            result = request.infer({name: self._pad(name, array, fixed) for name, array in feed.items()},
                                   share_inputs=True, share_outputs=True)
            return [self._cut(name, result[requests.compiled.output(name)], width).copy() for name in outputs]

    def _fixed(self, width: int) -> _Requests:
        with self.lock:
            if width not in self.fixed:
                import openvino as ov

                model = ov.Core().read_model(str(self.path))
                model.reshape({p.get_any_name(): ov.PartialShape([1, width]) for p in model.inputs})
                self.fixed[width] = _Requests(compile_openvino(model, self.config), self.streams)
            return self.fixed[width]

    def _pad(self, name: str, array: np.ndarray, width: int) -> np.ndarray:
        extra = width - array.shape[1]
        value = self.pad_token_id if name == "input_ids" else 0  # mask 0: the padding is never attended to
        where = ((0, 0), (extra, 0)) if self.padding_side == "left" else ((0, 0), (0, extra))
        return np.pad(array, where, constant_values=value)

    def _cut(self, name: str, array: np.ndarray, width: int) -> np.ndarray:
        if name not in (TOKEN_OUTPUT, LEGACY_TOKEN_OUTPUT):
            return array
        return array[:, array.shape[1] - width:] if self.padding_side == "left" else array[:, :width]


class OnnxEncoder:
    """Sentence embeddings from an export folder, without PyTorch.

    ``file`` picks one ONNX file of the folder (e.g. ``"onnx/model.onnx"`` or
    ``"onnx/model_quantized.onnx"``; the names of older export folders, ``"model.onnx"`` and
    ``"model_int8.onnx"``, pick the same files); by default the one ``export.json`` names as
    ``default_file``. ``threads`` sets the threads it computes on (onnxruntime's intra-op threads, OpenVINO's
    ``INFERENCE_NUM_THREADS``; with ``streams``, split between them). An OpenVINO file of the folder
    (``"openvino/openvino_model_qint8_quantized.xml"``, ``export --format onnx,openvino``) runs in OpenVINO
    (:class:`OpenVinoSession`) with the same tokenisation; ``fixed_widths`` overrides the export's choice of
    fixed-shape copies for one text at a time (:data:`FIXED_WIDTHS`; ``()``: the dynamic model only).

    ``streams`` > 1 splits ``threads`` (default: the CPUs this process may use) into that many streams, each
    running one batch at a time on ``threads // streams`` threads: :meth:`encode` runs its batches side by side
    (at least :data:`BATCHES_PER_STREAM` batches a stream: the batch size is lowered where the texts are too few
    for that), and as many callers can run at once; the vectors are those of one stream at that batch size. It
    pays most for int8 files, whose integer kernels leave a second thread idle on a small model's products:
    all-MiniLM-L6-v2 L3/d128 int8, 2 cores, ``encode`` over many texts, 2 streams of 1 thread ran 1.42x one
    stream of 2 threads at batch 1 and 1.28x at batch 32 (fp32: 1.28x / 1.11x; ``benchmarks/README.md``,
    "streams"). Streams add throughput: they do not shorten a call with one text.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        file: str | None = None,
        *,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
        fixed_widths: Sequence[int] | None = None,
        streams: int = 1,
    ) -> None:
        from tokenizers import Tokenizer

        if int(streams) < 1:
            raise ValueError(f"streams must be at least 1, got {streams}")
        self.streams = int(streams)
        self._pool, self._pool_lock = None, threading.Lock()  # the streams' threads, started on first need
        if self.streams > 1:
            threads = max(1, (threads or usable_cores()) // self.streams) * self.streams
        self.folder = Path(folder)
        self.info = read_export_info(self.folder)
        names = [f["file"] for f in self.info["files"]]
        self.file = _find_file(names, file or self.info.get("default_file") or names[0])
        if self.file is None:
            raise ExportFolderError(f"{file!r} is not an ONNX file of {self.folder}; it has: {', '.join(names)}")
        self.entry = next(f for f in self.info["files"] if f["file"] == self.file)
        tok_info = self.info.get("tokenizer", {})
        tok_path = self.folder / tok_info.get("file", TOKENIZER_FILE)
        if not tok_path.is_file():
            raise ExportFolderError(f"{self.folder} has no {tok_path.name}")
        self.tokenizer = Tokenizer.from_file(str(tok_path))
        self.tokenizer.no_padding()
        self.max_seq_length = int(self.info["max_seq_length"])
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        self.pad_token_id = int(tok_info.get("pad_token_id") or 0)
        self.padding_side = tok_info.get("padding_side", "right")
        self.do_lower_case = bool(self.info.get("do_lower_case", False))

        path = self.folder / self.file
        if path.suffix == ".xml":
            widths = self.entry.get("fixed_widths", ()) if fixed_widths is None else fixed_widths
            self.session = OpenVinoSession(path, threads, pad_token_id=self.pad_token_id,
                                           padding_side=self.padding_side, fixed_widths=widths, streams=self.streams)
        else:
            require("onnx-runtime")
            import onnxruntime as ort

            options = ort.SessionOptions()
            if threads is not None:  # one session, run by each stream's thread at once (run() is thread-safe)
                options.intra_op_num_threads = int(threads) // self.streams
                options.inter_op_num_threads = 1
            options.log_severity_level = 3
            self.session = ort.InferenceSession(str(path), options,
                                                providers=list(providers or ["CPUExecutionProvider"]))
        self.input_names = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        self.token_output = TOKEN_OUTPUT if TOKEN_OUTPUT in outputs else LEGACY_TOKEN_OUTPUT
        self.dim = int(self.info["dims"]["embedding"])

    @property
    def pooling(self) -> str:
        return str(self.info.get("pooling"))

    def tokenize(self, texts: Sequence[str]) -> list:
        """``tokenizers.Encoding`` per text, truncated to ``max_seq_length`` (not padded)."""
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        return self.tokenizer.encode_batch(list(texts))

    def feed(self, encodings: list) -> dict[str, np.ndarray]:
        width = max(1, max(len(e.ids) for e in encodings))
        n = len(encodings)
        ids = np.full((n, width), self.pad_token_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for row, e in enumerate(encodings):
            k = len(e.ids)
            cols = slice(width - k, width) if self.padding_side == "left" else slice(0, k)
            ids[row, cols] = e.ids
            mask[row, cols] = e.attention_mask
            types[row, cols] = e.type_ids
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {name: arrays[name] for name in self.input_names}

    def run(self, encodings: list, outputs: Sequence[str] = (EMBEDDING_OUTPUT,)) -> list[np.ndarray]:
        """Run the graph on one batch of encodings (padded here); returns the requested outputs."""
        return self.session.run(list(outputs), self.feed(encodings))

    def encode(self, texts: str | Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit-length float32 embeddings, ``(len(texts), dim)``; a single string gives ``(dim,)``."""
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        if items:
            encodings = self.tokenize(items)
            size = self.batch_size_for(len(items), batch_size)
            batches = length_sorted_batches([len(e.ids) for e in encodings], size)
            side_by_side = self.streams > 1 and len(batches) > 1  # else one batch after the other, here
            mapped = (self._workers().map if side_by_side else map)(
                lambda idx: self.run([encodings[i] for i in idx])[0], batches)
            for idx, vectors in zip(batches, mapped):
                out[idx] = vectors
        return out[0] if single else out

    def batch_size_for(self, texts: int, batch_size: int) -> int:
        """The batch size :meth:`encode` runs ``texts`` texts at when asked for ``batch_size``: lowered with streams
        until every stream has :data:`BATCHES_PER_STREAM` batches (never raised)."""
        if self.streams == 1:
            return batch_size
        return min(batch_size, max(1, -(-texts // (BATCHES_PER_STREAM * self.streams))))

    def _workers(self):
        with self._pool_lock:  # callers on several threads share one pool
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.streams, thread_name_prefix="espresso-stream")
            return self._pool

    def __repr__(self) -> str:
        return f"OnnxEncoder({str(self.folder)!r}, file={self.file!r}, dim={self.dim})"
