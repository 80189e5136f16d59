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
