"""Which layers: each depth is searched spread over the source and as its first layers. A first-layers cut reads
low untrained, so it starts from its spread sibling's score, and the halving heals both cuts of a chosen depth."""

from __future__ import annotations

from espresso_export.searching import candidates as C
from espresso_export.searching.search import _spread, _starts


def _cand(name: str, depth: int, plain: float) -> C.Candidate:
    return C.Candidate(name, depth, scores={"plain": {"retention": plain}})


def test_a_first_layers_cut_starts_from_the_better_of_its_own_and_its_spread_siblings_score():
    cands = [_cand("L2", 2, 0.6), _cand("L2f", 2, 0.3), _cand("L3", 3, 0.4), _cand("L3f", 3, 0.5),
             _cand("student", 4, 0.2)]
    assert _starts(cands) == {"L2": 0.6, "L2f": 0.6, "L3": 0.4, "L3f": 0.5, "student": 0.2}


def test_the_halving_heals_both_cuts_of_each_depth_it_spreads_over():
    ordered = [_cand(f"L{d}{f}", d, 0.5 + d / 20) for d in range(1, 7) for f in ("", "f")]
    starts = _starts(ordered)
    picked = _spread(ordered, 6, starts)
    assert [c.name for c in picked] == ["L1", "L1f", "L3", "L3f", "L6", "L6f"]  # cheapest, middle, best
    assert [c.name for c in _spread(ordered, 5, starts)] == ["L1", "L1f", "L3", "L3f", "L6"]  # n in all
    assert [c.name for c in _spread(ordered, 1, starts)] == ["L6"]
    assert _spread(ordered, 12, starts) == ordered
