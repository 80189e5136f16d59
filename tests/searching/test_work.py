"""The work folder's key: a search's steps are reused only for the same inputs, contents included."""

from __future__ import annotations

import os

import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.work import Work, fingerprint


def test_a_corpus_edited_in_place_is_another_search(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"_id": "1", "text": "one document"}\n', encoding="utf-8")
    source = tmp_path / "model"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"weights")
    s = AutoSettings(corpus=[str(docs)])
    key = fingerprint(str(source), s)
    assert fingerprint(str(source), s) == key
    assert fingerprint(str(source), AutoSettings(corpus=[str(docs)], time_budget="3h")) == key  # choice only

    Work.open(tmp_path / "out", key, overwrite=False).put("source", {"depth": 1})
    docs.write_text('{"_id": "1", "text": "another document"}\n', encoding="utf-8")
    edited = fingerprint(str(source), s)
    assert edited != key
    with pytest.raises(ValidationError, match="another source or other settings"):
        Work.open(tmp_path / "out", edited, overwrite=False)
    assert Work.open(tmp_path / "out", edited, overwrite=True).done("source") is None  # started over

    stat = (source / "model.safetensors").stat()
    os.utime(source / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # trained again
    assert fingerprint(str(source), s) != edited
    assert fingerprint("sentence-transformers/all-MiniLM-L6-v2", s) != edited  # a Hub id: its name
