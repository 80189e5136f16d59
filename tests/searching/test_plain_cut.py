"""Rung 0's plain cut: its PCA head is fitted on the vectors of the documents it has just encoded, and the model
shrink builds from the calibration file ``auto`` writes (what its finish and recipe rebuild) gives those vectors."""

from __future__ import annotations

import json
import random

import numpy as np

from espresso_export.searching import candidates as C
from espresso_export.searching.evaluation import eval_set, read_documents


def _docs(tmp_path):
    """A searched sample of 61 titled documents and its calibration file."""
    from tiny_models import _WORDS

    rng = random.Random(3)
    path = tmp_path / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(60):
            body = ". ".join(" ".join(rng.choice(_WORDS) for _ in range(8)).capitalize() for _ in range(3)) + "."
            f.write(json.dumps({"_id": str(i), "title": f"t{i}", "text": body}) + "\n")
        f.write(json.dumps({"_id": "dup", "title": "t0", "text": "x"}) + "\n")
    ev = eval_set(read_documents([str(path)]), passages=61, queries=12, seed=0, method="sentence")
    texts, rows = C.calibration_texts(ev)
    calibration = tmp_path / C.CALIBRATION_FILE
    calibration.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return ev, texts, rows, calibration


def test_the_rebuilt_plain_cut_gives_the_vectors_rung_0_scored(tmp_path, tiny_bert):
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.shrink import shrink
    from espresso_export.core.vectors import l2_normalised

    ev, texts, rows, calibration = _docs(tmp_path)
    assert len(texts) == len(rows) == len(set(texts))
    source = load(tiny_bert)
    dim = min(source.output_dim - 1, len(texts) - 1)

    cand = C.Candidate("L1", 1)
    vectors = C.plain_cut(tiny_bert, cand, ev, dim=dim, calibration=calibration, fallback=calibration, seed=0,
                      source_ckpt=source)
    assert cand.calibration == C.CALIBRATION_FILE and cand.layers and cand.params > 0
    assert vectors.passages.shape == (len(ev.passages), dim)

    rebuilt = shrink(tiny_bert, tmp_path / "cut", layers=cand.layers, dim=dim, calibration=str(calibration),
                     calibration_samples=len(texts), progress=False)
    again = l2_normalised(encode(load(rebuilt.output), ev.passages))
    np.testing.assert_allclose(again, vectors.passages, atol=1e-4)


def test_the_first_layers_cuts_come_from_the_source_pass_and_rebuild_the_same(tmp_path, tiny_bert):
    """One pass of the source gives its own vectors and every first-layers cut's: the rebuilt cut (shrink to
    layers 0..d-1 with the head fitted on the calibration file) gives the vectors rung 0 scored."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.shrink import shrink
    from espresso_export.core.vectors import l2_normalised

    ev, texts, rows, calibration = _docs(tmp_path)
    source = load(tiny_bert)
    own, per_text, first = C.source_pass(source, ev, [1, 2, source.depth])
    assert per_text > 0 and sorted(first) == [1, 2]  # the source's own depth is its own vectors, not a cut
    np.testing.assert_allclose(own.passages, l2_normalised(encode(source, ev.passages)), atol=1e-5)
    dim = min(source.output_dim - 1, len(texts) - 1)
    cand = C.Candidate("L2f", 2, layers=[0, 1])
    vectors, head = C.headed(cand, first[2], rows, dim, calibration)
    assert cand.calibration == C.CALIBRATION_FILE and head.weight.shape[0] == dim
    rebuilt = shrink(tiny_bert, tmp_path / "cut", layers=[0, 1], dim=dim, calibration=str(calibration),
                     calibration_samples=len(texts), progress=False)
    again = l2_normalised(encode(load(rebuilt.output), ev.cloze.texts))
    np.testing.assert_allclose(again, vectors.queries, atol=1e-4)
