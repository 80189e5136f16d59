"""What an export writes, as one small dataclass instead of a long argument list."""

from __future__ import annotations

from dataclasses import dataclass

from espresso_export.core.errors import ValidationError
from espresso_export.core.parsing import parse_int_list
from espresso_export.core.settings import check_choices, setting
from espresso_export.core.types import ExportFormat, Optimize, Quantize

MIN_OPSET = 14  # LayerNormalization-free graphs and Trilu need 14
MAX_OPSET = 20  # torch's TorchScript exporter stops here
DEFAULT_OPSET = 17
PROTOBUF_LIMIT = 2_000_000_000  # bytes: larger graphs keep their weights in external data


def _formats(text: str) -> tuple[ExportFormat, ...]:
    return parse_formats(text)


def parse_dims(text) -> list[int]:
    """CLI form ``64,32`` -> [64, 32] (duplicates dropped); ``none`` (or empty) -> [] declares the full width only."""
    if isinstance(text, (tuple, list)):
        return [int(d) for d in dict.fromkeys(text)]
    return [] if str(text).strip().lower() in ("", "none") else parse_int_list(str(text), "--dims")


def parse_batches(text) -> tuple[int, ...]:
    """CLI form ``1,32`` -> (1, 32); ``none`` (or empty) -> () turns the export's timing off."""
    if isinstance(text, (tuple, list)):
        return tuple(int(b) for b in text)
    names = [p.strip() for p in str(text).split(",") if p.strip() and p.strip().lower() != "none"]
    try:
        return tuple(int(n) for n in names)
    except ValueError:
        raise ValidationError(f"--timing-batches must be comma-separated batch sizes (e.g. 1,32) or none; got {text!r}")


@dataclass
class ExportSettings:
    """The settings of ``export``, declared once: the API, the ``export`` command and the recipe's ``export`` step
    derive from this class (:mod:`espresso_export.core.settings`); ``overwrite``, ``progress`` and the size limit
    are how a call runs, not settings."""

    formats: tuple[ExportFormat, ...] = setting(
        (ExportFormat.ONNX,), flags=("--format",), cli_type=str, parse=_formats,
        help="Comma-separated: onnx (self-contained graph), safetensors (PyTorch folder), openvino (OpenVINO IR "
             "of the ONNX graph; with --quantize int8 also int8 weights; needs onnx).")
    quantize: Quantize = setting(Quantize.NONE, help="Also write onnx/model_quantized.onnx (int8, CPU) or onnx/model_fp16.onnx (GPU).")
    optimize: Optimize = setting(Optimize.NONE, help="Also write graph-optimised files: O1 basic, O2 + fusions, O3 + "
                                                     "GELU approximation.")
    opset: int = setting(DEFAULT_OPSET, help=f"ONNX opset ({MIN_OPSET}-{MAX_OPSET}).")
    max_seq_len: int | None = setting(None, min=1, flags=("--max-seq-len",), renamed_from=("max_seq_length",),
                                      help="Truncate inputs to N tokens (default: the model's).")
    validate: bool = setting(True, help="Check every written file against PyTorch (--no-validate skips the parity "
                                        "check; not recommended).")
    exporter: str = setting("auto", help="auto (TorchScript, then dynamo if it fails), torchscript or dynamo.")
    int8_scheme: str = setting("per-token", choices=("per-token", "dynamic", "auto"),
                               help="int8: per-token (a range per token: a text's vector does not depend on the other "
                                    "texts in its batch), dynamic (onnxruntime's fused kernels, faster, but one range "
                                    "per batch: vectors shift with the batch) or auto (dynamic where it passes its "
                                    "calibration check, else per-token).")
    int8_weights: str = setting("portable", choices=("portable", "cpu"),
                                help="int8 weight bits: portable (7 bits: exact on every x86 CPU, in the browser's wasm "
                                     "and on ARM) or cpu (8 bits where this CPU has VNNI: faster here, but the file "
                                     "saturates on CPUs without VNNI and in onnxruntime-web).")
    smooth_alpha: float = setting(0.5, min=0.0, max=1.0, help="int8: SmoothQuant migration strength.")
    calibration_samples: int = setting(256, min=1, help="int8: sentences that measure the activation ranges.")
    dims: list[int] = setting(
        default_factory=list, cli_type=str, parse=parse_dims, metavar="64,32",
        help="Nested widths the export declares (export.json nested_widths, config.json matryoshka_dimensions) "
             "and stores int8 ranges for: the first N dimensions, renormalised. Exact for a PCA head (its first N "
             "components are the PCA fitted at N); for other heads check them with `verify --dims`.")
    timing_batches: tuple[int, ...] = setting(
        (1, 32), cli_type=str, parse=parse_batches, metavar="1,32",
        help="Time every written file at these batch sizes on the probe sentences; the default file (int8, "
             "optimised first) gives way only to a file that passed and is faster in every round (none: no "
             "timing).")
    threads: int | None = setting(None, min=1, cpus=True, help="Threads the timing runs each file on (onnxruntime's intra-op, "
                                                       "OpenVINO's), as a user would serve it. Default: every core "
                                                       "this process may use.")
    min_cosine: dict[str, float] = setting(default_factory=dict, cli=False,
                                           help="Stricter or looser parity gates per precision, e.g. {int8: 0.995}.")
    trust_remote_code: bool = setting(False, recipe=False, help="Allow model code from the checkpoint's repository (off by "
                                                  "default).")
    overwrite: bool = False
    external_data_threshold: int = PROTOBUF_LIMIT  # bytes; larger graphs keep their weights in external data
    progress: bool = False

    def __post_init__(self) -> None:
        self.formats = tuple(dict.fromkeys(ExportFormat(f) for f in self.formats))
        self.quantize = Quantize(self.quantize)
        self.optimize = Optimize(self.optimize)
        if not self.formats:
            raise ValidationError("--format needs at least one of: onnx, safetensors")
        if ExportFormat.OPENVINO in self.formats and ExportFormat.ONNX not in self.formats:
            raise ValidationError("--format openvino needs onnx too (--format onnx,openvino): the OpenVINO files are "
                                  "converted from the validated ONNX graph")
        if ExportFormat.ONNX not in self.formats:
            if self.quantize is not Quantize.NONE:
                raise ValidationError(
                    f"--quantize {self.quantize.value} needs --format onnx: safetensors weights are written in fp32"
                )
            if self.optimize is not Optimize.NONE:
                raise ValidationError(f"--optimize {self.optimize.value} needs --format onnx")
        if not MIN_OPSET <= self.opset <= MAX_OPSET:
            raise ValidationError(f"--opset {self.opset} is not supported; use {MIN_OPSET}..{MAX_OPSET}")
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise ValidationError(f"--max-seq-len must be at least 2, got {self.max_seq_len}")
        if self.exporter not in ("auto", "torchscript", "dynamo"):
            raise ValidationError(f"exporter must be auto, torchscript or dynamo, got {self.exporter!r}")
        bad = [k for k in self.min_cosine if k not in {q.value for q in Quantize}]
        if bad:
            raise ValidationError(f"min_cosine keys must be none, int8 or fp16, got {bad}")
        check_choices(self)
        self.dims = parse_dims(self.dims)
        if any(d < 1 for d in self.dims):
            raise ValidationError(f"--dims must be positive widths, got {','.join(map(str, self.dims))}")
        self.timing_batches = parse_batches(self.timing_batches)
        if any(b < 1 for b in self.timing_batches):
            raise ValidationError(f"--timing-batches must be positive, got {','.join(map(str, self.timing_batches))}")
        if not 0.0 <= self.smooth_alpha <= 1.0:
            raise ValidationError(f"smooth_alpha must be in [0, 1], got {self.smooth_alpha}")

    @property
    def onnx(self) -> bool:
        return ExportFormat.ONNX in self.formats

    @property
    def openvino(self) -> bool:
        return ExportFormat.OPENVINO in self.formats

    @property
    def safetensors(self) -> bool:
        return ExportFormat.SAFETENSORS in self.formats


def parse_formats(text: str) -> tuple[ExportFormat, ...]:
    """CLI form ``onnx,safetensors`` -> formats; unknown names are one clear error."""
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    bad = [n for n in names if n not in {f.value for f in ExportFormat}]
    if bad or not names:
        raise ValidationError(f"--format must be a comma-separated list of "
                              f"{', '.join(f.value for f in ExportFormat)}; got {text!r}")
    return tuple(ExportFormat(n) for n in names)
