"""A recipe from elsewhere: no YAML alias bomb, no folder written outside its run folder, no run.json of the user's
replaced; `--set` errors in one line."""

from __future__ import annotations

import json
import time

import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.pipeline.recipes import load_recipe

TINY = "source: minilm\nsteps:\n  - shrink: {layers: 2, dim: 32}\n  - export: {}\n"


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


def _bomb(levels: int) -> str:
    """A few hundred bytes whose aliases expand to 9**levels strings."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        p, q = chr(96 + i), chr(97 + i)
        lines.append(f"{q}: &{q} [{','.join([f'*{p}'] * 9)}]")
    return "\n".join(lines) + f"\nsource: minilm\nsteps: [*{chr(96 + levels)}]\n"


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(_bomb(9))
    assert len(recipe.read_bytes()) < 400
    start = time.perf_counter()
    code, _, err = run(capsys, "run", recipe, "--plan")
    # at once: expanded, its 9**9 strings would take far longer (and gigabytes); the bound is loose for a slow machine
    assert code == 2 and time.perf_counter() - start < 60
    assert f"{recipe}:1: YAML anchors and aliases (&a, *a) are not accepted" in err and len(err.splitlines()) == 1


def test_an_anchor_or_alias_anywhere_is_refused_with_its_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("source: minilm\nsteps:\n  - shrink: &cut {layers: 2}\n  - export: {}\n")
    with pytest.raises(ValidationError, match=r"r\.yaml:3: YAML anchors and aliases \(&cut, \*cut\)"):
        load_recipe(recipe)
    recipe.write_text(TINY)
    with pytest.raises(ValidationError, match=r"--set shrink\.layers: YAML anchors and aliases \(&x, \*x\)"):
        load_recipe(recipe, overrides=["shrink.layers=&x 2"])


def test_a_set_value_that_does_not_parse_is_one_line(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    code, _, err = run(capsys, "run", recipe, "--plan", "--set", "shrink.dim=[1,")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--set shrink.dim: cannot parse '[1,' as a YAML value: expected the node content" in err


def test_a_folder_a_recipe_writes_stays_inside_its_run_folder(tmp_path, capsys):
    docs = tmp_path / "home" / "docs"
    docs.mkdir(parents=True)
    recipe = tmp_path / "recipes" / "r.yaml"
    recipe.parent.mkdir()
    text = TINY.replace("  - export: {}\n", "  - distill: {corpus: builtin, cache_dir: ../home/docs}\n  - export: {}\n")
    recipe.write_text(text)
    run_folder = tmp_path / "run"
    code, _, err = run(capsys, "run", recipe, "-o", run_folder, "--plan")
    assert code == 2 and "r.yaml:4: distill.cache_dir: '../home/docs' is outside the run folder" in err
    assert "--set distill.cache_dir=PATH" in err and list(docs.iterdir()) == [] and not run_folder.exists()
    recipe.write_text(text.replace("../home/docs", "2-distill.run"))  # a step's own folder, which the run replaces
    with pytest.raises(ValidationError, match="is not a folder of its own in the run folder"):
        load_recipe(recipe, overrides=[f"output={run_folder}"])
    recipe.write_text(text.replace("../home/docs", "cache"))  # inside: resolved against the run folder
    loaded = load_recipe(recipe, overrides=[f"output={run_folder}"])
    assert loaded.step("distill").config.cache_dir == str(run_folder / "cache")
    given = load_recipe(recipe, overrides=[f"output={run_folder}", f"distill.cache_dir={docs}"])  # the caller's choice
    assert given.step("distill").config.cache_dir == str(docs)


@pytest.mark.parametrize("flags", [["--resume"], ["--overwrite"], [], ["--plan"]])
def test_a_run_json_of_the_users_is_never_replaced(tmp_path, capsys, flags):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "run.json").write_text('{"my": "data"}')
    code, _, err = run(capsys, "run", recipe, "-o", folder, *flags)
    assert code == 2 and f"{folder} is not a run folder: its run.json was not written by espresso-export" in err
    assert json.loads((folder / "run.json").read_text()) == {"my": "data"}
    assert [p.name for p in folder.iterdir()] == ["run.json"]
