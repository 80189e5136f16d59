"""``export``: checkpoint -> a self-describing, validated export folder, in the layout of :mod:`.export_folder`
(one folder that sentence-transformers, optimum, fastembed, transformers.js and TEI load as it is), plus
``model.safetensors`` and the module folders with ``--format safetensors``.

Everything is assembled in a temp folder and renamed into place only after every file passed validation
(:mod:`.validate`); a failed check leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from espresso_export import __version__
from espresso_export.model.architectures import usable_positions
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, load
from espresso_export.core.cpu import int8_isa
from espresso_export.core.errors import GateFailedError, UnsupportedModelError, ValidationError
from espresso_export.core.extras import require
from espresso_export.core.files import atomic_output, check_output, write_json
from espresso_export.model.save import save_checkpoint
from espresso_export.model.static import is_static_folder
from espresso_export.core.batching import length_sorted_batches
from espresso_export.runtime import EXPORT_FILE, TOKENIZER_FILE, OnnxEncoder, graph_bytes
from espresso_export.core.types import Optimize, Quantize
from espresso_export.exporting.graph import GraphInfo, export_onnx
from espresso_export.exporting.export_folder import BASE_FILE, LAYOUT_VERSION, onnx_file_name, write_loader_files
from espresso_export.core.settings import resolve
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.exporting.vectors import (
    calibration_sentences, declare_in_config, nested_widths, vector_calibration, width_hints,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = LAYOUT_VERSION


@dataclass
class ExportResult:
    output: Path
    source: str
    formats: list[str]
    files: list[dict] = field(default_factory=list)
    default_file: str | None = None
    validated: bool = False
    dim: int = 0
    pooling: str = ""
    max_seq_length: int = 0
    seconds: float = 0.0
    hints: list[str] = field(default_factory=list)
    timing: dict | None = None  # export.json's ``timing`` record (None: the files were not timed)
    nested_widths: list[int] = field(default_factory=list)  # the full width, then the --dims below it

    @property
    def timing_reliable(self) -> bool:
        return self.timing is None or self.timing["reliable"]

    def to_dict(self) -> dict:
        return {
            "output": str(self.output), "source": self.source, "formats": self.formats, "files": self.files,
            "default_file": self.default_file, "validated": self.validated, "dim": self.dim,
            "pooling": self.pooling, "max_seq_length": self.max_seq_length, "seconds": round(self.seconds, 2),
            "timing": self.timing, "nested_widths": self.nested_widths, "hints": self.hints,
        }




def _set_max_length(ckpt: Checkpoint, wanted: int | None) -> None:
    if wanted is None:
        return
    limit = usable_positions(ckpt.config, ckpt.arch)
    if limit is not None and wanted > limit:
        raise ValidationError(f"--max-seq-len {wanted} is more than the model's {limit} positions")
    ckpt.max_seq_length = wanted


def _provenance(ckpt: Checkpoint, weights_sha: str, settings: ExportSettings) -> dict:
    previous = ckpt.provenance or {}
    prov = {
        "espresso_version": __version__,
        "step": "export",
        "source": {"id": ckpt.source, "weights_sha256": weights_sha},
        "formats": [f.value for f in settings.formats],
    }
    if settings.dims:
        prov["nested_widths"] = nested_widths(ckpt.output_dim, settings.dims)
    if previous.get("ese"):
        prov["ese"] = previous["ese"]
    if previous:
        prov["parent"] = previous
    return prov


def _post_description(ckpt: Checkpoint) -> list[str]:
    out = []
    for m in ckpt.post:
        if isinstance(m, DenseLayer):
            out.append(f"Dense({m.in_features}->{m.out_features}, {m.activation.rsplit('.', 1)[-1]})")
        else:
            out.append("Normalize")
    return out


def _manifest(ckpt: Checkpoint, graph: GraphInfo, settings: ExportSettings, files: list[dict], weights_sha: str) -> dict:
    tok = ckpt.tokenizer
    return {
        "format_version": FORMAT_VERSION,
        "espresso_version": __version__,
        "architecture": {"family": ckpt.arch.family, "model_type": ckpt.config.model_type},
        "dims": {"hidden": ckpt.hidden_size, "embedding": ckpt.output_dim},
        "pooling": ckpt.pooling.value,
        "post": _post_description(ckpt),
        "normalize": ckpt.unit_length_output,
        **ckpt.usage.to_config(),  # prompts, default_prompt_name, similarity_fn_name: OnnxEncoder applies them
        "include_prompt": ckpt.usage.include_prompt,
        "max_seq_length": ckpt.max_seq_length,
        "do_lower_case": ckpt.do_lower_case,
        "tokenizer": {"file": TOKENIZER_FILE, "pad_token": tok.pad_token, "pad_token_id": tok.pad_token_id,
                      "padding_side": tok.padding_side},
        "inputs": graph.inputs,
        "outputs": graph.outputs,
        "opset": graph.opset,
        "exporter": graph.exporter,
        "static_reshapes": graph.static_reshapes,
        "default_file": default_file(files),
        "files": files,
        "validated": all(f.get("validation", {}).get("passed") for f in files) if settings.validate else False,
        "cpu": int8_isa(),
        "source": {"id": ckpt.source, "path": str(ckpt.path), "weights_sha256": weights_sha},
        "provenance": ckpt.provenance,
    }


def default_file(files: list[dict]) -> str:
    """The file a CPU user should load: the one the timing recommends, else int8 (optimised first), else fp32.

    Always an ONNX file: ``OnnxEncoder(folder)`` and every runtime of the layout load it with onnxruntime alone;
    the OpenVINO files are there for those who ask for them (their speed is in the timing record)."""
    from espresso_export.exporting.timing import static_default

    timed = [f["file"] for f in files if f.get("recommended")]
    return timed[0] if timed else static_default([f for f in files if f["file"].endswith(".onnx")])["file"]


def _calibration_feeds(folder: Path, settings: ExportSettings) -> list[dict]:
    sentences = calibration_sentences(settings.calibration_samples)
    enc = OnnxEncoder(folder, BASE_FILE)
    encodings = enc.tokenize(sentences)
    return [enc.feed([encodings[i] for i in idx]) for idx in length_sorted_batches([len(e.ids) for e in encodings], 32)]


def _int8_files(tmp: Path, work: Path, settings: ExportSettings, external: bool, feeds: list[dict]) -> list[dict]:
    """The int8 variants: of the fp32 graph, and (with --optimize) of a graph optimised for quantisation."""
    from espresso_export.exporting.int8_schemes import write_int8
    from espresso_export.exporting.optimize import optimize_file

    opt = settings.optimize
    sources = [(Optimize.NONE, tmp / BASE_FILE, {})]
    if opt is not Optimize.NONE:
        pre = work / "for_int8.onnx"
        sources.append((opt, pre, optimize_file(tmp / BASE_FILE, pre, opt, external=external, for_int8=True)))
    files = []
    for level, src, fused in sources:
        name = onnx_file_name(Quantize.INT8, level)
        report = write_int8(src, tmp / name, feeds, scheme=settings.int8_scheme, alpha=settings.smooth_alpha,
                            external_threshold=settings.external_data_threshold, cpu=int8_isa(),
                            portable=settings.int8_weights == "portable")
        files.append({"file": name, "quantization": "int8", "optimization": level.value, "fused": fused,
                      "int8": report, "external_data": (tmp / (name + ".data")).exists()})
    return files


def _fp16_files(tmp: Path, settings: ExportSettings) -> list[dict]:
    """The fp16 variants of the fp32 graph and (with --optimize) of its optimised form."""
    from espresso_export.exporting.quantize import convert_fp16

    opt = settings.optimize
    files = []
    for level in [Optimize.NONE] + ([opt] if opt is not Optimize.NONE else []):
        name = onnx_file_name(Quantize.FP16, level)
        convert_fp16(tmp / onnx_file_name(Quantize.NONE, level), tmp / name,
                     external_threshold=settings.external_data_threshold)
        files.append({"file": name, "quantization": "fp16", "optimization": level.value,
                      "external_data": (tmp / (name + ".data")).exists()})
    return files


def _write_onnx_files(ckpt: Checkpoint, tmp: Path, settings: ExportSettings, weights_sha: str) -> tuple[GraphInfo, list[dict]]:
    from espresso_export.exporting.optimize import optimize_file

    graph = export_onnx(ckpt, tmp / BASE_FILE, settings)
    external = graph.external_data
    files = [{"file": BASE_FILE, "quantization": "none", "optimization": "none", "external_data": external}]
    write_json(tmp / EXPORT_FILE, _manifest(ckpt, graph, settings, files, weights_sha))  # the calibration reads it
    work = tmp / ".work"
    work.mkdir()
    opt = settings.optimize
    try:
        if opt is not Optimize.NONE:
            fused = optimize_file(tmp / BASE_FILE, tmp / onnx_file_name(Quantize.NONE, opt), opt, external=external)
            files.append({"file": onnx_file_name(Quantize.NONE, opt), "quantization": "none",
                          "optimization": opt.value, "fused": fused, "external_data": external})
        int8 = settings.quantize is Quantize.INT8
        feeds = _calibration_feeds(tmp, settings) if int8 else []
        if int8:
            files += _int8_files(tmp, work, settings, external, feeds)
        if settings.quantize is Quantize.FP16:
            files += _fp16_files(tmp, settings)
        if settings.openvino:
            from espresso_export.exporting.int8_schemes import CALIBRATION_MIN_COSINE
            from espresso_export.exporting.openvino import write_openvino

            files += write_openvino(tmp, tmp / BASE_FILE, feeds, int8=int8, target=CALIBRATION_MIN_COSINE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in files:
        f["bytes"] = graph_bytes(tmp / f["file"])
    write_json(tmp / EXPORT_FILE, _manifest(ckpt, graph, settings, files, weights_sha))
    return graph, files


def _validate(ckpt: Checkpoint, tmp: Path, files: list[dict], settings: ExportSettings) -> None:
    from espresso_export.core.progress import track
    from espresso_export.exporting.validate import check_file, reference

    ref = reference(ckpt)
    isa = int8_isa()
    for f in track(files, description="validating" if settings.progress else None):
        f["validation"] = check_file(tmp, f["file"], Quantize(f["quantization"]), ref,
                                     min_cosine=settings.min_cosine.get(f["quantization"]))
        if f["quantization"] == "int8":
            f["checked_on_cpu"] = isa
    failed = [f for f in files if not f["validation"]["passed"]]
    if failed:
        detail = "; ".join(f"{f['file']}: {', '.join(f['validation']['failures'])}" for f in failed)
        raise GateFailedError(f"export validation failed, nothing written ({detail}); "
                              "--no-validate writes the files anyway")


def _timed(tmp: Path, files: list[dict], settings: ExportSettings, result: ExportResult) -> dict:
    """Time the written files (:mod:`.timing`); the summary hints say which is recommended and what is slower."""
    from espresso_export.data import BUILTIN, read_sts
    from espresso_export.exporting.timing import time_files

    pairs = read_sts(BUILTIN)
    timing = time_files(tmp, files, pairs.sentence1 + pairs.sentence2, settings.timing_batches, settings.threads)
    result.timing = timing
    result.hints += timing["notes"]
    if timing["recommended"]:
        result.hints.append(f"recommended file: {timing['recommended']} (measured at batch "
                            f"{', '.join(map(str, settings.timing_batches))}; export.json 'timing'"
                            f"{'' if timing['reliable'] else '; the timing was NOT reliable'})")
    if streams := timing.get("streams"):
        result.hints.append(
            f"OnnxEncoder(..., streams={streams['streams']}) ran {streams['file']} at {streams['vs_one_stream']:.2f}x "
            f"one stream, batch {streams['batch']}, {streams['threads']} threads (throughput, not one query's latency)")
    return timing


def _write_onnx_folder(ckpt: Checkpoint, tmp: Path, settings: ExportSettings, weights_sha: str,
                       result: ExportResult) -> None:
    """The ONNX files, validated and timed, and ``export.json`` with the nested widths and the vectors' int8
    ranges (fitted on what the default file outputs)."""
    write_loader_files(ckpt, tmp, modules_written=settings.safetensors)
    if not (tmp / TOKENIZER_FILE).is_file():
        raise UnsupportedModelError(f"the tokenizer of {ckpt.path} cannot be saved as {TOKENIZER_FILE}")
    graph, files = _write_onnx_files(ckpt, tmp, settings, weights_sha)
    if settings.validate:
        _validate(ckpt, tmp, files, settings)
    else:
        result.hints.append("warning: --no-validate: the ONNX files were not compared with the PyTorch model")
    manifest = _manifest(ckpt, graph, settings, files, weights_sha)
    if settings.timing_batches:
        manifest["timing"] = _timed(tmp, files, settings, result)
        manifest["default_file"] = default_file(files)
    manifest["nested_widths"] = result.nested_widths
    manifest["vector_calibration"] = vector_calibration(tmp, manifest["default_file"], result.nested_widths)
    write_json(tmp / EXPORT_FILE, manifest)
    result.files = files
    result.default_file = manifest["default_file"]
    result.validated = settings.validate


def _renamed_keyword(settings: ExportSettings | None, overrides: dict) -> ExportSettings | None:
    """``export(..., options=...)``, the keyword's earlier name, still works (with a DeprecationWarning)."""
    if "options" not in overrides:
        return settings
    warnings.warn("export(options=...) is now export(settings=...)", DeprecationWarning, stacklevel=3)
    return overrides.pop("options")


def export(
    model: str | os.PathLike | Checkpoint,
    output: str | os.PathLike,
    settings: ExportSettings | None = None,
    **overrides,
) -> ExportResult:
    """Export ``model`` (any folder ``shrink`` writes, a sentence-transformers folder, or a static model folder:
    :mod:`.static_export`) to ``output``.

    Keyword overrides set :class:`ExportSettings` fields, e.g.
    ``export("minilm-L3", "out", quantize="int8", optimize="O2")``.
    """
    start = time.perf_counter()
    settings = resolve(ExportSettings, _renamed_keyword(settings, overrides), overrides, call="export")
    if settings.onnx:
        require("onnx-export")
    if not isinstance(model, Checkpoint) and is_static_folder(model):  # a token table: its own small graph
        from espresso_export.exporting.static_export import export_static

        return export_static(model, output, settings)
    if settings.openvino:
        require("openvino-export")
    if isinstance(model, Checkpoint):
        ckpt = model
        check_output(output, overwrite=settings.overwrite, inputs=[ckpt.path])
    else:
        check_output(output, overwrite=settings.overwrite, inputs=[model])
        ckpt = load(model, trust_remote_code=settings.trust_remote_code)
    _set_max_length(ckpt, settings.max_seq_len)
    if settings.onnx and not getattr(ckpt.tokenizer, "is_fast", False):
        raise UnsupportedModelError(f"{ckpt.path} has no fast tokenizer (tokenizer.json); the ONNX runtime needs one")
    weights_sha = ckpt.weights_sha256()
    result = ExportResult(output=Path(output).expanduser().resolve(), source=ckpt.source,
                          formats=[f.value for f in settings.formats], dim=ckpt.output_dim,
                          pooling=ckpt.pooling.value, max_seq_length=int(ckpt.max_seq_length or 0))
    result.nested_widths = nested_widths(ckpt.output_dim, settings.dims)
    result.hints += width_hints(ckpt, result.nested_widths)
    with atomic_output(output, overwrite=settings.overwrite, inputs=[ckpt.path]) as tmp:
        if settings.safetensors:
            save_checkpoint(ckpt, tmp, post=ckpt.post, provenance=_provenance(ckpt, weights_sha, settings))
        if settings.onnx:
            _write_onnx_folder(ckpt, tmp, settings, weights_sha, result)
        declare_in_config(tmp, result.nested_widths)
    result.seconds = time.perf_counter() - start
    return result
