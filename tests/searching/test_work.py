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
    assert fingerprint(str(source), AutoSettings(corpus=[str(docs)], latency_budget=0)) == key  # the final check's

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


def test_other_healing_settings_heal_again_and_keep_rung_0(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"_id": "1", "text": "one document"}\n', encoding="utf-8")
    s = AutoSettings(corpus=[str(docs)])
    key = fingerprint("src", s)
    work = Work.open(tmp_path / "out", key, overwrite=False)
    work.put("source", {"depth": 1})
    work.put("plain-L1", {"name": "L1", "student": None, "calibration": "calibration-texts.txt"})
    work.put("plain-L2", {"name": "L2", "student": None, "calibration": None})  # head fitted on the healing texts
    work.put("healing_texts", {"texts": 10})
    work.put("heal-L1-64", {"retention": 0.9})
    for name in ("heals/L1-64/model.safetensors", "teacher-cache/t.npy", "healing-texts.txt", "source-vectors.npz"):
        work.path(name).write_text("x", encoding="utf-8")

    for changed in ({"doc_share": 0.3}, {"corpus_queries": 500}, {"sentences": [str(docs)]}, {"batch_size": 8}):
        other = fingerprint("src", AutoSettings(corpus=[str(docs)], **changed))
        assert other.measured == key.measured and other.healing != key.healing, changed
    other = fingerprint("src", AutoSettings(corpus=[str(docs)], doc_share=0.3))
    with pytest.raises(ValidationError, match="other healing settings.*rung 0, the plain cuts, is kept"):
        Work.open(tmp_path / "out", other, overwrite=False)
    again = Work.open(tmp_path / "out", other, overwrite=True)
    assert sorted(again.state["steps"]) == ["plain-L1", "source"]
    assert again.folder.joinpath("source-vectors.npz").is_file()
    assert not any(again.folder.joinpath(n).exists() for n in ("heals", "teacher-cache", "healing-texts.txt"))
    assert Work.open(tmp_path / "out", other, overwrite=False).done("source") == {"depth": 1}  # the state saved


def test_a_candidate_read_from_the_state_does_not_write_its_later_heals_into_the_plain_step():
    """A heal is a step of its own: a candidate read back from ``plain-L2`` and healed must leave that record as
    rung 0 measured it (a shared dict once gave it a later ``r1``, and a resumed search a stale one)."""
    from dataclasses import replace

    from espresso_export.searching.candidates import PLAIN, Candidate, Heal, SampleScore
    from espresso_export.searching.scoring import Score

    plain = Heal(Score(32, "float32", 0.9))
    recorded = Candidate("L2", 2, layers=[0, 3], scores={PLAIN: plain}).to_dict()
    cand = Candidate.from_dict(recorded)
    assert cand.scores == {PLAIN: plain}
    cand.scores["r1"] = Heal(Score(32, "float32", 0.95), texts=500)
    cand.scores[PLAIN] = replace(cand.scores[PLAIN], sample=SampleScore(Score(32, "float32", 0.93), ()),
                                 documents=240)
    assert recorded["scores"] == {PLAIN: plain.to_dict()}
