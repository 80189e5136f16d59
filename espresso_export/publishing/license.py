"""The license a card declares: ``push --license``, else the source model's own, read where it is recorded.

A derived model inherits its source's license terms, and the Hub shows the ``license`` field of the card's
front matter, so a card without one is incomplete. The source's license is read from its model card's front
matter (``license:`` in README.md) or its ``config.json``, for the folder itself and then for the original
source of its lineage (a local folder, the packaged MiniLM, or a Hub id already in the local Hub cache: no
network access here). When none is found, ``push`` asks for ``--license``.
"""

from __future__ import annotations

import json
from pathlib import Path

from espresso_export.model.aliases import packaged_path, resolve_alias
from espresso_export.publishing.facts import ModelFacts
from espresso_export.publishing.model_ids import is_hub_id


def _front_matter(readme: Path) -> dict:
    import yaml

    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    if not text.startswith("---"):
        return {}
    head = text[3:].split("\n---", 1)
    try:
        meta = yaml.safe_load(head[0]) if len(head) == 2 else None
    except yaml.YAMLError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _declared(readme: Path | None, config: Path | None) -> str | None:
    """The ``license`` of a model card's front matter, else of a config.json."""
    for value in (_front_matter(readme).get("license") if readme and readme.is_file() else None,
                  _config_license(config)):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _config_license(config: Path | None) -> str | None:
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("license") if config and config.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None


def _hub_cached(repo_id: str, name: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, name)
    except (ValueError, OSError):  # a malformed id or an unreadable cache: treated as "not cached"
        return None
    return Path(found) if isinstance(found, str) else None


def source_license(facts: ModelFacts) -> tuple[str | None, str | None]:
    """(the license, where it was read), or (None, None) when no source records one. A static folder's own
    README.md is model2vec's generated card, whose ``license`` is model2vec's default, not the source's: it is not
    read."""
    found = None if facts.static is not None else _declared(facts.folder / "README.md", facts.folder / "config.json")
    if found:
        return found, facts.folder.name
    ident = resolve_alias(facts.source_id) if facts.source_id else None
    if not ident:
        return None, None
    local = packaged_path(ident) if is_hub_id(ident) else None
    if local is None and Path(ident).expanduser().is_dir():
        local = Path(ident).expanduser()
    if local is not None:
        found = _declared(local / "README.md", local / "config.json")
    elif is_hub_id(ident):
        found = _declared(_hub_cached(ident, "README.md"), _hub_cached(ident, "config.json"))
    return (found, ident) if found else (None, None)


__all__ = ["source_license"]
