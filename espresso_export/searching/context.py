"""What every phase of ``auto`` shares: the settings, the work folder, the sample and its scorer, this machine's
speed, the budget's clock and the search's log (:class:`Context`), and the source loaded once
(:class:`SourceModel`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from espresso_export.core.console import err_console
from espresso_export.searching.auto_settings import OUTPUT_PRECISIONS, AutoSettings
from espresso_export.searching.budget import Speed
from espresso_export.searching.candidates import Heal
from espresso_export.searching.encoding import placed
from espresso_export.searching.scoring import Sample, Scorer, Vectors, nested_widths, score_name
from espresso_export.searching.work import Work


class SourceModel:
    """The source checkpoint, loaded on first use and kept until :meth:`release`: the sample's vectors and rung 0's
    timings share one load."""

    def __init__(self, spec: str, device: str = "cpu") -> None:
        self.spec, self.device, self._ckpt = spec, device, None

    def get(self):
        if self._ckpt is None:
            from espresso_export.model.checkpoint import load

            self._ckpt = placed(load(self.spec), self.device)
        return self._ckpt

    def release(self) -> None:
        self._ckpt = None  # the heals load their own teacher


@dataclass
class Context:
    source: str
    settings: AutoSettings
    work: Work
    scorer: Scorer
    speed: Speed
    dim: int  # the candidates' width (a PCA head)
    width: int  # the source's output width
    heal_file: Path
    heal_texts: int
    progress: bool
    model: SourceModel
    start: float = field(default_factory=time.perf_counter)  # when the command began: the budget covers it all
    reserve: float = 0.0  # seconds of the budget kept for the finish (:func:`.budget.finish_seconds`)
    log: list[str] = field(default_factory=list)
    stopped: bool = False  # the budget ran out

    @property
    def sample(self) -> Sample:
        return self.scorer.sample

    @property
    def queries(self) -> int:
        """The sample's known-item queries: what every score of the search is over."""
        return len(self.scorer.sample.queries)

    @property
    def score_name(self) -> str:
        """What the search's scores are, as its lines name them: with the user's queries, the higher of two reads."""
        return score_name(bool(self.scorer.sample.asked))

    def left(self) -> float:
        """Seconds of the budget left for the search: the finish's estimate kept aside."""
        return self.settings.budget_seconds - self.reserve - (time.perf_counter() - self.start)

    def say(self, line: str, *, once: bool = False) -> None:
        """A line of the search's log, printed whole (the terminal wraps it, not rich); ``once``: not again when
        the log already holds it (a check each settle repeats)."""
        if once and line in self.log:
            return
        self.log.append(line)
        if self.progress:
            err_console().print(line, highlight=False, soft_wrap=True)

    def measure(self, vectors: Vectors, *, texts: int = 0, **record: Any) -> Heal:
        """A candidate's vectors scored: at full width in float32 and at every stored form, whatever the
        objective (a later search of the same work folder may minimise bytes)."""
        forms = self.scorer.forms(vectors, nested_widths(self.dim), list(OUTPUT_PRECISIONS))
        return Heal(self.scorer.score(vectors), forms, texts, **record)
