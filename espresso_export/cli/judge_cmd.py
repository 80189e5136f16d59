"""``espresso-export judge``: fill a ``--write-judging`` file; its options are derived from
:class:`~espresso_export.verification.judge.JudgeSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.verification.judge_settings import JudgeSettings


def _judge(settings: JudgeSettings, *, pairs: Path, json_out: bool) -> None:
    """Judge the pairs verify or auto wrote (--write-judging): at the terminal, from labels you have, or by a program."""
    from espresso_export.cli.render import print_table, report_json
    from espresso_export.verification.judge import judge

    result = judge(pairs, settings)
    if report_json(result, json_out):
        return
    rows = [("file", result.path), ("judge", result.judge), ("judged now", f"{result.judged_now:,} pairs"),
            ("queries fully judged", f"{result.complete:,} of {result.queries:,}"), ("pairs", f"{result.pairs:,}"),
            ("time", f"{result.seconds:.1f} s")]
    print_table("judge", rows + ([("stopped", result.stopped)] if result.stopped else []))


judge = app.command(
    name="judge",
    short_help="Fill the pairs verify or auto wrote to judge (--write-judging).",
    epilog="Each answer is saved at once: stop any time (q, Ctrl-C) and run it again to continue.\n\n"
    "Examples:\n\n"
    "  espresso-export judge pairs.jsonl --queries 10\n\n"
    "  espresso-export judge pairs.jsonl --qrels qrels/test.tsv\n\n"
    "  espresso-export judge pairs.jsonl --command 'python my_llm_judge.py'",
)(settings_command(JudgeSettings, [
    param("pairs", Annotated[Path, typer.Argument(help="The pairs file --write-judging wrote; filled in place.")]),
    param("json_out", JsonOpt, False),
], _judge))
