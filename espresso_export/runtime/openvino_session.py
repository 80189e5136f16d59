"""OpenVINO files of an export folder, run with the tokenisation of :class:`~espresso_export.runtime.OnnxEncoder`
(which opens a ``.xml`` file through :class:`OpenVinoSession`). Torch-free, as the runtime: openvino, numpy and
the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from espresso_export.core.extras import require  # stdlib-only
from espresso_export.runtime.onnx_encoder import FIXED_WIDTHS, LEGACY_TOKEN_OUTPUT, TOKEN_OUTPUT


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
        # an infer request is not safe to share between threads (calls from a server's threads can return other
        # texts' vectors), where onnxruntime's run is: a call takes one of ``streams`` requests
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


__all__ = ["OpenVinoSession", "compile_openvino", "keep_signal_stack", "FIXED_WIDTHS"]
