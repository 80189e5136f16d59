"""``espresso-export export``."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from espresso_export.core.types import Optimize, Quantize
from espresso_export.cli.app import app
from espresso_export.cli.options import JsonOpt, OutputOpt, OverwriteOpt, TrustRemoteCodeOpt


@app.command(
    name="export",
    epilog="Examples:\n\n"
    "  espresso-export export minilm-L3-d128/ -o minilm-onnx --quantize int8 --optimize O2\n\n"
    "  espresso-export export model/ -o out/ --format onnx,safetensors --max-seq-len 128\n\n"
    "  python -c \"from espresso_export.runtime import OnnxEncoder; print(OnnxEncoder('out').encode(['hi']).shape)\"",
)
def export_command(
    model: Annotated[str, typer.Argument(help="Model folder (what `shrink` writes, or a sentence-transformers folder).")],
    output: OutputOpt,
    formats: Annotated[
        str, typer.Option("--format", help="Comma-separated: onnx (self-contained graph), safetensors (PyTorch folder).")
    ] = "onnx",
    quantize: Annotated[
        Quantize, typer.Option("--quantize", case_sensitive=False,
                               help="Also write model_int8.onnx (CPU) or model_fp16.onnx (GPU).")
    ] = Quantize.NONE,
    optimize: Annotated[
        Optimize, typer.Option("--optimize", case_sensitive=False,
                               help="Also write graph-optimised files: O1 basic, O2 + fusions, O3 + GELU approximation.")
    ] = Optimize.NONE,
    opset: Annotated[int, typer.Option("--opset", help="ONNX opset (14-20).")] = 17,
    max_seq_len: Annotated[
        Optional[int], typer.Option("--max-seq-len", help="Truncate inputs to N tokens (default: the model's).")
    ] = None,
    no_validate: Annotated[
        bool, typer.Option("--no-validate", help="Skip the parity check against PyTorch (not recommended).")
    ] = False,
    overwrite: OverwriteOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Export to a self-contained ONNX graph (pooling, head, normalisation inside), validated against PyTorch."""
    from espresso_export.exporting.options import ExportOptions, parse_formats
    from espresso_export.exporting.pipeline import export
    from espresso_export.cli.render import print_hints, print_json, print_table

    options = ExportOptions(
        formats=parse_formats(formats), quantize=quantize, optimize=optimize, opset=opset,
        max_seq_length=max_seq_len, validate=not no_validate, overwrite=overwrite,
        trust_remote_code=trust_remote_code, progress=not json_out,
    )
    result = export(model, output, options)
    print_hints(result.hints)
    if json_out:
        print_json(result.to_dict())
        return
    rows = [
        ("source", result.source),
        ("embedding", f"{result.dim}-d, {result.pooling} pooling, L2-normalised, max {result.max_seq_length} tokens"),
        ("formats", ", ".join(result.formats)),
    ]
    for f in result.files:
        v = f.get("validation")
        check = "not validated" if v is None else (
            f"min cos {v['min_cosine']:.4f}, max |diff| {v['max_abs_diff']:.2g}, "
            f"STS probe {v['sts_probe']['delta']:+.2f}")
        default = " (default)" if f["file"] == result.default_file else ""
        rows.append((f["file"] + default, f"{f['bytes'] / 1e6:.1f} MB; {check}"))
    rows += [("output", result.output), ("time", f"{result.seconds:.1f} s")]
    print_table("export", rows)
