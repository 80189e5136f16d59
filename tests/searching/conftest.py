"""The documents ``auto``'s tests search (240 titled records of the tiny models' words), and one torch thread for
every test here."""

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


@pytest.fixture(autouse=True)
def one_thread():
    """torch on one thread, as these tests' searches run (``threads=1``; ``auto`` pins it only inside its own call):
    on a busy two-core machine a second thread makes the tiny models' small products wait on each other, and a
    verify of the tiny BERT took 63 s on two threads where it takes 4 s on one."""
    from espresso_export.model.threads import fixed_threads

    with fixed_threads(1):
        yield
