"""What an export writes, as one small dataclass instead of a long argument list."""

from __future__ import annotations

from dataclasses import dataclass, field

from espresso_export.core.errors import ValidationError
from espresso_export.core.types import ExportFormat, Optimize, Quantize

MIN_OPSET = 14  # LayerNormalization-free graphs and Trilu need 14
MAX_OPSET = 20  # torch's TorchScript exporter stops here
DEFAULT_OPSET = 17
PROTOBUF_LIMIT = 2_000_000_000  # bytes: larger graphs keep their weights in external data


@dataclass
class ExportOptions:
    formats: tuple[ExportFormat, ...] = (ExportFormat.ONNX,)
    quantize: Quantize = Quantize.NONE
    optimize: Optimize = Optimize.NONE
    opset: int = DEFAULT_OPSET
    max_seq_length: int | None = None  # None: the model's own
    validate: bool = True
    overwrite: bool = False
    exporter: str = "auto"  # "torchscript", "dynamo", or "auto" (TorchScript, then dynamo if it fails)
    smooth_alpha: float = 0.5  # SmoothQuant migration strength for int8
    calibration_samples: int = 256  # sentences to measure activation ranges for int8
    external_data_threshold: int = PROTOBUF_LIMIT
    min_cosine: dict[str, float] = field(default_factory=dict)  # stricter/looser gates per precision: {"int8": 0.995}
    trust_remote_code: bool = False
    progress: bool = False

    def __post_init__(self) -> None:
        self.formats = tuple(dict.fromkeys(ExportFormat(f) for f in self.formats))
        self.quantize = Quantize(self.quantize)
        self.optimize = Optimize(self.optimize)
        if not self.formats:
            raise ValidationError("--format needs at least one of: onnx, safetensors")
        if ExportFormat.ONNX not in self.formats:
            if self.quantize is not Quantize.NONE:
                raise ValidationError(
                    f"--quantize {self.quantize.value} needs --format onnx: safetensors weights are written in fp32"
                )
            if self.optimize is not Optimize.NONE:
                raise ValidationError(f"--optimize {self.optimize.value} needs --format onnx")
        if not MIN_OPSET <= self.opset <= MAX_OPSET:
            raise ValidationError(f"--opset {self.opset} is not supported; use {MIN_OPSET}..{MAX_OPSET}")
        if self.max_seq_length is not None and self.max_seq_length < 2:
            raise ValidationError(f"--max-seq-len must be at least 2, got {self.max_seq_length}")
        if self.exporter not in ("auto", "torchscript", "dynamo"):
            raise ValidationError(f"exporter must be auto, torchscript or dynamo, got {self.exporter!r}")
        bad = [k for k in self.min_cosine if k not in {q.value for q in Quantize}]
        if bad:
            raise ValidationError(f"min_cosine keys must be none, int8 or fp16, got {bad}")
        if not 0.0 <= self.smooth_alpha <= 1.0:
            raise ValidationError(f"smooth_alpha must be in [0, 1], got {self.smooth_alpha}")

    @property
    def onnx(self) -> bool:
        return ExportFormat.ONNX in self.formats

    @property
    def safetensors(self) -> bool:
        return ExportFormat.SAFETENSORS in self.formats


def parse_formats(text: str) -> tuple[ExportFormat, ...]:
    """CLI form ``onnx,safetensors`` -> formats; unknown names are one clear error."""
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    bad = [n for n in names if n not in {f.value for f in ExportFormat}]
    if bad or not names:
        raise ValidationError(f"--format must be a comma-separated list of onnx, safetensors; got {text!r}")
    return tuple(ExportFormat(n) for n in names)
