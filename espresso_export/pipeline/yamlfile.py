"""The recipe file as text: YAML with the line of every key, and path values resolved against the recipe's
folder. Values are checked against a settings type by :mod:`espresso_export.core.settings` (the API's keyword
arguments too); :mod:`espresso_export.pipeline.recipes` builds on these."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any

from espresso_export.core.errors import NotFoundError, ValidationError

_DATA_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".json", ".gz", ".parquet")


# --- YAML with line numbers ------------------------------------------------------------------------------

class Where:
    """Line numbers of every key and list item, by path, from the composed YAML nodes."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[tuple, int] = {}

    def at(self, path: tuple) -> str:
        while path and path not in self.lines:
            path = path[:-1]
        line = self.lines.get(path)
        return f"{self.file}:{line}" if line else self.file

    def walk(self, node, path: tuple = ()) -> None:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else str(key.start_mark)
                line = key.start_mark.line + 1
                if name in seen:
                    raise ValidationError(f"{self.file}:{line}: duplicate key {'.'.join(map(str, (*path, name)))!r} "
                                          f"(first at line {seen[name]})")
                seen[name] = line
                self.lines[(*path, name)] = line
                self.walk(value, (*path, name))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines[(*path, i)] = item.start_mark.line + 1
                self.walk(item, (*path, i))


@lru_cache(maxsize=1)
def _plain_loader() -> type:
    """A safe YAML loader that refuses anchors and aliases (``&a``, ``*a``): a few hundred bytes of nested aliases
    expand to billions of values, and a recipe never needs them (write the values out)."""
    import yaml

    class PlainLoader(yaml.SafeLoader):
        numbered = True  # messages name the line (a file's), else only ``name`` (a --set value's)

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                at = f"{self.name}:{event.start_mark.line + 1}" if self.numbered else self.name
                raise ValidationError(f"{at}: YAML anchors and aliases (&{event.anchor}, *{event.anchor}) are not "
                                      "accepted; write the values out") from None
            return super().compose_node(parent, index)

    return PlainLoader


def parse_value(text: str, what: str) -> Any:
    """One YAML value (``--set KEY=VALUE``'s), refused in one line when it does not parse."""
    import yaml

    loader = _plain_loader()(text)
    loader.name, loader.numbered = what, False
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        reason = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ValidationError(f"{what}: cannot parse {text!r} as a YAML value: {reason}") from None
    finally:
        loader.dispose()


def load_yaml(text: str, file: str) -> tuple[Any, Where]:
    """The recipe's data and the line of every key; a syntax error, an alias or an empty file is refused."""
    import yaml

    where = Where(file)
    try:
        loader = _plain_loader()(text)
        loader.name = file
        try:
            node = loader.get_single_node()
            if node is None:
                raise ValidationError(f"{file}: the recipe is empty")
            where.walk(node)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{file}:{mark.line + 1}" if mark is not None else file
        raise ValidationError(f"{at}: not valid YAML: {getattr(e, 'problem', None) or e}") from e
    return data, where


def suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- paths -------------------------------------------------------------------------------------------------------

def _looks_like_path(text: str) -> bool:
    """Not an alias or an ``owner/name`` Hub id: a relative or absolute path, a data file, or a deeper path."""
    return (text.startswith(("./", "../", "/", "~", ".\\", "..\\")) or text.lower().endswith(_DATA_SUFFIXES)
            or text.split(":", 1)[0].count("/") > 1)


def missing_file_message(at: str, key: str, path: Path) -> str:
    return f"{at}: {key}: file not found: {path}; point it elsewhere with --set {key}=PATH"


def resolve_value(value: str, kind: str, base: Path, key: str, at: str, check: bool = True,
                  missing: list | None = None) -> str:
    """A path relative to ``base`` made absolute and checked (``check``); other specs (aliases, Hub ids,
    builtin) as given. With a ``missing`` list, a missing file is added to it (``(at, key, path)``) instead of
    raising, so that a recipe names every file it lacks at once."""
    if kind == "data":
        from espresso_export.data.corpus import source_path

        spec, rest = source_path(value)
        if rest:  # a corpus source's own field and share of the mix (docs.jsonl#body:0.7): resolve the path part
            return f"{resolve_value(spec, kind, base, key, at, check, missing)}{rest}"
    if kind == "dir":
        return str((base / Path(value).expanduser()).resolve())
    if kind == "data" and (value == "builtin" or value.startswith("hf://")):
        return value
    path = (base / Path(value).expanduser()).resolve()
    if path.exists():
        return str(path)
    if kind == "file" or _looks_like_path(value):
        if not check:
            return str(path)
        if missing is not None:
            missing.append((at, key, path))
            return str(path)
        raise NotFoundError(missing_file_message(at, key, path))
    return value  # an alias or a Hub id (model or dataset)
