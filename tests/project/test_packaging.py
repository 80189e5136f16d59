"""What ``pip install`` of a wheel gives a user who has no source checkout: the shipped recipes with it."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _venv_seeing_this_environment(venv: Path) -> Path:
    """A venv whose own site-packages will hold the wheel, and which sees this interpreter's dependencies: the
    system's where the project is installed system-wide (as in CI), and the active virtual environment's, which
    ``--system-site-packages`` alone does not give (a venv made from a venv's python sees its base interpreter's
    packages). Those folders are added as site folders (``.pth`` files in them run, as the system's do); they come
    after the venv's own, so the wheel, not the checkout, is ``espresso_export``. Returns the venv's python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    probe = "import json, sys, sysconfig; print(json.dumps([sysconfig.get_path('purelib'), sys.path]))"
    own, seen = json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True,
                                          env={**os.environ, "PYTHONPATH": ""}).stdout)
    missing = [p for p in site.getsitepackages() if Path(p).is_dir() and p not in seen]
    if missing:
        (Path(own) / "_this_environment.pth").write_text(
            "".join(f"import site; site.addsitedir({p!r})\n" for p in missing))
    return python


def test_a_wheel_ships_the_recipes_and_runs_them_by_name(tmp_path):
    # the README's "a wheel does not carry them" left `run --list` empty and `run NAME` "not found" after pip
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools")
    source = tmp_path / "source"  # a copy: a build writes build/ and *.egg-info/ beside the sources
    for name in ("espresso_export", "recipes"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    built = _pip("wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), cwd=tmp_path)
    if built.returncode:
        pytest.skip(f"the wheel did not build here: {built.stderr.strip().splitlines()[-1:]}")
    wheel, = (tmp_path / "dist").glob("espresso_export-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(p.name for p in (ROOT / "recipes").glob("*.yaml"))
    assert sorted(Path(n).name for n in names if "/share/espresso-export/recipes/" in n) == shipped

    venv = tmp_path / "venv"
    python = _venv_seeing_this_environment(venv)
    installed = _pip("--python", str(python), "install", "--no-deps", "--no-index", str(wheel), cwd=tmp_path)
    if installed.returncode and "--python" in installed.stderr:
        pytest.skip("this pip has no --python option (pip < 22.3)")
    assert installed.returncode == 0, installed.stderr
    env = {**os.environ, "PYTHONPATH": "", "COLUMNS": "80"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-m", "espresso_export", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    where = subprocess.run([str(python), "-c", "import espresso_export; print(espresso_export.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert str(venv) in where.stdout, where.stdout + where.stderr
    listed = cli("run", "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(Path(r["path"]).name for r in json.loads(listed.stdout)) == shipped
    # its data paths point at the project's shared data, which pip does not install: the plan says so and which
    # --set to give; a run stops on it before doing anything
    planned = cli("run", "minilm-L3-d128", "--plan", "--json")
    assert planned.returncode == 0, planned.stderr
    missing = json.loads(planned.stdout)["missing_files"]
    assert "--set distill.corpus=PATH" in missing and "which pip does not install" in missing
    ran = cli("run", "minilm-L3-d128", "-o", str(tmp_path / "run"))
    assert ran.returncode == 2 and "files the recipe reads are missing" in ran.stderr
    assert "Traceback" not in ran.stderr and not (tmp_path / "run").exists()
