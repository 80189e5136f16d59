"""How ``auto`` spends its budget: successive halving over the candidates, sized from this machine's speed.

Rung 0 is free of training: every plain cut is scored (the proxy). Candidates whose plain score could not
reach the target even if healing closed almost all of their gap to the source are dropped there. Then rung
``r`` heals each remaining candidate on ``texts[r]`` texts (``ETA`` times the previous rung's), scores it,
and keeps the cheapest ``1/ETA`` of those that may still reach the target, plus the cheapest that already
does. Every rung costs about the same; the texts per rung are chosen so that the rungs fit the budget left
after the teacher pass, estimated from the source's measured encoding speed and corrected by each heal's
measured speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from espresso_export.distilling.student import STUDENT_PCA_SAMPLES  # distill encodes these before training

ETA = 3  # keep a third at each rung
MAX_GAP_CLOSED = 0.95  # rung 0: a heal closes at most this share of a plain cut's gap to the source
TRAIN_COST = 3.0  # a training step on a text costs about 3 forward passes (forward, backward), until measured
MIN_STEPS = 20  # a heal shorter than this says little
LONGER_GAIN = 0.5  # a heal ETA times as long gains at most this share of what the last one gained
SEARCH_SHARE = 0.85  # of the budget left after the fixed costs; the rest absorbs estimation error


@dataclass
class Speed:
    """Seconds per text of this machine, from the source's measured encoding; ``train_cost`` is replaced by what
    the first heal measured."""

    seconds_per_text: float  # the source's encoding, per text of the documents
    depth: int  # the source's layers
    train_cost: float = TRAIN_COST

    def encode(self, texts: int, depth: float) -> float:
        """Seconds to encode ``texts`` with a model costing ``depth`` of the source's layers per text
        (:func:`.candidates.work_depth`)."""
        return texts * self.seconds_per_text * max(depth, 1e-3) / self.depth

    def train(self, texts: int, depth: float) -> float:
        """A heal: the student's own PCA sample encoded once (distill's projection start), then the training."""
        return self.encode(min(texts, STUDENT_PCA_SAMPLES), depth) + self.train_cost * self.encode(texts, depth)

    def observe(self, texts: int, depth: float, seconds: float) -> None:
        """A heal of ``texts`` texts at ``depth`` layers took ``seconds`` (the teacher pass aside)."""
        rest = seconds - self.encode(min(texts, STUDENT_PCA_SAMPLES), depth)
        if texts > 0 and rest > 0:
            self.train_cost = max(1.0, rest / self.encode(texts, depth))


LADDER = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)  # heal lengths are rounded down to these x 10^k texts


def on_ladder(texts: float) -> int:
    """``texts`` rounded down to :data:`LADDER`: searches with other budgets plan the same heal lengths, so a
    rerun with more time reuses the heals a shorter one finished."""
    if texts < 1:
        return 0
    power = 10 ** math.floor(math.log10(texts))
    return int(max(step * power for step in LADDER if step * power <= texts + 1e-9))


@dataclass(frozen=True)
class Rung:
    index: int  # 1, 2, ...
    candidates: int  # how many are healed at this rung
    texts: int  # training texts per heal (steps x batch size)

    def steps(self, batch_size: int) -> int:
        return max(1, self.texts // batch_size)


def plan_rungs(n: int, depth: float, seconds: float, speed: Speed, *, batch_size: int, max_texts: int,
               score_texts: int = 0) -> list[Rung]:
    """Rungs for ``n`` candidates of about ``depth`` layers within ``seconds``: as many as halving ``n`` down to one
    takes, each given the same time. Fewer candidates (the caller's best first) when even the first rung would
    be shorter than :data:`MIN_STEPS` steps. The last rung is capped at ``max_texts`` (two epochs of the
    healing texts). Each heal is followed by encoding ``score_texts`` texts to score it."""
    while n >= 1:
        sizes = [n]
        while sizes[-1] > 1:
            sizes.append(math.ceil(sizes[-1] / ETA))
        weights = sum(c * ETA**r for r, c in enumerate(sizes))
        scoring = sum(sizes) * speed.encode(score_texts, depth)
        first = (seconds * SEARCH_SHARE - scoring) / max(weights * speed.train(1, depth), 1e-9)
        if first >= MIN_STEPS * batch_size:
            rungs: list[Rung] = []
            for r, c in enumerate(sizes):
                texts = on_ladder(min(first * ETA**r, max_texts))
                if rungs and texts <= rungs[-1].texts:  # capped: a longer heal is not possible, stop halving here
                    break
                rungs.append(Rung(r + 1, c, texts))
            return rungs
        n -= 1
    return []


def hopeless(plain: float, target: float) -> bool:
    """Rung 0: even a heal closing :data:`MAX_GAP_CLOSED` of the plain cut's gap would miss the target."""
    return plain + (1.0 - plain) * MAX_GAP_CLOSED < target


def slack(before: dict[str, float], after: dict[str, float]) -> float:
    """How much more a candidate may still gain from a longer heal: half the largest gain the last rung
    measured (longer heals gain less), at least 0.005."""
    gains = [after[k] - before[k] for k in after if k in before]
    return max(0.005, LONGER_GAIN * max(gains, default=0.0))


def survivors(scores: dict[str, float], costs: dict[str, float], target: float, keep: int, margin: float) -> list[str]:
    """The cheapest ``keep`` candidates whose score plus ``margin`` reaches ``target``, and the cheapest that already
    reaches it; when none may reach it, the ``keep`` best scored (the closest to the target)."""
    by_cost = sorted(scores, key=lambda k: (costs[k], -scores[k]))
    hopeful = [k for k in by_cost if scores[k] + margin >= target]
    if not hopeful:
        return sorted(scores, key=lambda k: -scores[k])[:keep]
    chosen = hopeful[:keep]
    meets = [k for k in by_cost if scores[k] >= target]
    if meets and meets[0] not in chosen:
        chosen.append(meets[0])
    return chosen
