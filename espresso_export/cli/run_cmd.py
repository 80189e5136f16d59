"""``espresso-export run``: a recipe, from one YAML file to a verified (and published) model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, TrustRemoteCodeOpt


@app.command(
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
    from espresso_export.cli.render import print_hints, print_json

    if list_:
        _list(json_out)
        return
    if recipe is None:
        raise ValidationError("give a recipe file or a shipped recipe name (see `espresso-export run --list`)")
    from espresso_export.pipeline.recipe_runner import plan, run_recipe, selection_warnings
    from espresso_export.pipeline.headers import recipe_header
    from espresso_export.pipeline.recipes import find_recipe, load_recipe, missing_files

    overrides = list(set_ or [])
    if output is not None:
        overrides.append(f"output={output}")
    loaded = load_recipe(recipe, overrides=overrides, check_files=not show_plan)  # a plan shows what files it lacks
    missing = missing_files(recipe, overrides=overrides) if show_plan else None
    if not json_out:
        print_hints(selection_warnings(loaded) + ([f"warning: the run would stop here: {missing}"] if missing else []))
    if show_plan:
        from espresso_export.pipeline.state import check_run_folder

        check_run_folder(loaded, resume=resume, overwrite=overwrite)  # the plan approves only what the run accepts
        rows = plan(loaded)
        if json_out:
            print_json({"recipe": loaded.to_dict(), "plan": rows, "missing_files": missing})
            return
        if header := recipe_header(find_recipe(recipe)):  # what it gives, as measured, before what it would run
            from espresso_export.cli.tables import recipe_list, show

            show(recipe_list([(loaded.name, " ".join(" ".join(header).split()))], title="recipe"))
        _grid(f"plan of {loaded.name} -> {loaded.run_folder} (nothing run)", ("#", "step", "reads", "writes", "settings"),
              [(str(r["index"]), r["step"], r["reads"], r["writes"], r["settings"]) for r in rows])
        return
    result = run_recipe(loaded, resume=resume, overwrite=overwrite, progress=not json_out,
                        trust_remote_code=trust_remote_code)
    if not json_out:  # the steps' own hints and warnings (shrink, distill, export, push)
        print_hints(h for s in result.steps if s.status == "done" and s.result
                    for h in [*s.result.get("hints", []), *s.result.get("warnings", [])])
    if json_out:
        print_json(result.to_dict())
    else:
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
