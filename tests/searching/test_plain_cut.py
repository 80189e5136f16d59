"""Rung 0's plain cut: its PCA head is fitted on the vectors of the documents it has just encoded, and the model
shrink builds from the calibration file ``auto`` writes (what its finish and recipe rebuild) gives those vectors."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from espresso_export.core.vectors import l2_normalised
from espresso_export.searching.auto import prepare
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import Candidate
from espresso_export.searching.context import Context
from espresso_export.searching.encoding import source_pass
from espresso_export.searching.plain_cuts import (
    CALIBRATION_FILE,
    calibration_texts,
    headed,
    plain_cut,
)
from espresso_export.searching.work import Work, fingerprint

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

DIM = 31  # narrower than the tiny BERT's 32: the head reduces


def _searched(tmp_path, tiny_bert) -> Context:
    """The search's context over all of 61 titled documents (one repeats a title), its calibration file written:
    what rung 0 cuts with."""
    from tiny_models import _WORDS

    rng = random.Random(3)
    path = tmp_path / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(60):
            body = ". ".join(" ".join(rng.choice(_WORDS) for _ in range(8)).capitalize() for _ in range(3)) + "."
            f.write(json.dumps({"_id": str(i), "title": f"t{i}", "text": body}) + "\n")
        f.write(json.dumps({"_id": "dup", "title": "t0", "text": "x"}) + "\n")
    s = AutoSettings(corpus=[str(path)], sample_documents=61, sample_queries=12, known_items="sentence", dim=DIM,
                     amp="off", threads=1)  # float32, as shrink encodes: a CPU with bf16 scores in it by default
    ctx = prepare(str(tiny_bert), s, Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False),
                  progress=False)
    texts, rows = calibration_texts(ctx.sample)
    assert len(texts) == len(rows) == len(set(texts)) == len(ctx.sample.documents) == 61
    assert ctx.work.path(CALIBRATION_FILE).read_text(encoding="utf-8").splitlines() == texts
    return ctx


def test_the_rebuilt_plain_cut_gives_the_vectors_rung_0_scored(tmp_path, tiny_bert):
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.shrink import shrink

    ctx = _searched(tmp_path, tiny_bert)
    calibration = ctx.work.path(CALIBRATION_FILE)
    cand = Candidate("L1", 1)
    vectors = plain_cut(ctx, cand, calibration=calibration)
    assert cand.calibration == CALIBRATION_FILE and cand.layers and cand.params > 0 and cand.latency_ratio > 0
    assert vectors.documents.shape == (len(ctx.sample.documents), DIM)

    rebuilt = shrink(tiny_bert, tmp_path / "cut", layers=cand.layers, dim=DIM, calibration=str(calibration),
                     calibration_samples=len(ctx.sample.documents), progress=False)
    again = l2_normalised(encode(load(rebuilt.output), ctx.sample.documents))
    np.testing.assert_allclose(again, vectors.documents, atol=1e-4)


def test_the_first_layers_cuts_come_from_the_source_pass_and_rebuild_the_same(tmp_path, tiny_bert):
    """One pass of the source gives its own vectors and every first-layers cut's: the rebuilt cut (shrink to
    layers 0..d-1 with the head fitted on the calibration file) gives the vectors rung 0 scored."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.shrink import shrink

    ctx = _searched(tmp_path, tiny_bert)
    calibration = ctx.work.path(CALIBRATION_FILE)
    source = load(tiny_bert)
    own, per_text, first = source_pass(source, ctx.sample, [1, 2, source.depth])
    assert per_text > 0 and sorted(first) == [1, 2]  # the source's own depth is its own vectors, not a cut
    np.testing.assert_allclose(own.documents, l2_normalised(encode(source, ctx.sample.documents)), atol=1e-5)
    cand = Candidate("L2f", 2, layers=[0, 1])
    vectors, head = headed(cand, first[2], calibration_texts(ctx.sample)[1], DIM, calibration)
    assert cand.calibration == CALIBRATION_FILE and head.weight.shape[0] == DIM
    rebuilt = shrink(tiny_bert, tmp_path / "cut", layers=[0, 1], dim=DIM, calibration=str(calibration),
                     calibration_samples=len(ctx.sample.documents), progress=False)
    again = l2_normalised(encode(load(rebuilt.output), ctx.sample.queries.texts))
    np.testing.assert_allclose(again, vectors.queries, atol=1e-4)
