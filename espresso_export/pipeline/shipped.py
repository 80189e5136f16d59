"""Where the shipped recipes are: ``recipes/`` of a source checkout (or an editable install), else the copies a
wheel installs (pyproject's ``data-files``: ``<prefix>/share/espresso-export/recipes/``); and finding one by
path or name."""

from __future__ import annotations

import os
from pathlib import Path

from espresso_export.core.errors import NotFoundError

RECIPE_SUFFIXES = (".yaml", ".yml")
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "recipes"  # root recipes/ of a source checkout


def installed_recipe_dirs() -> list[Path]:
    """Where a wheel puts the shipped recipes (pyproject's data-files): the environment's data folder, and the
    user scheme's for ``pip install --user``."""
    import sysconfig

    roots = [sysconfig.get_path("data")]
    try:
        roots.append(sysconfig.get_path("data", sysconfig.get_preferred_scheme("user")))
    except (AttributeError, KeyError):  # Python 3.10 has no get_preferred_scheme
        roots.append(sysconfig.get_path("data", f"{os.name}_user"))
    return list(dict.fromkeys(Path(r) / "share" / "espresso-export" / "recipes" for r in roots if r))


def shipped_recipes() -> list[Path]:
    """The shipped recipes: ``recipes/`` of a source checkout (an editable install), else those a wheel installed."""
    if SHIPPED_DIR.is_dir() and (SHIPPED_DIR.parent / "pyproject.toml").is_file():
        folders = [SHIPPED_DIR]
    else:
        folders = [d for d in installed_recipe_dirs() if d.is_dir()][:1]
    return sorted(p for d in folders for p in d.iterdir() if p.suffix in RECIPE_SUFFIXES and p.is_file())


def find_recipe(spec: str | os.PathLike) -> Path:
    """A recipe file path, or the name of a shipped recipe (``minilm-L3-d128``)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path.resolve()
    for candidate in shipped_recipes():
        if str(spec) in (candidate.stem, candidate.name):
            return candidate
    names = [p.stem for p in shipped_recipes()]
    listed = f"; shipped recipes: {', '.join(names)}" if names else ""
    raise NotFoundError(f"recipe not found: {spec} (neither a file nor a shipped recipe name{listed})")


__all__ = ["RECIPE_SUFFIXES", "SHIPPED_DIR", "find_recipe", "installed_recipe_dirs", "shipped_recipes"]
