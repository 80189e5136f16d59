"""Which layers: each depth is searched spread over the source and as its first layers. A first-layers cut reads
low untrained, so it starts from its spread sibling's score; the halving spreads over depths first and heals a
depth's first-layers cut only when it may heal more candidates than there are depths."""

from __future__ import annotations

from espresso_export.searching.candidates import PLAIN, Candidate, Heal, work_depth
from espresso_export.searching.halving import spread, starts
from espresso_export.searching.scoring import Score


def _plain(retention: float) -> dict[str, Heal]:
    return {PLAIN: Heal(Score(32, "float32", retention))}


def _cand(name: str, depth: int, plain: float) -> Candidate:
    return Candidate(name, depth, scores=_plain(plain))


def test_a_first_layers_cut_starts_from_the_better_of_its_own_and_its_spread_siblings_score():
    cands = [_cand("L2", 2, 0.6), _cand("L2f", 2, 0.3), _cand("L3", 3, 0.4), _cand("L3f", 3, 0.5),
             _cand("student", 4, 0.2)]
    assert starts(cands) == {"L2": 0.6, "L2f": 0.6, "L3": 0.4, "L3f": 0.5, "student": 0.2}


def test_the_halving_spreads_over_depths_first_and_adds_first_layers_cuts_when_it_may_heal_more():
    ordered = [_cand(f"L{d}{f}", d, 0.5 + d / 20 - (0.2 if f else 0.0)) for d in range(1, 7) for f in ("", "f")]
    begin = starts(ordered)
    assert [c.name for c in spread(ordered, 3, begin)] == ["L1", "L3", "L6"]  # cheapest, middle, best
    assert [c.name for c in spread(ordered, 6, begin)] == ["L1", "L2", "L3", "L4", "L5", "L6"]
    assert [c.name for c in spread(ordered, 8, begin)] == ["L1", "L1f", "L2", "L2f", "L3", "L4", "L5", "L6"]
    assert [c.name for c in spread(ordered, 1, begin)] == ["L6"]
    assert spread(ordered, 12, begin) == ordered
    only_four = [c for c in ordered if c.depth == 4]  # --layers 4: both cuts of the one depth
    assert spread(only_four, 2, begin) == only_four


def test_the_student_the_user_named_is_always_healed_and_the_cuts_spread_beside_it():
    """A 6-layer student of a 12-layer source is no layer choice of the source's 6-layer cuts, and a budget that
    heals one candidate would give it to the best-started cut: the named student is always healed, the cuts
    spread over the other places."""
    ordered = [_cand(f"L{d}", d, 0.5 + d / 25) for d in (3, 6, 9)]
    student = Candidate("student", 6, student="minilm", scores=_plain(0.6))
    ordered.insert(2, student)  # between the cuts by the objective's cost
    begin = starts(ordered)
    assert [c.name for c in spread(ordered, 1, begin)] == ["student"]
    assert [c.name for c in spread(ordered, 2, begin)] == ["student", "L9"]
    assert [c.name for c in spread(ordered, 3, begin)] == ["L3", "student", "L9"]


def test_a_students_cost_per_text_is_its_measured_time_not_its_depth():
    student = Candidate("student", 6, student="minilm", latency_ratio=0.2)
    assert work_depth(student, 12) == 0.2 * 12
    assert work_depth(Candidate("L6", 6, latency_ratio=0.55), 12) == 6
