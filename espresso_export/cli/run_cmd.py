"""``espresso-export run``: a recipe, from one YAML file to a verified (and published) model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, TrustRemoteCodeOpt


@app.command(
    short_help="Run a recipe: shrink, distill, export, verify, push.",
    epilog="Exit codes: 0 every step ran and every gate held, 3 a verify gate failed (the run stopped before push), "
    "2 bad recipe or input, 1 runtime failure.\n\n"
    "Examples:\n\n"
    "  espresso-export run --list\n\n"
    "  espresso-export run minilm-L3-d128 --plan\n\n"
    "  espresso-export run recipes/minilm-L3-d128.yaml -o runs/minilm --set distill.max_sentences=5000\n\n"
    "  espresso-export run my-recipe.yaml --set push.dry_run=false --resume",
)
def run(
    recipe: Annotated[Optional[str], typer.Argument(help="Recipe file (.yaml), or the name of a shipped recipe "
                                                         "(see --list).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a setting, repeatable: STEP.KEY=VALUE "
                                                      "(e.g. distill.lr=1e-3, verify.sts=\\[a.csv,b.csv]) or "
                                                      "source=/ output=/ threads=; the value is read as YAML; "
                                                      "relative paths resolve against the current folder.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Run folder (default: the recipe's "
                                                   "output, else runs/NAME).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Keep the steps already finished in the run folder "
                                         "(same settings and inputs); continue an interrupted training.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Run every step again, replacing its folder.")] = False,
    show_plan: Annotated[bool, typer.Option("--plan", "--dry-run", help="Print the steps that would run, what "
                                            "each reads and writes, and run nothing.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the shipped recipes and exit.")] = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Run a recipe: source -> shrink -> distill or train -> export -> verify (gate) -> push, one folder per step."""
    from espresso_export.core.errors import ValidationError

    if list_:
        _list(json_out)
        return
    if recipe is None:
        raise ValidationError("give a recipe file or a shipped recipe name (see `espresso-export run --list`)")
    overrides = [*(set_ or []), *([f"output={output}"] if output is not None else [])]
    if show_plan:
        _plan(recipe, overrides, resume=resume, overwrite=overwrite, json_out=json_out)
    else:
        _run(recipe, overrides, resume=resume, overwrite=overwrite, trust_remote_code=trust_remote_code,
             json_out=json_out)


def _load(recipe: str, overrides: list[str], *, plan: bool, json_out: bool):
    """The checked recipe and, for a plan, the error a run would stop on for missing files; the warnings are said
    first (a plan checks everything but the files, and names those missing)."""
    from espresso_export.cli.render import print_hints
    from espresso_export.pipeline.recipe_runner import selection_warnings
    from espresso_export.pipeline.recipes import load_recipe, missing_files

    loaded = load_recipe(recipe, overrides=overrides, check_files=not plan)
    missing = missing_files(recipe, overrides=overrides) if plan else None
    if not json_out:
        print_hints(selection_warnings(loaded) + ([f"warning: the run would stop here: {missing}"] if missing else []))
    return loaded, missing


def _plan(recipe: str, overrides: list[str], *, resume: bool, overwrite: bool, json_out: bool) -> None:
    """The steps, what each reads and writes and its settings; then what the recipe is for (its header)."""
    from espresso_export.cli.render import print_json
    from espresso_export.pipeline.headers import recipe_header
    from espresso_export.pipeline.recipe_runner import plan
    from espresso_export.pipeline.recipes import find_recipe
    from espresso_export.pipeline.state import check_run_folder

    loaded, missing = _load(recipe, overrides, plan=True, json_out=json_out)
    check_run_folder(loaded, resume=resume, overwrite=overwrite)  # the plan approves only what the run accepts
    rows = plan(loaded)
    if json_out:
        print_json({"recipe": loaded.to_dict(), "plan": rows, "missing_files": missing})
        return
    _grid(f"plan of {loaded.name} -> {loaded.run_folder} (nothing run)", ("#", "step", "reads", "writes", "settings"),
          [(str(r["index"]), r["step"], r["reads"], r["writes"], r["settings"]) for r in rows])
    if header := recipe_header(find_recipe(recipe)):  # what the recipe is for, after what it would do
        from espresso_export.cli.tables import recipe_list, show

        show(recipe_list([(loaded.name, " ".join(" ".join(header).split()))], title="recipe"))


def _run(recipe: str, overrides: list[str], *, resume: bool, overwrite: bool, trust_remote_code: bool,
         json_out: bool) -> None:
    """Every step, a line on stderr as each starts and ends; then the steps' hints and the table (or JSON)."""
    from espresso_export.cli.render import print_hints, print_json
    from espresso_export.pipeline.recipe_runner import print_step, run_recipe

    loaded, _ = _load(recipe, overrides, plan=False, json_out=json_out)
    result = run_recipe(loaded, resume=resume, overwrite=overwrite, progress=not json_out,
                        trust_remote_code=trust_remote_code, on_step=print_step)  # step lines with --json too
    if json_out:
        print_json(result.to_dict())
    else:
        print_hints(h for s in result.steps if s.status == "done" and s.result  # the steps' own hints and warnings
                    for h in [*s.result.get("hints", []), *s.result.get("warnings", [])])
        _grid(f"run of {loaded.name} in {loaded.run_folder} ({result.seconds:.0f} s)",
              ("#", "step", "status", "time", "result"),
              [(str(s.index), s.kind, s.status, f"{s.seconds:.1f} s" if s.status != "not run" else "", s.summary)
               for s in result.steps])
    result.raise_for_gate()


def _grid(title: str, headers, rows) -> None:
    from espresso_export.cli.tables import grid, show
    from espresso_export.core.console import out_console

    show(grid(title, headers, rows, out_console().width, whole=("#", "step", "writes", "status", "time"),
              heading=2))


def _list(json_out: bool) -> None:
    from espresso_export.pipeline.headers import recipe_header, recipe_summary
    from espresso_export.pipeline.recipes import shipped_recipes
    from espresso_export.cli.render import print_hints, print_json

    found = [(p, recipe_header(p)) for p in shipped_recipes()]
    if json_out:
        print_json([{"name": p.stem, "path": str(p), "header": h} for p, h in found])
        return
    if not found:
        print_hints(["no shipped recipes found: they come with the source tree (recipes/); run a recipe file by path"])
        return
    from espresso_export.cli.tables import recipe_list, show

    show(recipe_list([(p.stem, recipe_summary(h)) for p, h in found],  # reflowed to the width
                     footer="What each gives (measured numbers, data, caveats): `espresso-export run NAME --plan`, "
                            "or the header of recipes/NAME.yaml; `run --list --json` has every header whole."))
