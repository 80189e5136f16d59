"""One word per idea: the glossary in ``docs/architecture.md`` lists the words retired for each idea, and none is
back in the package, the docs or the README (an option's earlier name only in its ``renamed_from``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "architecture.md"
SCOPED = re.compile(r"\(names in `([\w/]+)`\)")
# a published method's name, not our word for the idea (data/pseudo_queries.py cites it)
PROPER_NAMES = ("inverse cloze task",)


def retired() -> tuple[list[str], dict[str, list[str]]]:
    """(words retired everywhere, {package folder: names retired in its code}) from the glossary's table."""
    text = GLOSSARY.read_text(encoding="utf-8")
    table = text[text.index("## Glossary"):].split("\n## ")[0]
    everywhere: list[str] = []
    scoped: dict[str, list[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("word", "---"):
            continue
        scope = SCOPED.search(cells[2])
        words = re.findall(r"`([^`]+)`", SCOPED.sub("", cells[2]))
        if scope:
            scoped.setdefault(scope.group(1), []).extend(words)
        else:
            everywhere.extend(words)
    return everywhere, scoped


def _pattern(word: str) -> re.Pattern:
    return re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])", re.IGNORECASE)


def _files() -> list[Path]:
    return [*sorted((ROOT / "espresso_export").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")),
            ROOT / "README.md"]


def _found(word: str, files: list[Path]) -> list[str]:
    pattern, out = _pattern(word), []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if path == GLOSSARY and line.startswith("|"):
                continue  # the glossary names what it retires
            if "renamed_from" in line:
                continue  # where an earlier option name keeps working
            cleaned = line
            for name in PROPER_NAMES:
                cleaned = re.sub(re.escape(name), "", cleaned, flags=re.IGNORECASE)
            if pattern.search(cleaned):
                out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    return out


def _names(tree: ast.AST) -> set[str]:
    """Every name a module defines or uses: variables, arguments, attributes, functions and classes, split at
    underscores and case changes into words."""
    found = set()
    for node in ast.walk(tree):
        name = (getattr(node, "id", None) or getattr(node, "arg", None) or getattr(node, "attr", None)
                or (node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) else None))
        if isinstance(name, str):
            found.update(w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name))
    return found


def test_the_glossary_retires_words():
    everywhere, scoped = retired()
    assert {"winner", "cloze", "--eval-passages"} <= set(everywhere)
    assert "passages" in scoped.get("searching/", [])


def test_no_retired_word_in_the_package_the_docs_or_the_readme():
    everywhere, _ = retired()
    found = [hit for word in everywhere for hit in _found(word, _files())]
    assert not found, "retired words (docs/architecture.md, Glossary):\n" + "\n".join(found)


def test_no_retired_name_in_the_code_of_the_package_the_glossary_names():
    _, scoped = retired()
    found = []
    for folder, words in scoped.items():
        for path in sorted((ROOT / "espresso_export" / folder).rglob("*.py")):
            used = _names(ast.parse(path.read_text(encoding="utf-8")))
            found += [f"{path.relative_to(ROOT)}: {w}" for w in words if w.lower() in used]
    assert not found, "retired names (docs/architecture.md, Glossary):\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for():
    """The matching itself: a retired word in prose and in a flag is found, a longer word containing it is not."""
    assert _pattern("winner").search("the Winner of the search")
    assert _pattern("--eval-passages").search("give --eval-passages 500")
    assert not _pattern("--eval-passages").search("--eval-passages-max")
    assert not _pattern("check_queries").search("check_queries_per_corpus(")
    assert "docs" in _names(ast.parse("def f(docs): return docs.texts"))
    assert "stage" in _names(ast.parse("x = c.stage_name"))
