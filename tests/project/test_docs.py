"""The README and every page of docs/ as a reader copies from them: each code block is checked or run.

* shell blocks: every `espresso-export COMMAND ...` line is parsed by the CLI itself (option names, types,
  choices and required arguments), so a renamed option or a bad value fails here;
* Python blocks: compiled; every name imported from espresso_export exists; the keywords of every call to the
  API are parameters or settings fields; the attributes read from a result are the result's;
* YAML blocks with `steps:` are recipes, checked by the recipe schema (files aside);
* every output a command writes lies under `out/` or `runs/`, which .gitignore covers.

A block marked `<!-- doc-test: illustrative -->` on the line before its fence is a synopsis or a fragment
(`MODEL`, `...`): only its command and option names are checked. `<!-- doc-test: run -->` runs the block (quick
commands only: they run in an empty folder and must exit 0). `text` blocks are diagrams and folder trees.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTPUT_FLAGS = r"(?:-o|--output|--json|--markdown|--dry-run|--run-dir)"
MARK = re.compile(r"<!--\s*doc-test:\s*([\w-]+)\s*-->")
SHELL, PYTHON, YAML, TEXT = ("bash", "sh", "console"), ("python",), ("yaml",), ("text",)
# the settings each call takes as keywords beside its own parameters (old names while a rename lands)
SETTINGS = {"shrink": ("ShrinkSettings",), "distill": ("DistillSettings",), "export": ("ExportSettings",),
            "verify": ("VerifySettings",), "sweep": ("SweepSettings", "SweepOptions"), "push": ("PushSettings",),
            "train_ese": ("TrainSettings",), "auto": ("AutoSettings",),
            "judge": ("JudgeSettings",)}


@dataclasses.dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    mark: str | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _fenced_blocks(text: str) -> list[tuple[int, str, str, str | None]]:
    """(line, language, body, mark) of every fenced block, fences paired in order (a regex from one fence to the
    next took a closing fence for an opening one after a block of another language)."""
    blocks, body, lang, start, mark, previous = [], None, "", 0, None, ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if body is None:
                body, lang, start = [], line[3:].strip(), number
                found = MARK.search(previous)
                mark = found.group(1) if found else None
            else:
                blocks.append((start, lang, "\n".join(body) + "\n", mark))
                body = None
        elif body is not None:
            body.append(line)
        if line.strip():
            previous = line
    return blocks


def _blocks(langs: tuple[str, ...] | None = None) -> list[Block]:
    found = [Block(page, *b) for page in PAGES for b in _fenced_blocks(page.read_text(encoding="utf-8"))]
    return [b for b in found if langs is None or b.lang in langs]


def _commands(body: str) -> list[str]:
    """Each `espresso-export ...` command of a shell block as one line (continuations joined, comments cut);
    `torchrun ... -m espresso_export CMD` counts as `espresso-export CMD`."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).replace("-m espresso_export ", "espresso-export ")
        commands += ["espresso-export " + c.strip() for c in re.findall(r"espresso-export\s+([^|;&]*)", line)]
    return commands


def _cli():
    import typer

    from espresso_export.cli.app import app

    return typer.main.get_command(app).commands


def _outputs(block: str) -> list[str]:
    """Every path a command of ``block`` writes: the value after an output flag (placeholders, stdout and
    absolute paths on other machines aside) and the output argument of the Python calls."""
    found = [v for v in re.findall(OUTPUT_FLAGS + r"\s+([^\s\\\]|]+)", block)
             if not v.isupper() and v != "-" and not v.startswith(("/", "-", "$"))]
    found += re.findall(r'(?:shrink|prune_vocab|export|distill|sweep|train_ese)\("[^"]+", (?:"[^"]+", )?"([^"]+)"',
                        block)
    return found


def test_every_block_has_a_language_the_tests_read():
    """An unlabelled block (or one in a language no test reads) would be copied by readers and checked by none."""
    unknown = [(str(b), b.lang) for b in _blocks() if b.lang not in SHELL + PYTHON + YAML + TEXT]
    assert unknown == []
    marks = {b.mark for b in _blocks()} - {None}
    assert marks <= {"illustrative", "run"}, marks


def test_commands_write_under_one_ignored_folder():
    """The README's outputs landed in the checkout root and showed up in `git status`."""
    outputs = [(str(b), o) for b in _blocks(SHELL + PYTHON) if b.mark != "illustrative" for o in _outputs(b.body)]
    assert len(outputs) >= 30  # the parser sees the examples
    assert [o for o in outputs if not o[1].startswith(("out/", "runs/"))] == []
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "/out/" in ignored and "/runs/" in ignored


def test_every_command_parses():
    """A newcomer copies the commands: each must be one the CLI accepts as written (names, types, choices,
    required arguments), parsed by the CLI itself without running it."""
    commands, parsed, failed = _cli(), 0, []
    for block in _blocks(SHELL):
        if block.mark == "illustrative":
            continue
        for command in _commands(block.body):
            name, *args = shlex.split(command)[1:]
            if name not in commands:
                failed.append((str(block), command, "no such command"))
                continue
            try:
                commands[name].make_context(name, list(args))
                parsed += 1
                if name == "run" and args and not args[0].startswith("-"):
                    _load_recipe_as_run_would(args)
            except Exception as e:  # noqa: BLE001 click's errors (or typer's copy of click), EspressoError
                if type(e).__name__ == "Exit":  # --help, --version
                    parsed += 1
                    continue
                failed.append((str(block), command, getattr(e, "format_message", e.__str__)()))
    assert parsed >= 30  # the parser sees the examples
    assert failed == []


def _load_recipe_as_run_would(args: list[str]) -> None:
    """The recipe a `run` command names, with its `--set` overrides applied and type-checked (files aside)."""
    from espresso_export.pipeline.recipes import load_recipe

    recipe = ROOT / args[0] if (ROOT / args[0]).exists() else args[0]
    overrides = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"]
    load_recipe(recipe, overrides=overrides, check_files=False)


def test_the_readme_stays_short_and_the_docs_hold_no_lab_notes():
    """The README is the front door (a few hundred lines); history (dates, issue numbers, sessions) belongs in
    benchmarks/log/, not in the pages a user reads."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) < 300
    notes = [(str(page.relative_to(ROOT)), m.group(0)) for page in PAGES
             for m in re.finditer(r"\b20\d\d-\d\d-\d\d\b|\bissues? #?\d+|(?<![\w`/])#\d+\b|\bsession\b",
                                  page.read_text(encoding="utf-8"), re.IGNORECASE)]
    assert notes == []


BENCHMARKS = ROOT / "benchmarks" / "README.md"
# the story of a run, which benchmarks/log/ keeps: who ran it when, what changed between its parts
HISTORY = re.compile(r"\bsessions?\b|\bissues? #?\d+|(?<![\w`/])#\d+\b|\b(?:fixed|changed) between\b|\bafter a fix\b"
                     r"|\bthe code (?:fixed|changed)\b|\b(?:earlier|later|next|previous) runs?\b", re.IGNORECASE)
CELL_WORDS = 40  # a table cell longer than this tells a story instead of giving a number


def _history(text: str) -> list[str]:
    """The lab notes of a benchmark page: history words in its prose and tables, and table cells that narrate."""
    found = [m.group(0) for m in HISTORY.finditer(text)]
    cells = [c.strip() for line in text.splitlines() if line.startswith("|") for c in line.strip().strip("|").split("|")]
    return found + [c[:60] + "..." for c in cells if len(c.split()) > CELL_WORDS]


def test_the_benchmark_page_holds_headline_rows_not_history():
    """benchmarks/README.md gives each result once, with its machine, date and command; a row's history ("the
    seventh session", "the code fixed between them", a 124-word cell) belongs in benchmarks/log/. Dates stay:
    every row names the day it was measured."""
    assert _history("| run | 17.1 min | the L6 answer (2026-11-28, seventh session: rescored) |")
    assert _history("| " + "word " * (CELL_WORDS + 1) + "|")
    assert _history("three parts on one work folder, the code fixed between them")
    assert not _history("| (a) | dbpedia-5k, `--time-budget 20m` | 17.1 min | EPYC AVX512-VNNI/BF16 | 2026-11-28 |")
    assert _history(BENCHMARKS.read_text(encoding="utf-8")) == []


def test_every_option_of_a_synopsis_exists():
    """Synopses (`shrink MODEL --layers L [--dim k]`) are not parsed: their command and option names are."""
    commands, checked, unknown = _cli(), 0, []
    for block in _blocks(SHELL):
        for command in _commands(block.body):
            name, rest = (command.split(None, 2)[1:] + [""])[:2]
            if name not in commands:
                unknown.append((str(block), name))
                continue
            options = {o for p in commands[name].params for o in [*getattr(p, "opts", []),
                                                                  *getattr(p, "secondary_opts", [])]}
            for flag in re.findall(r"(?<![\S=\[|(])\[?\(?(--?[a-zA-Z][\w-]*)", rest):
                checked += 1
                if flag not in options | {"--help"}:
                    unknown.append((str(block), name, flag))
    assert checked >= 150
    assert unknown == []


def _top_level(name: str):
    import espresso_export

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(espresso_export, name, None)


def _settings_fields(function_name: str) -> set[str] | None:
    for name in SETTINGS.get(function_name, ()):
        cls = _top_level(name)
        if cls is not None:
            return {f.name for f in dataclasses.fields(cls)}
    return None


def _imported(tree: ast.AST, where: str, problems: list) -> dict[str, object]:
    """name -> object for every `from espresso_export[.module] import name` of the block."""
    import importlib

    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("espresso_export"):
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                problems.append((where, f"import {node.module}: {e}"))
                continue
            for alias in node.names:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    obj = getattr(module, alias.name, None)
                if obj is None:
                    problems.append((where, f"{node.module} has no {alias.name}"))
                names[alias.asname or alias.name] = obj
    return names


def _keywords_accepted(obj, name: str) -> set[str] | None:
    """The keywords ``obj(...)`` takes: a dataclass's fields, a function's parameters (plus its settings' fields
    when it takes **kwargs); None when that cannot be told."""
    import inspect

    if dataclasses.is_dataclass(obj) and isinstance(obj, type):
        return {f.name for f in dataclasses.fields(obj)}
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        fields = _settings_fields(name)
        return None if fields is None else set(parameters) | fields
    return set(parameters)


def _returned_class(obj):
    """The result class a call of ``obj`` returns, read from its return annotation."""
    annotation = getattr(obj, "__annotations__", {}).get("return") if callable(obj) else None
    if isinstance(annotation, str):
        return _top_level(annotation.split("|")[0].strip())
    return annotation if isinstance(annotation, type) else None


def _check_python(block: Block, problems: list) -> None:
    where = str(block)
    try:
        tree = ast.parse(block.body)
    except SyntaxError as e:
        problems.append((where, f"syntax: {e}"))
        return
    names = _imported(tree, where, problems)
    results = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            cls = _returned_class(names.get(node.value.func.id))
            if cls is not None and dataclasses.is_dataclass(cls):
                results.update({t.id: cls for t in node.targets if isinstance(t, ast.Name)})
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            accepted = _keywords_accepted(names[node.func.id], node.func.id)
            given = {k.arg for k in node.keywords if k.arg}
            if accepted is not None and given - accepted:
                problems.append((where, f"{node.func.id}() takes no {sorted(given - accepted)}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in results:
            cls = results[node.value.id]
            if node.attr not in {f.name for f in dataclasses.fields(cls)} and not hasattr(cls, node.attr):
                problems.append((where, f"{cls.__name__} has no {node.attr}"))


def test_every_python_block_names_the_api_as_it_is():
    """`from espresso_export import X`, `X(keyword=...)` and `result.field` as the docs write them: a renamed
    name, keyword or result field left the pages behind otherwise."""
    problems: list = []
    blocks = _blocks(PYTHON)
    for block in blocks:
        _check_python(block, problems)
    assert len(blocks) >= 10
    assert problems == []


def test_every_settings_name_the_docs_give_imports():
    """`ShrinkSettings(...)` was named as the API's and `from espresso_export import ShrinkSettings` failed: every
    `...Settings` / `...Result` name written as code must import from the top level."""
    import espresso_export

    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    named = set(re.findall(r"`(\w+(?:Settings|Result|Report))[(`]", text))
    missing = [n for n in sorted(named) if _top_level(n) is None]
    assert not missing, missing
    assert {"ShrinkSettings", "DistillSettings", "TrainSettings", "ExportSettings", "VerifySettings",
            "PushSettings"} <= named
    assert set(espresso_export.__all__) <= set(dir(espresso_export))  # tab completion finds the lazy API names


def test_every_recipe_block_is_a_valid_recipe():
    from espresso_export.pipeline.recipes import parse_recipe

    recipes = [b for b in _blocks(YAML) if "steps:" in b.body]
    assert recipes
    for block in recipes:
        parse_recipe(block.body, file=str(block), base=ROOT / "recipes", check_files=False)


def _verify_gated(page_text: str, commands: list[str], healed: set[str]) -> list[str]:
    wrong = []
    for c in commands:
        if not (c.startswith("espresso-export verify") and "--min-sts-retention 0.95" in c):
            continue
        candidate = c.split()[2]
        if candidate in healed:
            continue
        before = page_text[:page_text.find(c.split(" --")[0])]
        if candidate == "out/minilm-L3-d128" and "fails (exit 3)" in before[-400:]:
            continue  # shown as what a plain cut keeps, with its failure named right before it
        wrong.append(c)
    return wrong


def test_the_docs_gate_a_model_that_can_pass():
    """The verify example gated the plain cut at 0.95 STS retention (`--min-sts-retention`), which it misses
    (exit 3): every gated verify measures a distilled (healed) model or its export, and the plain cut's verify says
    it fails."""
    commands = {b.page: [] for b in _blocks(SHELL)}
    for b in _blocks(SHELL):
        commands[b.page] += [" ".join(c.split()) for c in _commands(b.body)]
    every = [c for cs in commands.values() for c in cs]
    healed = {m.group(1) for c in every if c.startswith("espresso-export distill")
              for m in [re.search(r"-o (\S+)", c)] if m}
    healed |= {m.group(1) for c in every if c.startswith("espresso-export export") and c.split()[2] in healed
               for m in [re.search(r"-o (\S+)", c)] if m}
    gated = [c for c in every if c.startswith("espresso-export verify") and "--min-sts-retention 0.95" in c]
    assert len(gated) >= 2
    wrong = [w for page, cs in commands.items() for w in _verify_gated(page.read_text(encoding="utf-8"), cs, healed)]
    assert wrong == []


@pytest.mark.parametrize("block", [b for b in _blocks(SHELL + PYTHON) if b.mark == "run"], ids=str)
def test_the_blocks_marked_run_run(block, tmp_path):
    """The quick blocks (listing recipes and models, a plan) run as written, from an empty folder."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if block.lang == "python":
        lines = [[sys.executable, "-c", block.body]]
    else:
        lines = [shlex.split(c) for c in _commands(block.body)]
    assert lines
    for argv in lines:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, (str(block), argv, done.stderr[-2000:])


AUTO_PAGE = ROOT / "docs" / "commands" / "auto.md"
AUTO_WORDS = 1000  # a reference page: what it does, a table per phase, what you get, exit codes, examples


def test_the_auto_page_is_a_reference_a_reader_finishes():
    """docs/commands/auto.md grew to 2,600 words, one 947-word list among them: it stays at most 1,000 words
    (counted as `wc -w` counts them, tables and code included), with one example per objective and every exit
    code `auto` gives."""
    text = AUTO_PAGE.read_text(encoding="utf-8")
    assert len(text.split()) <= AUTO_WORDS
    commands = [c for b in _blocks(SHELL) if b.page == AUTO_PAGE for c in _commands(b.body)]
    for objective in ("latency", "size", "bytes-per-vector"):
        assert any(f"--objective {objective}" in " ".join(c.split()) for c in commands), objective
    exits = text[text.index("## Exit codes"):]
    assert all(f"**{code}**" in exits for code in (0, 1, 2, 3, 130, 143))


# A benchmark figure is a measured number a page quotes: a retention or correlation to three decimals (0.975), a
# speed-up (4.42x), a measured time or size with decimals (30.4 min, 18.7 MB), a share kept (keeps about 85%). A
# threshold (`>= 0.9999`, within 0.993) and anything in code are settings, not measurements.
FIGURE = re.compile(r"(?<![\w.])\d\.\d{3,}(?![\w.])"
                    r"|(?<![\w.])\d+(?:\.\d+)?x(?![\w-])"
                    r"|(?<![\w.])\d+\.\d+\s?(?:ms|s|min|h|kB|MB|GB)\b"
                    r"|\b(?:(?:keeps?|kept|keeping|retains?|retained)\s+(?:about\s+|only\s+|nearly\s+)?|about\s+)"
                    r"\d+(?:\.\d+)?(?:-\d+)?%")
THRESHOLD = re.compile(r"(?:>=|<=|>|<|≥|≤|\bwithin|\bat least|\bat most|\babove|\bbelow)\s*$")
BENCHMARK_LINK = re.compile(r"\[[^\]]*\]\([^)\s]*benchmarks/[^)\s]*\)")


def _figures(text: str) -> list[str]:
    """The benchmark figures of a page outside code and outside the text of a link to benchmarks/."""
    found = []
    for line in _prose_lines(text):
        line = BENCHMARK_LINK.sub("[]", re.sub(r"`[^`]*`", "``", line))
        found += [m.group(0) for m in FIGURE.finditer(line) if not THRESHOLD.search(line[:m.start()])]
    return found


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced blocks."""
    lines, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            lines.append(line)
    return lines


def test_no_benchmark_figure_in_the_docs_outside_a_link():
    """A measured number goes stale where it is copied: docs/ quote a benchmark only as the text of a link to
    benchmarks/ (its README's rows or the log), where the machine, date and command stand beside it."""
    assert _figures("the 4-layer heal keeps 0.975 of the source") == ["0.975"]
    assert _figures("the plain cut keeps about 85% and fails; int8 ran at 4.42x in 30.4 min") == [
        "keeps about 85%", "4.42x", "30.4 min"]
    assert _figures("[keeps 0.975](../../benchmarks/README.md#auto) with `--min-retention 0.97`, a 95% interval") == []
    assert _figures("min cosine >= 0.9999, within 0.993 of fp32; default 0.1; 4 x top-k") == []
    assert _figures("```text\n0.975\n```\n") == []
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name != "architecture.md"]
    figures = [(str(p.relative_to(ROOT)), f) for p in pages for f in _figures(p.read_text(encoding="utf-8"))]
    assert figures == []
