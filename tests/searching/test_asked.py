"""The user's own queries in the search (``--queries``): the sample gains the documents they need, every candidate
is scored on them, and the estimate is the higher of their belief read and the known-item read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime.precision import search_at
from espresso_export.searching.asked import ASKED_DEPTH, ASKED_STEP, OTHERS_FILE, read_asked, with_asked
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.context import SourceModel
from espresso_export.searching.encoding import documents_vectors, timed_vectors
from espresso_export.searching.scoring import Scorer, draw_sample, read_documents
from espresso_export.searching.work import Work, fingerprint
from espresso_export.verification.known_item import document_belief, document_followed, followed, source_belief


@pytest.fixture(scope="module")
def asked_queries(docs, tmp_path_factory):
    """30 of the documents' titles as the user's queries (plain text, one a line)."""
    path = tmp_path_factory.mktemp("asked") / "queries.txt"
    path.write_text("".join(json.loads(line)["title"] + "\n" for line in docs.read_text().splitlines()[:30]))
    return path


def test_the_sample_gains_the_documents_your_queries_need(tiny_bert, docs, asked_queries, tmp_path):
    """Each query's top documents outside the random sample join it, appended, so the source's top
    :data:`ASKED_DEPTH` over all the documents are all searched; the source's vectors of the rest are saved for
    the scoring on all the documents, and a continued search draws the same sample without the source."""
    s = AutoSettings(corpus=[str(docs)], queries=[str(asked_queries)], sample_documents=80, sample_queries=24)
    documents = read_documents(s.corpus)
    drawn = draw_sample(documents, size=80, queries=24, seed=0)
    work = Work(tmp_path / "w", {"steps": {}})
    sample = with_asked(drawn, s, SourceModel(str(tiny_bert)), work)
    asked = read_asked(s)
    assert sample.asked == asked and len(asked) == len(set(asked)) and 0 < len(asked) <= 30
    joined = work.done(ASKED_STEP)["joined"]
    assert joined and sample.documents[:80] == drawn.documents and len(sample.documents) == 80 + len(joined)
    assert sorted(sample.documents + sample.others) == sorted(drawn.documents + drawn.others)
    assert sample.queries is drawn.queries and sample.held_out == drawn.held_out
    ckpt = SourceModel(str(tiny_bert)).get()
    every = documents_vectors(ckpt, sample.documents + sample.others)
    top = search_at(l2_normalised(documents_vectors(ckpt, asked)), every, ASKED_DEPTH).ranked
    assert set(top.ravel().tolist()) <= set(range(len(sample.documents)))
    saved = np.load(work.path(OTHERS_FILE))
    np.testing.assert_allclose(saved, every[len(sample.documents):], atol=1e-3)  # batches padded alike or not
    again = with_asked(drawn, s, SourceModel(str(tmp_path / "no-such-model")), work)  # never loaded
    assert again.documents == sample.documents and again.others == sample.others
    # without --queries nothing changes; other --queries are another search's measurements
    plain = AutoSettings(corpus=[str(docs)], sample_documents=80, sample_queries=24)
    assert with_asked(drawn, plain, SourceModel(str(tiny_bert)), work) is drawn
    assert fingerprint(str(tiny_bert), s).measured != fingerprint(str(tiny_bert), plain).measured


def test_a_candidate_is_scored_on_your_queries(tiny_bert, tiny_cut, docs, asked_queries, tmp_path):
    """The score records the belief read on the user's queries (the higher of its two sides) and is the higher of
    it and the known-item read; the source scores 1 on both."""
    s = AutoSettings(corpus=[str(docs)], queries=[str(asked_queries)], sample_documents=80, sample_queries=24)
    drawn = draw_sample(read_documents(s.corpus), size=80, queries=24, seed=0)
    sample = with_asked(drawn, s, SourceModel(str(tiny_bert)), Work(tmp_path / "w", {"steps": {}}))
    source = timed_vectors(SourceModel(str(tiny_bert)).get(), sample)[0]
    scorer = Scorer(sample, source)
    assert scorer.score(source).retention == pytest.approx(1.0) and scorer.score(source).asked == pytest.approx(1.0)
    cut = timed_vectors(SourceModel(str(tiny_cut)).get(), sample)[0]
    assert cut.asked.shape == (len(sample.asked), cut.documents.shape[1])
    score = scorer.score(cut)
    assert score.asked is not None
    assert score.retention == max(min(score.found, score.follows), score.asked)
    # the read on your queries: the higher of the queries' belief followed and the documents' (a pool of your and
    # the known-item queries)
    by_queries = followed(source_belief(source.asked, source.documents), cut.asked, cut.documents)
    answers = document_belief(source.asked, source.queries, source.documents)
    by_documents = document_followed(answers, cut.asked, cut.documents)
    assert score.asked == round(max(by_queries.retention, by_documents.retention), 4)
    narrow = scorer.score(cut, dim=8, precision="int8")
    assert narrow.asked is not None and narrow.dim == 8
    unasked = Scorer(drawn, timed_vectors(SourceModel(str(tiny_bert)).get(), drawn)[0])
    assert unasked.score(timed_vectors(SourceModel(str(tiny_cut)).get(), drawn)[0]).asked is None
