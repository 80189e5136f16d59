"""Option types shared by every command, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..types import Head, Pooling, Select

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Output folder (written atomically).")]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output folder.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout instead of a table.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (calibration sampling, training).")]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", min=1, help="Sentences per forward pass.")]
TrustRemoteCodeOpt = Annotated[
    bool, typer.Option("--trust-remote-code", help="Allow model code from the checkpoint's repository (off by default).")
]
PoolingOpt = Annotated[
    Optional[Pooling],
    typer.Option("--pooling", case_sensitive=False, help="Override the pooling read from the checkpoint."),
]
LayersOpt = Annotated[
    str,
    typer.Option("--layers", "-l", help="How many layers to keep (4), or 0-based layer indices to keep (0,2,4)."),
]
DimOpt = Annotated[Optional[int], typer.Option("--dim", "-d", help="Output embedding width k.")]
HeadOpt = Annotated[
    Optional[Head],
    typer.Option("--head", case_sensitive=False,
                 help="pca (fitted), truncate (first-k, for ESE-trained models) or none. "
                      "Default: truncate for ESE-trained models, pca otherwise; none without --dim."),
]
SelectOpt = Annotated[
    Select,
    typer.Option("--select", case_sensitive=False,
                 help="Which layers a count keeps: first (ESE), spread (keeps the last layer), "
                      "auto = first for ESE-trained models, spread otherwise."),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option("--threads", min=1, help="Intra-op threads for torch and onnxruntime (fixed for every model "
                                          "measured). Default: torch's default, the physical core count."),
]
StsOpt = Annotated[
    Optional[list[str]],
    typer.Option("--sts", help="STS set, repeatable: 'builtin' (a shipped smoke set, not a benchmark), an STS-B file "
                               "(tab-separated, score in column 5, sentences in 6-7), a csv/tsv/jsonl with "
                               "sentence1,sentence2,score columns, or a Hub dataset id owner/name[:split] (online, "
                               "needs `datasets`). Default: builtin."),
]
StsColumnsOpt = Annotated[
    Optional[str],
    typer.Option("--sts-columns", help="Column names for csv/tsv/jsonl STS files: sentence1,sentence2,score."),
]
StsLimitOpt = Annotated[
    Optional[int],
    typer.Option("--sts-limit", min=2, help="Use N pairs of each STS set, spread evenly over it (quick checks)."),
]
CalibrationOpt = Annotated[
    Optional[Path],
    typer.Option("--calibration", help="Sentences for the PCA head: .txt (one a line) or .jsonl. "
                                       "Default: a small corpus shipped with espresso-export."),
]
CalibrationSamplesOpt = Annotated[
    int, typer.Option("--calibration-samples", min=1, help="Use at most this many calibration sentences.")
]


def parse_int_list(text: str, option: str) -> list[int]:
    """``"2,3,4"`` -> ``[2, 3, 4]`` (positive, duplicates dropped, order kept); a clear error otherwise."""
    from ..errors import ValidationError

    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as e:
        raise ValidationError(f"{option} must be comma-separated integers like 1,32, got {text!r}") from e
    if not values or any(v < 1 for v in values):
        raise ValidationError(f"{option} must be positive integers like 1,32, got {text!r}")
    return list(dict.fromkeys(values))
