"""``espresso-export export``: its options are derived from
:class:`~espresso_export.exporting.export_settings.ExportSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OutputOpt, OverwriteOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.exporting.export_settings import ExportSettings


def _export(settings: ExportSettings, *, model: str, output: Path, overwrite: bool, json_out: bool) -> None:
    """Export to a self-contained ONNX graph (pooling, head, normalisation inside), validated against PyTorch."""
    from dataclasses import replace

    from espresso_export.cli.render import finish_table, report_json
    from espresso_export.exporting.export import export

    result = export(model, output, replace(settings, overwrite=overwrite, progress=not json_out))
    if report_json(result, json_out):
        return
    rows = [
        ("source", result.source),
        ("embedding", f"{result.dim}-d, {result.pooling} pooling, L2-normalised, max {result.max_seq_length} tokens"),
        ("formats", ", ".join(result.formats)),
    ]
    for f in result.files:
        v = f.get("validation")
        check = "not validated" if v is None else (
            f"min cos {v['min_cosine']:.4f}, max |diff| {v['max_abs_diff']:.2g}"
            + (f", STS probe {v['sts_probe']['delta']:+.2f}" if "sts_probe" in v else f" vs {v['against']}"))
        default = " (default)" if f["file"] == result.default_file else ""
        rows.append((f["file"] + default,
                     f"{f['bytes'] / 1e6:.1f} MB; {check}{_speed(f, '' if result.timing_reliable else '?')}"))
    if result.files:
        widths = ", ".join(map(str, result.nested_widths))
        rows.append(("vectors", f"widths {widths}; int8/uint8 ranges stored for each (export.json vector_calibration)"))
    if not result.timing_reliable:  # in the table too, not only in a stderr note a log may not keep
        rows.append(("timing", f"NOT reliable (?): {'; '.join(result.timing['reasons'])}"))
    finish_table("export", rows, result)


def _speed(f: dict, mark: str) -> str:
    speed = f.get("speed")
    if not speed:
        return ""
    rates = ", ".join(f"{v:,.0f}/s{mark} @{b}" for b, v in speed["sentences_per_second"].items())
    vs = speed.get("vs_fp32") or speed.get("vs_unoptimized")
    what = " of onnx/model.onnx)" if "vs_fp32" in speed else " of unoptimised)"  # an OpenVINO file's vs_fp32 too
    ratio = "" if not vs else " (" + ", ".join(f"{r:.2f}x{mark}" for r in vs.values()) + what
    return f"; {rates}{ratio}"


export_command = app.command(
    name="export",
    epilog="Examples:\n\n"
    "  espresso-export export out/minilm-L3-d128 -o out/onnx --quantize int8 --optimize O2\n\n"
    "  espresso-export export model/ -o out/ --format onnx,safetensors --max-seq-len 128\n\n"
    "  espresso-export export out/minilm-L3-d128 -o out/onnx --dims 64,32    (nested widths of a PCA "
    "head)\n\n"
    "  python -c \"from espresso_export.runtime import OnnxEncoder; print(OnnxEncoder('out').encode(['hi']).shape)\"",
)(settings_command(ExportSettings, [
    param("model", Annotated[str, typer.Argument(help="Model folder (what `shrink` writes, or a sentence-transformers "
                                                      "folder).")]),
    param("output", OutputOpt), param("overwrite", OverwriteOpt, False), param("json_out", JsonOpt, False),
], _export))
