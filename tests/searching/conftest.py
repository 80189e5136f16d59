"""The documents ``auto``'s tests search: 240 titled records of the tiny models' words."""

from __future__ import annotations

import json
import random

import pytest


@pytest.fixture(scope="session")
def docs(tmp_path_factory):
    from tiny_models import _WORDS

    rng = random.Random(7)
    path = tmp_path_factory.mktemp("auto-docs") / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(240):
            title = " ".join(rng.choice(_WORDS) for _ in range(3))
            body = ". ".join(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 10))).capitalize()
                             for _ in range(3)) + "."
            f.write(json.dumps({"_id": str(i), "title": title, "text": body}) + "\n")
    return path
