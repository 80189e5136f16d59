"""``espresso-export auto``: the smallest model that keeps what the user asks, searched within a time budget on
their documents and verified there; its options are derived from
:class:`~espresso_export.searching.auto_settings.AutoSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OutputOpt, OverwriteOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.searching.auto_settings import AutoSettings


def _auto(settings: AutoSettings, *, model: str, output: Path, overwrite: bool, json_out: bool) -> None:
    """Search the smallest model keeping a target on your documents.

    Searches depth, healing, width and vector precision for the smallest model keeping --min-retention of the
    source on your documents (no labels needed), within --time-budget; exports, verifies and documents the
    answer, with a recipe that rebuilds it."""
    from espresso_export.cli.render import print_hints, print_json
    from espresso_export.core.errors import GateFailedError
    from espresso_export.searching.auto import auto

    result = auto(model, output, settings, overwrite=overwrite, progress=not json_out)
    if json_out:
        print_json(result.to_dict())
    else:
        _print(result)
        print_hints(result.hints)
    if not result.passed:
        failed = "; ".join(result.verify["failed"]) if result.verify and result.verify["failed"] else \
            f"no score could decide whether a candidate keeps {result.target:g} of the source" \
            if result.undecided else f"no candidate kept {result.target:g} of the source" + \
            (" by your judgments" if result.judged is not None else "")
        raise GateFailedError(f"auto: {failed} (record: {result.output}/auto.json)")


def _print(result) -> None:
    from espresso_export.cli.tables import grid, show
    from espresso_export.core.console import out_console

    console = out_console()
    bytes_objective = result.objective == "bytes-per-vector"
    headers = ["model", "heal", "texts", "retention", "agr@10", "time", "B/vec at target" if bytes_objective
               else "B/vec"]

    def size(r: dict) -> str:
        if not bytes_objective:
            return str(r["bytes_per_vector"])
        return "-" if r["bytes_at_target"] is None else str(r["bytes_at_target"])

    found = result.rows()
    rows = [[r["candidate"], r["heal"], f"{r['texts']:,}", f"{r['retention']:.3f}" + ("*" if r["documents"] else ""),
             f"{r['agreement_at_10']:.3f}", f"x{r['latency_ratio']:.2f}", size(r)] for r in found]
    show(grid(f"candidates ({result.score_name} on your documents; target {result.target:g})", headers, rows,
              console.width, right=headers[2:], whole=headers))
    if any(r["documents"] for r in found):
        console.print("* on all the documents; the others on the search's sample of them", highlight=False)
    if result.judged:
        _print_judged(result, console)
    a = result.answer
    if a is not None:
        verdict = f"answer (chosen on {result.chosen_on})" if result.met else "best reached (target not met)"
        weights = f", {result.export['weights']} weights" if result.export else ""
        console.print(f"{verdict}: {a.describe()}, retention {a.measured.retention:.3f}; vectors "
                      f"{a.form.describe()}{weights}", highlight=False)
    console.print(f"{_written(result.output)}: {result.output} ({result.seconds / 60:.1f} min)", highlight=False,
                  soft_wrap=True)  # a path is never broken across lines


def _print_judged(result, console) -> None:
    """--judged-choice: each candidate searched, cheapest first, and its judged retention per corpus."""
    from espresso_export.cli.tables import grid, show

    headers = ["model", "heal", "estimate" if result.with_queries else "known-item", "corpus", "judged", "queries"]
    rows = []
    for c in result.judged:
        for r in c.rows or [None]:
            shown = "-" if r is None or r.retention is None else f"{r.retention:.3f}"
            queries = "-" if r is None else f"{r.judged} (+{r.skipped} skipped)"
            rows.append([c.answer.name, c.answer.heal, f"{c.answer.measured.retention:.3f}",
                         "-" if r is None else r.name, shown, queries])
    show(grid(f"judged choice, cheapest first (target {result.target:g} by your judgments)", headers, rows,
              console.width, right=headers[2:3] + headers[4:], whole=headers))


def _written(out: Path) -> str:
    """The parts of the output that exist: after a miss only the search's record is written."""
    parts = [label for name, label in (("model", "model"), ("export", "export"), ("verify.json", "verify.json"),
                                       ("README.md", "card"), ("recipe.yaml", "recipe.yaml"))
             if (out / name).exists()]
    record = [ext for ext in ("json", "csv", "png") if (out / f"auto.{ext}").exists()]
    return ", ".join(parts + [f"auto.{{{','.join(record)}}}" if len(record) > 1 else f"auto.{record[0]}"]
                     if record else parts) or "nothing written"


auto = app.command(
    name="auto",
    epilog="Examples:\n\n"
    "  espresso-export auto minilm -c docs.jsonl --objective bytes-per-vector --time-budget 30m -o auto-minilm\n\n"
    "  espresso-export auto mpnet --corpus docs.jsonl --sentences sentences.txt --min-retention 0.97 "
    "--time-budget 2h -o auto-mpnet",
)(settings_command(AutoSettings, [
    param("model", Annotated[str, typer.Argument(help="Source model folder, Hub id, or alias.")]),
    param("output", OutputOpt), param("overwrite", OverwriteOpt, False), param("json_out", JsonOpt, False),
], _auto))
