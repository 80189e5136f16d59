"""What a search that met no target says it reached: a latency limit that excluded the candidates keeping the
target is named, not "no candidate kept" the target."""

from __future__ import annotations

from espresso_export.searching.answer import best_reached
from espresso_export.searching.auto_result import _missed
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import PLAIN, Candidate, Heal
from espresso_export.searching.scoring import Score


def _cand(name: str, depth: int, retention: float, ratio: float) -> Candidate:
    score = Score(384, "float32", retention, (retention - 0.01, retention + 0.01), 0.9, 1536)
    return Candidate(name, depth, latency_ratio=ratio, scores={PLAIN: Heal(score, (score,))})


def test_a_latency_limit_that_excludes_every_keeper_is_named(tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.9, max_latency_ratio=0.5)
    cands = [_cand("L1", 1, 0.70, 0.2), _cand("L5", 5, 0.95, 0.8)]
    line = _missed(s, cands, best_reached(cands, s, 200), 200)
    assert "within --max-latency-ratio 0.5: L5 (time x0.80) kept it" in line


def test_without_a_latency_limit_the_best_reached_is_said(tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.99)
    cands = [_cand("L1", 1, 0.70, 0.2), _cand("L5", 5, 0.95, 0.8)]
    line = _missed(s, cands, best_reached(cands, s, 200), 200)
    assert line.startswith("no candidate kept 0.99 of the source: the best reached 0.950 (L5 (plain))")


def test_a_higher_read_too_noisy_to_decide_is_named_beside_the_best_reached(tmp_path):
    """A corpus of documents longer than the window: L5 read 0.651 over a 95% interval 0.199-0.759, L4 0.368 over a
    deciding one; the best reached is L4, and the line says why L5's higher read is not."""
    from dataclasses import replace

    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.9)
    l4, l5 = _cand("L4", 4, 0.368, 0.7), _cand("L5", 5, 0.651, 0.82)
    wide = replace(l5.scores[PLAIN].score, ci95=(0.199, 0.759))
    l5.scores[PLAIN] = Heal(wide, (wide,))
    line = _missed(s, [l4, l5], best_reached([l4, l5], s, 200), 200)
    assert line.startswith("no candidate kept 0.9 of the source: the best reached 0.368 (L4 (plain)) by a score that "
                           "decides; L5 (plain) read 0.651 (its 95% interval 0.199-0.759: too noisy to decide")
    assert "by a score that decides" not in _missed(s, [l4], best_reached([l4], s, 200), 200)


def test_the_deepest_cut_below_the_source_is_not_told_to_widen_layers(tmp_path):
    """business-reports at 0.95: the best was L5 of a 6-layer source; "widen --layers" could not help."""
    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.99)
    cands = [_cand("L1", 1, 0.70, 0.2), _cand("L5", 5, 0.95, 0.8)]
    line = _missed(s, cands, best_reached(cands, s, 200), 200, source_depth=6)
    assert "it is the deepest cut below the source's 6 layers" in line and "widen --layers" not in line
    shallow = _missed(s, cands, best_reached(cands, s, 200), 200, source_depth=12)
    assert "no deeper cut was tried: widen --layers" in shallow


def test_candidates_no_cheaper_than_an_answer_kept_on_all_documents_are_not_healed(tmp_path):
    """For latency, an answer keeping the target on all the documents (here the static model) beats every slower
    candidate, whatever a heal would make of it; for bytes per vector a heal changes the cost, so none is beaten;
    kept on the sample alone, nothing is decided yet."""
    from dataclasses import replace

    from espresso_export.core.types import AutoObjective
    from espresso_export.searching.candidates import STATIC, SampleScore
    from espresso_export.searching.halving import beaten_by_answer

    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.85, objective="latency")
    static = _cand(STATIC, 0, 0.70, 0.01)
    healed = static.scores[PLAIN]
    sample = SampleScore(replace(healed.score, retention=0.9), healed.forms)
    kept = Heal(replace(healed.score, retention=0.88), healed.forms, texts=5000, sample=sample, documents=6000)
    static.scores["r1"] = kept
    cands = [static, _cand("L1", 1, 0.60, 0.17), _cand("L5", 5, 0.80, 0.84)]
    found = beaten_by_answer(cands, s, 200, whole=False)
    why = "no cheaper than static (r1), which keeps the target on all the documents"
    assert found == {"L1": why, "L5": why}
    static.scores["r1"] = replace(kept, sample=None, documents=None)  # kept on the sample only
    assert beaten_by_answer(cands, s, 200, whole=False) == {}
    assert beaten_by_answer(cands, s, 200, whole=True) == {"L1": why, "L5": why}  # the sample is every document
    bytes_s = AutoSettings(corpus=[str(docs)], min_retention=0.85, objective=AutoObjective.BYTES_PER_VECTOR)
    assert beaten_by_answer(cands, bytes_s, 200, whole=True) == {}


def test_cheaper_candidates_within_the_estimates_measured_error_are_named(tmp_path):
    """The static model healed reads 0.833 for a target of 0.85, less than its kind has read below its labels on
    the measured collections: a few judged pairs could make it the answer, and the hint says so; a 1-layer heal
    reading 0.40 is beyond any measured error, and the answer itself and costlier candidates are not named."""
    from espresso_export.searching.answer import choose
    from espresso_export.searching.auto_result import within_error
    from espresso_export.searching.candidates import STATIC

    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.85, objective="latency")

    def healed(name, depth, student, retention, ratio):
        cand = _cand(name, depth, 0.3, ratio)
        score = Score(384, "float32", retention, (retention - 0.01, retention + 0.01), 0.9, 1536)
        return Candidate(name, depth, student=student, latency_ratio=ratio,
                         scores={**cand.scores, "r1": Heal(score, (score,), texts=2000)})

    cands = [healed("static", 0, STATIC, 0.833, 0.005), healed("L1", 1, None, 0.40, 0.18),
             healed("L3", 3, None, 0.853, 0.51), healed("L5", 5, None, 0.84, 0.83)]
    answer = choose(cands, s, 200)
    assert answer is not None and answer.name == "L3"
    for with_queries in (False, True):
        line = within_error(cands, s, answer, with_queries=with_queries)
        assert line.startswith("cheaper than the answer, within the estimate's measured error of 0.85")
        assert "static (r1) 0.833" in line and "L1" not in line and "L5" not in line
        assert ("--queries FILE" in line) is not with_queries
        assert "espresso-export judge FILE" in line and "--judge-command CMD in one run" in line
    assert within_error(cands, s, None).startswith("within the estimate's measured error of 0.85")  # none kept it
    assert within_error(cands, AutoSettings(corpus=[str(docs)], min_retention=0.85, objective="bytes-per-vector"),
                        answer) is None


def test_an_answer_within_its_kinds_measured_over_read_of_the_target_is_named(tmp_path):
    """With the user's queries an untrained cut has read above its labels on a measured collection: an answer whose
    estimate keeps the target by less than that over-read is named, with the way to judge it; one keeping it by
    more, or a kind never read high (the known-item estimate of a plain cut), is not."""
    from espresso_export.searching.answer import choose
    from espresso_export.searching.auto_result import above_error
    from espresso_export.verification.estimate_error import measured_error

    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    high = max(r["mean_error"] for r in measured_error("plain", with_queries=True)["collections"])
    assert high > 0  # the shipped table: with the set's queries, plain cuts read high somewhere
    s = AutoSettings(corpus=[str(docs)], min_retention=0.85, objective="latency")
    close, clear = ([_cand("L5", 5, r, 0.8)] for r in (0.85 + high / 2, 0.85 + high + 0.01))
    line = above_error(close, s, choose(close, s, 200), with_queries=True)
    assert line.startswith(f"the answer L5 (plain) reads {0.85 + high / 2:.3f}, within the estimate's measured error")
    assert f"read up to {high:.3f} high" in line and "--judge-command CMD" in line
    assert above_error(clear, s, choose(clear, s, 200), with_queries=True) is None
    known_item = [r["mean_error"] for r in measured_error("plain")["collections"]]
    assert (above_error(close, s, choose(close, s, 200)) is None) is (max(known_item) <= 0 or
                                                                     0.85 + high / 2 - max(known_item) >= 0.85)
    assert above_error(close, s, None, with_queries=True) is None
