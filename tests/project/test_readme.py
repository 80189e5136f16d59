"""The README as a newcomer runs it: what its commands write stays out of `git status`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_FLAGS = r"(?:-o|--output|--json|--markdown|--dry-run|--run-dir)"


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, fences paired in order (a regex from one fence to the next took a
    closing fence for an opening one after a block of another language, and read the prose that followed)."""
    blocks, body, lang = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if body is None:
                body, lang = [], line[3:].strip()
            else:
                blocks.append((lang, "\n".join(body) + "\n"))
                body = None
        elif body is not None:
            body.append(line)
    return blocks


def _code_blocks(text: str) -> list[str]:
    return [body for lang, body in _fenced_blocks(text) if lang in ("bash", "python", "sh", "")]


def _outputs(block: str) -> list[str]:
    """Every path a command of ``block`` writes: the value after an output flag (placeholders, stdout and
    absolute paths on other machines aside) and the output argument of the Python calls."""
    found = [v for v in re.findall(OUTPUT_FLAGS + r"\s+([^\s\\\]|]+)", block)
             if not v.isupper() and v != "-" and not v.startswith(("/", "-"))]
    found += re.findall(r'(?:shrink|prune_vocab|export)\("[^"]+", "([^"]+)"', block)
    return found


def test_readme_commands_write_under_one_ignored_folder():
    """The README's outputs landed in the checkout root and showed up in `git status`."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    outputs = [o for block in _code_blocks(readme) for o in _outputs(block)]
    assert len(outputs) >= 15  # the parser sees the examples
    assert [o for o in outputs if not o.startswith(("out/", "runs/"))] == []
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "/out/" in ignored and "/runs/" in ignored


def test_the_readme_gates_a_model_that_can_pass():
    """The verify example gated the plain cut at --min-retention 0.95, which keeps 85% (exit 3): every gated
    verify in the README measures a distilled (healed) model, and the plain cut's verify says it fails."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [" ".join(c.replace("\\\n", " ").split()) for b in _code_blocks(readme)
                for c in re.split(r"\n(?=espresso-export )", b)]
    healed = {m.group(1) for c in commands if c.startswith("espresso-export distill")
              for m in [re.search(r"-o (\S+)", c)] if m}
    gated = [c for c in commands if c.startswith("espresso-export verify") and "--min-retention 0.95" in c]
    assert len(gated) >= 2
    for c in gated:
        candidate = c.split()[2]
        plain = candidate == "out/minilm-L3-d128"
        assert candidate in healed or plain, c
        if plain:  # shown as what a plain cut keeps, with its failure named right before it
            before = readme[:readme.index(c.split(" --")[0])]
            assert "fails (exit 3)" in before[-400:]


def test_every_readme_command_and_option_exists():
    """A newcomer copies the README's commands: each `espresso-export COMMAND --option` in its shell blocks must be
    a command and an option the CLI has (renamed options left the README behind otherwise)."""
    import typer

    from espresso_export.cli.app import app

    commands = typer.main.get_command(app).commands
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    checked, unknown = 0, []
    for lang, body in _fenced_blocks(readme):
        if lang not in ("bash", "sh", ""):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s#.*", "", line)  # a trailing comment
            for name, rest in re.findall(r"espresso-export\s+([a-z][a-z-]*)([^|;&]*)", line):
                if name not in commands:
                    unknown.append((name, line.strip()))
                    continue
                params = commands[name].params
                options = {o for p in params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
                for flag in re.findall(r"(?<![\S=])(--?[a-zA-Z][\w-]*)", rest):
                    checked += 1
                    if flag not in options | {"--help"}:
                        unknown.append((name, flag))
    assert checked >= 100  # the parser sees the examples
    assert unknown == []


def test_every_name_the_readme_gives_for_the_python_api_imports():
    """`ShrinkSettings(...)` and `VerifySettings(...)` were named as the API's, and `from espresso_export import
    ShrinkSettings` failed: every CamelCase name the README writes as code and `espresso_export` holds must import
    from the top level, as must every `from espresso_export import ...` line."""
    import espresso_export

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    imported = {n.strip() for line in re.findall(r"from espresso_export import ([\w, ]+)", text) for n in line.split(",")}
    settings = set(re.findall(r"`(\w+(?:Settings|Options))[(`]", text))
    missing = [n for n in sorted(imported | settings) if not hasattr(espresso_export, n)]
    assert not missing, missing
    assert {"ShrinkSettings", "VerifySettings", "ExportSettings"} <= settings
    assert set(espresso_export.__all__) <= set(dir(espresso_export))  # tab completion finds the lazy API names
