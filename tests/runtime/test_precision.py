"""Output-vector precision: sentence-transformers' numerics, calibration ranges through JSON, faiss search at each
precision with rescoring, nested widths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import top_k_by_cosine
from espresso_export.runtime.precision import (
    PRECISIONS, CalibrationRanges, build_index, bytes_per_vector, dequantize, index_bytes, quantize, rescore,
    search, search_at, truncate,
)

pytest.importorskip("faiss")


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(3)
    docs = unit(rng.normal(size=(600, 40)))
    queries = unit(docs[:30] + 0.3 * rng.normal(size=(30, 40)).astype(np.float32))
    return queries, docs


def test_bytes_per_vector():
    assert [bytes_per_vector(p, 100) for p in PRECISIONS] == [400, 100, 100, 13, 13]
    assert bytes_per_vector("binary", 64) == 8
    with pytest.raises(ValidationError, match="unknown precision"):
        bytes_per_vector("int4", 8)


def test_int8_by_hand():
    ranges = np.array([[-255.0, 0.0], [255.0, 0.0]], dtype=np.float32)  # the second dimension never varies
    x = np.array([[0.0, 5.0], [255.0, -5.0], [-255.0, 0.0], [300.0, 0.0], [-1.0, 0.5]], dtype=np.float32)
    uint8 = quantize(x, "uint8", ranges)
    # step 510/255 = 2: 0 -> floor(127.5) = 127; 255 -> 255; -255 -> 0; 300 clips to 255; -1 -> 127;
    # a zero-width range uses step 1: 5 -> 5, -5 clips to 0, 0.5 -> 0
    assert uint8.tolist() == [[127, 5], [255, 0], [0, 0], [255, 0], [127, 0]]
    assert quantize(x, "int8", ranges).tolist() == [[-1, -123], [127, -128], [-128, -128], [127, -128], [-1, -128]]
    back = dequantize(quantize(x, "int8", ranges), "int8", ranges)
    assert back[0].tolist() == [-1.0, 5.0]  # each bucket's lower edge: -255 + 127 x 2


def test_binary_by_hand():
    x = np.array([[0.5, -0.1, 0.0, 2.0, -3.0, 1.0, 1.0, -1.0, 0.2]], dtype=np.float32)
    # bits 1,0,0,1,0,1,1,0 | 1 (then 7 padding zeros)
    assert quantize(x, "ubinary").tolist() == [[0b10010110, 0b10000000]]
    assert quantize(x, "binary").tolist() == [[0b10010110 - 128, 0b10000000 - 128]]
    assert dequantize(quantize(x, "binary"), "binary", dim=9).tolist() == [[1, 0, 0, 1, 0, 1, 1, 0, 1]]


def test_scalar_needs_ranges_and_floats(vectors):
    _, docs = vectors
    with pytest.raises(ValidationError, match="calibration ranges"):
        quantize(docs, "int8")
    with pytest.raises(ValidationError, match="for 40 dims, the vectors have 8"):
        quantize(docs[:, :8], "int8", CalibrationRanges.fit(docs))
    with pytest.raises(ValidationError, match="must be floats"):
        quantize(quantize(docs, "ubinary"), "binary")


def test_matches_sentence_transformers(vectors):
    st = pytest.importorskip("sentence_transformers.util.quantization")
    queries, docs = vectors
    ranges = CalibrationRanges.fit(docs)
    for x in (queries, queries.astype(np.float64), docs[:50]):
        for precision in PRECISIONS:
            ours = quantize(x, precision, ranges)
            theirs = st.quantize_embeddings(x, precision=precision, ranges=ranges.ranges)
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), precision
    assert np.array_equal(ranges.ranges, np.vstack((docs.min(0), docs.max(0))))


def test_ranges_round_trip_through_json(vectors):
    queries, docs = vectors
    ranges = CalibrationRanges.fit(docs)
    stored = json.loads(json.dumps({"precision": "int8", "calibration": ranges.to_dict()}))
    back = CalibrationRanges.from_dict(stored["calibration"])
    assert back.samples == 600 and back.dim == 40
    assert np.array_equal(back.ranges, ranges.ranges)  # the same float32 bits
    assert np.array_equal(quantize(queries, "int8", back), quantize(queries, "int8", ranges))
    for bad in ({}, {"ranges": [[0.0, 1.0]]}, {"ranges": [[0.0], ["x"]]}, {"ranges": [[0.0], [float("nan")]]}):
        with pytest.raises(ValidationError, match="ranges"):
            CalibrationRanges.from_dict(bad)


def test_float32_search_is_exact_and_batched(vectors):
    queries, docs = vectors
    index = build_index(docs, "float32")
    expected = top_k_by_cosine(queries, docs, 10)
    assert np.array_equal(search(index, queries, 10), expected)
    assert np.array_equal(search(index, queries, 10, batch_size=7), expected)


def test_int8_search_ranks_as_dequantised_inner_product(vectors):
    queries, docs = vectors
    ranges = CalibrationRanges.fit(docs)
    deq = dequantize(quantize(docs, "int8", ranges), "int8", ranges).astype(np.float64)
    scores = queries.astype(np.float64) @ deq.T
    found = search_at(queries, docs, 5, precision="int8", ranges=ranges)
    assert found.bytes_per_vector == 40 and found.index_bytes < index_bytes(build_index(docs, "float32"))
    for row, got in zip(scores, found.ranked):
        assert np.allclose(row[got], np.sort(row)[::-1][:5], atol=1e-6)
    # queries quantised alike are searched too (dequantised); uint8 codes rank as int8 codes do
    assert np.array_equal(search_at(queries, docs, 5, precision="uint8", ranges=ranges).ranked, found.ranked)
    coded = search(build_index(quantize(docs, "int8", ranges), "int8", ranges), quantize(queries, "int8", ranges),
                   5, precision="int8", ranges=ranges)
    assert (coded[:, 0] == found.ranked[:, 0]).mean() > 0.9


def test_binary_search_is_hamming(vectors):
    queries, docs = vectors
    bits_q, bits_d = dequantize(quantize(queries, "ubinary"), "ubinary"), dequantize(quantize(docs, "ubinary"), "ubinary")
    hamming = (bits_q[:, None, :] != bits_d[None, :, :]).sum(axis=2)
    for precision in ("binary", "ubinary"):
        found = search_at(queries, docs, 10, precision=precision)
        assert found.bytes_per_vector == 5
        got = np.take_along_axis(hamming, found.ranked, axis=1)
        assert np.array_equal(got, np.sort(hamming, axis=1)[:, :10])  # ties may come in any order


def test_rescore_by_hand():
    docs = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    query = np.array([[0.0, 1.0]], dtype=np.float32)
    # candidates 0, 2 and a padding slot: 2 scores 0.8, 0 scores 0, the pad -inf
    assert rescore(query, np.array([[0, 2, -1]]), docs, 3).tolist() == [[2, 0, -1]]


def test_binary_rescoring_matches_sentence_transformers(vectors):
    st = pytest.importorskip("sentence_transformers.util.quantization")
    queries, docs = vectors
    ours = search_at(queries, docs, 10, precision="ubinary", rescore_factor=4).ranked
    theirs, _ = st.semantic_search_faiss(queries, corpus_embeddings=quantize(docs, "ubinary"),
                                         corpus_precision="ubinary", top_k=10, rescore_multiplier=4)
    assert ours.tolist() == [[hit["corpus_id"] for hit in hits] for hits in theirs]


def test_rescoring_recovers_float_ranking(vectors):
    queries, docs = vectors
    exact = top_k_by_cosine(queries, docs, 10)

    def overlap(ranked):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ranked, exact)])

    plain = search_at(queries, docs, 10, precision="binary").ranked
    floats = search_at(queries, docs, 10, precision="binary", rescore_factor=60, rescore_with="float32").ranked
    assert overlap(floats) == 1.0 and overlap(plain) < 1.0  # 600 candidates: every document
    ranges = CalibrationRanges.fit(docs)
    int8 = search_at(queries, docs, 10, precision="binary", rescore_factor=60, rescore_with="int8", ranges=ranges)
    assert overlap(int8.ranked) > overlap(plain)
    with pytest.raises(ValidationError, match="rescoring rows"):
        search_at(queries, docs, 10, precision="binary", rescore_factor=2, rescore_with="fp16")


def test_search_leaves_out_the_excluded_position(vectors):
    _, docs = vectors
    for precision in ("float32", "binary"):
        found = search_at(docs[:20], docs, 5, precision=precision, exclude=np.arange(20)).ranked
        assert not (found == np.arange(20)[:, None]).any()
        assert (found >= 0).all()
    tiny = search_at(docs[:2], docs[:3], 5, exclude=[0, -1]).ranked
    assert sorted(tiny[0, :2].tolist()) == [1, 2] and tiny[0, 2:].tolist() == [-1, -1, -1]
    assert (tiny[1] >= 0).sum() == 3


def test_truncation_renormalises_and_equals_the_narrower_pca():
    from espresso_export.shrinking.heads import fit_pca

    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(300, 24)) @ rng.normal(size=(24, 24))
    wide, narrow = fit_pca(hidden, 16), fit_pca(hidden, 8)
    cut = truncate(wide.transform(hidden).astype(np.float32), 8)
    assert np.allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)
    assert np.allclose(cut, unit(narrow.transform(hidden)), atol=1e-5)
    with pytest.raises(ValidationError, match="truncate"):
        truncate(cut, 9)
