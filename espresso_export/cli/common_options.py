"""Command options that are not a step's settings (the output folder, ``--json``, ...), defined once; and the
options other commands share with a step, derived from that step's settings declaration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.core.parsing import parse_int_list  # noqa: F401  (re-exported for the commands)
from espresso_export.core.settings import field_of, option_type
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.distilling.distill_settings import DistillSettings
from espresso_export.verification.verify_settings import VerifySettings

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Output folder (written atomically).")]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output folder.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout instead of a table.")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from its checkpoint.")]
RunDirOpt = Annotated[Optional[Path], typer.Option("--run-dir", help="Folder for checkpoints (default: OUT.run).")]

# shared with a step: declared in its settings class
SeedOpt = option_type(ShrinkSettings, "seed")
BatchSizeOpt = option_type(ShrinkSettings, "batch_size")
TrustRemoteCodeOpt = option_type(ShrinkSettings, "trust_remote_code")
CalibrationOpt = option_type(ShrinkSettings, "calibration")
SelectOpt = option_type(ShrinkSettings, "select")  # sweep selects layers as shrink does, with its default
SELECT_DEFAULT = field_of(ShrinkSettings, "select").default
CalibrationSamplesOpt = option_type(ShrinkSettings, "calibration_samples")
CorpusFieldOpt = option_type(DistillSettings, "corpus_field")
CorpusColumnOpt = option_type(DistillSettings, "corpus_column")
MeasureThreadsOpt = option_type(VerifySettings, "threads")
StsOpt = option_type(VerifySettings, "sts", cli_type=Optional[list[str]])
StsColumnsOpt = option_type(VerifySettings, "sts_columns")
StsLimitOpt = option_type(VerifySettings, "sts_limit")
RetrievalOpt = option_type(VerifySettings, "retrieval", cli_type=Optional[list[str]])
RelevantScoreOpt = option_type(VerifySettings, "relevant_score")
