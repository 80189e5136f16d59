"""Option types shared by every command, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.core.types import Attention, Head, Pooling, Select

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Output folder (written atomically).")]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output folder.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout instead of a table.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (calibration sampling, training).")]
CorpusFieldOpt = Annotated[Optional[str], typer.Option("--corpus-field", help="jsonl field with the text.")]
CorpusColumnOpt = Annotated[Optional[str], typer.Option("--corpus-column", help="csv/tsv column (header name or "
                                                                                "0-based index) with the text.")]
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

# --- training (shared by every command that trains) ---------------------------------------------------
EpochsOpt = Annotated[int, typer.Option("--epochs", min=1, help="Passes over the training data.")]
LrOpt = Annotated[float, typer.Option("--lr", min=0.0, help="Peak learning rate (AdamW).")]
WarmupOpt = Annotated[float, typer.Option("--warmup", min=0.0, max=1.0, help="Fraction of steps of linear warm-up.")]
MaxStepsOpt = Annotated[Optional[int], typer.Option("--max-steps", min=1, help="Stop after this many steps.")]
MaxSeqLenOpt = Annotated[Optional[int], typer.Option("--max-seq-len", min=8, help="Truncate training texts to this many tokens.")]
EvalStsOpt = Annotated[
    Optional[Path],
    typer.Option("--eval-sts", help="STS file evaluated after every epoch; the best checkpoint is kept. "
                                    "Never the test split you report on."),
]
EvalLimitOpt = Annotated[Optional[int], typer.Option("--eval-limit", min=2, help="Evaluate on the first N pairs only.")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from its checkpoint.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda or mps.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", min=1, help="CPU threads for torch.")]
CheckpointEveryOpt = Annotated[
    int, typer.Option("--checkpoint-every", min=0, help="Save a resumable checkpoint every N steps "
                                                       "(0: only at epoch ends and on Ctrl-C).")
]
RunDirOpt = Annotated[Optional[Path], typer.Option("--run-dir", help="Folder for checkpoints (default: OUT.run).")]
KeepCheckpointsOpt = Annotated[bool, typer.Option("--keep-checkpoints", help="Keep the run folder after success.")]
BidirectionalOpt = Annotated[
    Optional[Attention],
    typer.Option("--bidirectional", case_sensitive=False,
                 help="Decoders: make all layers (ESE's LLM recipe) or the last layer (BeLLM) bidirectional; "
                      "mean pooling. Recorded in config.json and espresso.json."),
]

MeasureThreadsOpt = Annotated[  # verify / sweep: every model is measured on the same thread count
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
    from espresso_export.core.errors import ValidationError

    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as e:
        raise ValidationError(f"{option} must be comma-separated integers like 1,32, got {text!r}") from e
    if not values or any(v < 1 for v in values):
        raise ValidationError(f"{option} must be positive integers like 1,32, got {text!r}")
    return list(dict.fromkeys(values))
