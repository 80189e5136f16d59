"""Rung 0's plain cut: its PCA head is fitted on the vectors of the documents it has just encoded, and the model
shrink builds from the calibration file ``auto`` writes (what its finish and recipe rebuild) gives those vectors."""

from __future__ import annotations

import json
import random

import numpy as np

from espresso_export.searching import candidates as C
from espresso_export.searching.evaluation import eval_set, read_documents


def test_the_rebuilt_plain_cut_gives_the_vectors_rung_0_scored(tmp_path, tiny_bert):
    from tiny_models import _WORDS

    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.shrink import shrink
    from espresso_export.verification.retrieval import normalise

    rng = random.Random(3)
    path = tmp_path / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(60):
            body = ". ".join(" ".join(rng.choice(_WORDS) for _ in range(8)).capitalize() for _ in range(3)) + "."
            f.write(json.dumps({"_id": str(i), "title": f"t{i}", "text": body}) + "\n")
        f.write(json.dumps({"_id": "dup", "title": "t0", "text": "x"}) + "\n")
    ev = eval_set(read_documents([str(path)]), passages=61, queries=12, seed=0, method="sentence")
    texts, rows = C.calibration_texts(ev)
    assert len(texts) == len(rows) == len(set(texts))
    calibration = tmp_path / C.CALIBRATION_FILE
    calibration.write_text("\n".join(texts) + "\n", encoding="utf-8")
    source = load(tiny_bert)
    dim = min(source.output_dim - 1, len(texts) - 1)

    cand = C.Candidate("L1", 1)
    vectors = C.plain_cut(tiny_bert, cand, ev, dim=dim, calibration=calibration, fallback=calibration, seed=0,
                          source_ckpt=source)
    assert cand.calibration == C.CALIBRATION_FILE and cand.layers and cand.params > 0
    assert vectors.passages.shape == (len(ev.passages), dim)

    rebuilt = shrink(tiny_bert, tmp_path / "cut", layers=cand.layers, dim=dim, calibration=str(calibration),
                     calibration_samples=len(texts), progress=False)
    again = normalise(encode(load(rebuilt.output), ev.passages))
    np.testing.assert_allclose(again, vectors.passages, atol=1e-4)
