"""A torch-free encoder for export folders: onnxruntime (or OpenVINO) + tokenizers + numpy, what an edge
deployment ships (a test checks that ``torch`` is never imported)::

    from espresso_export.runtime import OnnxEncoder

    enc = OnnxEncoder("out/minilm-L3-d128-onnx")       # the file export.json recommends
    vectors = enc.encode(["a sentence", "another"])    # float32, (2, enc.dim), unit length
    queries = enc.encode_query(["what is a sentence?"]) # with the model's query prompt, if it has one
    codes = enc.encode(["a sentence"], precision="int8", dim=64)  # int8 codes of a declared nested width

The graph already holds pooling, the head and L2 normalisation; this class adds the model's prompt, tokenises as
the source model did, batches by token length and runs the graph.
"""

from __future__ import annotations

import json
import os
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
from espresso_export.core.prompts import StUsage  # stdlib-only

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


# One text of up to 64 tokens can run on a copy of the model compiled for a fixed shape (1, W), W the smallest
# of these widths that holds it (the text padded and masked out): OpenVINO's CPU plugin re-prepares every node
# when the input shape changes between calls, which at batch 1 can cost more than a small model's compute. The
# export times both ways and records the widths (``fixed_widths`` in export.json) only when the copies were
# faster (exporting/timing.py). Batches, longer texts and older exports use the dynamic model.
FIXED_WIDTHS = (16, 32, 48, 64)


# With streams, ``encode`` makes at least this many batches a stream (smaller batches, never larger): texts
# sorted by length make batches of unequal cost, and a stream left with the longest of two batches runs it alone.
BATCHES_PER_STREAM = 4


class OnnxEncoder:
    """Sentence embeddings from an export folder, without PyTorch.

    ``file`` picks one ONNX or OpenVINO file of the folder (default: ``export.json``'s ``default_file``; the
    names of older export folders pick the same files). ``threads`` sets the compute threads; ``fixed_widths``
    overrides the export's fixed-shape copies for one text at a time (:data:`FIXED_WIDTHS`; ``()``: none).
    ``streams`` > 1 splits ``threads`` into that many streams, each running one batch at a time, so
    :meth:`encode` runs its batches side by side and several callers can run at once: more throughput (most for
    int8 files on small models), not a shorter call for one text.
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
        self._load_tokenizer()
        # the source's prompts and similarity (exports before they were recorded: none, cosine)
        self.usage = StUsage.from_config(self.info, include_prompt=self.info.get("include_prompt", True),
                                         where=str(self.folder / EXPORT_FILE))
        self.normalized = bool(self.info.get("normalize", True))
        self.session = self._open_session(threads, providers, fixed_widths)
        self.input_names = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        self.token_output = TOKEN_OUTPUT if TOKEN_OUTPUT in outputs else LEGACY_TOKEN_OUTPUT
        self.dim = int(self.info["dims"]["embedding"])

    def _load_tokenizer(self) -> None:
        """The folder's tokenizer, truncating and lower-casing as the source model did (padding is done here)."""
        from tokenizers import Tokenizer

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
        # a static model's export (model2vec's reading of a text): no special tokens, each text cut to a number of
        # characters before tokenising; every other export: the tokenizer's special tokens, no cut
        self.add_special_tokens = bool(tok_info.get("add_special_tokens", True))
        limit = tok_info.get("char_limit")
        self.char_limit = int(limit) if limit else None

    def _open_session(self, threads: int | None, providers: Sequence[str] | None, fixed_widths):
        """An OpenVINO session for an ``.xml`` file, else an onnxruntime session (run by every stream at once)."""
        path = self.folder / self.file
        if path.suffix == ".xml":
            widths = self.entry.get("fixed_widths", ()) if fixed_widths is None else fixed_widths
            from espresso_export.runtime.openvino_session import OpenVinoSession

            return OpenVinoSession(path, threads, pad_token_id=self.pad_token_id, padding_side=self.padding_side,
                                   fixed_widths=widths, streams=self.streams)
        require("onnx-runtime")
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads is not None:  # one session, run by each stream's thread at once (run() is thread-safe)
            options.intra_op_num_threads = int(threads) // self.streams
            options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(path), options, providers=list(providers or ["CPUExecutionProvider"]))

    @property
    def pooling(self) -> str:
        return str(self.info.get("pooling"))

    def tokenize(self, texts: Sequence[str]) -> list:
        """``tokenizers.Encoding`` per text, truncated to ``max_seq_length`` (not padded)."""
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        if self.char_limit is not None:
            texts = [t[: self.char_limit] for t in texts]
        return self.tokenizer.encode_batch(list(texts), add_special_tokens=self.add_special_tokens)

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

    @property
    def prompts(self) -> dict[str, str]:
        return self.usage.prompts

    @property
    def similarity_fn_name(self) -> str:
        """How the model's vectors are compared: ``cosine`` (the vectors are unit length, so a dot product is the
        cosine) or ``dot`` (a dot-product model without normalisation: its vectors keep their lengths)."""
        return self.usage.similarity

    def encode(self, texts: str | Sequence[str], batch_size: int = 32, *, prompt_name: str | None = None,
               prompt: str | None = None, precision: str = "float32", dim: int | None = None) -> np.ndarray:
        """Embeddings, ``(len(texts), dim)``; a single string gives ``(dim,)``. Unit length unless the
        model is a dot-product model without normalisation (:attr:`normalized`). As sentence-transformers'
        ``encode``: ``prompt`` (a text) or ``prompt_name`` (one of :attr:`prompts`) goes before each text, and
        without either the model's default prompt, if it has one.

        ``dim``: the first ``dim`` dimensions, renormalised (a nested width, :attr:`nested_widths`).
        ``precision``: float32, or the vectors as sentence-transformers' ``quantize_embeddings`` stores them:
        int8/uint8 codes in the buckets the export fitted for that width (export.json ``vector_calibration``, so
        documents and queries share them), binary/ubinary signs packed 8 to a byte."""
        return self._encode(texts, batch_size, prompt if prompt is not None else self.usage.prompt(prompt_name),
                            precision, dim)

    def encode_query(self, texts: str | Sequence[str], batch_size: int = 32, *, precision: str = "float32",
                     dim: int | None = None) -> np.ndarray:
        """:meth:`encode` with the model's ``query`` prompt (else its default prompt), as sentence-transformers'
        ``encode_query``."""
        return self._encode(texts, batch_size, self.usage.prompt(role="query"), precision, dim)

    def encode_document(self, texts: str | Sequence[str], batch_size: int = 32, *, precision: str = "float32",
                        dim: int | None = None) -> np.ndarray:
        """:meth:`encode` with the model's ``document`` (or ``passage``, ``corpus``) prompt, else its default."""
        return self._encode(texts, batch_size, self.usage.prompt(role="document"), precision, dim)

    @property
    def nested_widths(self) -> list[int]:
        """The widths the export declares (``export --dims``), widest first; older exports: the full width."""
        return [int(w) for w in self.info.get("nested_widths") or [self.dim]]

    def calibration_ranges(self, dim: int | None = None):
        """The int8/uint8 ranges the export stored for width ``dim`` (default: the full width), as
        :class:`~espresso_export.runtime.precision.CalibrationRanges`."""
        from espresso_export.runtime.precision import CalibrationRanges

        width = self.dim if dim is None else int(dim)
        stored = self.info.get("vector_calibration") or {}
        if str(width) not in stored:
            how = f"export it again with --dims {width}" if width < self.dim else "export it again"
            have = ", ".join(stored) or "none"
            raise ExportFolderError(f"{self.folder} stores no int8/uint8 ranges for {width}-d vectors (export.json "
                                    f"vector_calibration has: {have}); {how} to fit and store them")
        return CalibrationRanges.from_dict(stored[str(width)])

    def _check_output_form(self, precision: str, dim: int | None) -> int:
        from espresso_export.runtime.precision import check_precision

        check_precision(precision)
        width = self.dim if dim is None else int(dim)
        if not 1 <= width <= self.dim:
            raise ValidationError(f"dim must be between 1 and the model's {self.dim}-d output, got {dim}")
        return width

    def _encode(self, texts: str | Sequence[str], batch_size: int, prompt: str, precision: str = "float32",
                dim: int | None = None) -> np.ndarray:
        from espresso_export.runtime.precision import SCALAR, quantize, truncate

        width = self._check_output_form(precision, dim)
        ranges = self.calibration_ranges(width) if precision in SCALAR else None  # refused before any encoding
        single = isinstance(texts, str)
        out = self._vectors([texts] if single else list(texts), batch_size, prompt)
        if width < self.dim:
            out = truncate(out, width)
        if precision != "float32":
            out = quantize(out, precision, ranges)
        return out[0] if single else out

    def _vectors(self, items: list[str], batch_size: int, prompt: str) -> np.ndarray:
        if prompt:
            items = [prompt + t for t in items]
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
        return out

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
