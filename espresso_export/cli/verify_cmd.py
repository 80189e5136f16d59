"""``espresso-export verify``: the quality gate; its options are derived from
:class:`~espresso_export.verification.verify_settings.VerifySettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.cli.app import app
from espresso_export.core.settings import param, settings_command
from espresso_export.verification.verify_settings import VerifySettings


def _verify(settings: VerifySettings, *, candidate: str, against: str, json_file: Optional[Path],
            markdown_file: Optional[Path]) -> None:
    """Measure a model against its source: STS retention, latency, size, retrieval; exit 3 if a threshold fails."""
    from espresso_export.cli.render import print_json
    from espresso_export.core.files import write_text_atomic
    from espresso_export.verification.report import check_report_path
    from espresso_export.verification.verify import verify as run_verify

    to_stdout = json_file is not None and str(json_file) == "-"
    for path, kind in ((None if to_stdout else json_file, "json"), (markdown_file, "markdown")):
        if path is not None:
            check_report_path(path, kind)  # before any model loads: writable, and no file of the user's replaced
    report = run_verify(candidate, against, settings, progress=not to_stdout)
    if to_stdout:
        print_json(report.to_dict())
    else:
        report.print()
        if json_file is not None:
            import json

            write_text_atomic(json_file, json.dumps(report.to_dict(), indent=2) + "\n")
    if markdown_file is not None:
        write_text_atomic(markdown_file, report.to_markdown())
    report.raise_for_gate()


verify = app.command(
    name="verify",
    epilog="Exit codes: 0 every threshold given holds, 3 a threshold fails (each failed one is named) or a model's "
    "vectors hold NaN or inf, "
    "2 bad input, 1 runtime failure.\n\n"
    "Examples:\n\n"
    "  espresso-export verify out/minilm-L3-d128 --against minilm --min-sts-retention 0.95\n\n"
    "  espresso-export verify small/ --against sentence-transformers/all-mpnet-base-v2 --sts sts-test.csv "
    "--retrieval beir/dbpedia/ --max-latency-ratio 0.5 --json report.json --markdown report.md",
)(settings_command(VerifySettings, [
    param("candidate", Annotated[str, typer.Argument(help="The model to check: folder (PyTorch, sentence-transformers "
                                                          "or ONNX export), Hub id or alias.")]),
    param("against", Annotated[str, typer.Option("--against", "-a", help="The source model it was made from.")]),
    param("json_file", Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON to FILE ('-' "
                                                              "for stdout, then no table).")], None),
    param("markdown_file", Annotated[Optional[Path], typer.Option("--markdown", help="Write the report as Markdown "
                                                                  "(for a model card) to FILE.")], None),
], _verify))
