"""The settings of ``sweep``, declared once: the API (:func:`~espresso_export.sweeping.sweep.sweep` takes them as
``settings=`` or keywords) and the ``sweep`` command derive from this class. A setting that is also verify's or
shrink's (the STS and retrieval sets, the calibration corpus, threads, batch size) is their declaration, taken
whole, so its name, default and help cannot drift apart. Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from espresso_export.core.common_settings import seed_setting, select_setting
from espresso_export.core.errors import ValidationError
from espresso_export.core.parsing import parse_int_list, parse_name_list
from espresso_export.core.settings import check_choices, declared_as, setting
from espresso_export.core.types import Head, Select, SweepMetric
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.verification.verify_settings import VerifySettings, check_retention_gate

SWEEP_HEADS = (Head.PCA, Head.TRUNCATE)



def _depths(text: str) -> list[int]:
    if not text.strip():  # left out: a static model's sweep (a transformer's asks for its depths once it is known)
        return []
    return parse_int_list(text, "--layers", positive=False)  # a depth out of range is named once the model is known


def _widths(text: str) -> list[int]:
    return parse_int_list(text, "--dims")


@dataclass
class SweepSettings:
    """:func:`espresso_export.sweeping.sweep.sweep`: the (depth, width) grid, what it is scored on, how it is timed."""

    dims: Union[int, list[int]] = setting(help="Embedding widths to try, comma-separated (64,128,256).",
                                          flags=("--dims", "-d"), cli_type=str, parse=_widths)
    layers: Union[int, list[int]] = setting(default_factory=list, help="Depths to try, comma-separated (2,3,4,6); "
                                            "a static model has none (leave it out).",
                                            flags=("--layers", "-l"), cli_type=str, parse=_depths)
    head: Optional[Head] = setting(None, help="pca (fitted on the calibration corpus) or truncate (first-k). "
                                              "Default: pca; truncate for a static model (its table's first "
                                              "columns, the only narrower model it has).")
    select: Select = select_setting()
    sts: list[str] = declared_as(VerifySettings, "sts")
    sts_columns: Optional[list[str]] = declared_as(VerifySettings, "sts_columns")
    sts_limit: Optional[int] = declared_as(VerifySettings, "sts_limit")
    metric: SweepMetric = setting(
        SweepMetric.STS, help="What the points are scored, plotted and recommended on: sts (Spearman on --sts), "
                              "retrieval (nDCG@10 on --retrieval) or agreement (agreement@10 with the source's "
                              "ranking of --corpus, no labels needed).")
    retrieval: list[str] = declared_as(VerifySettings, "retrieval")
    relevant_score: float = declared_as(VerifySettings, "relevant_score")
    corpus: list[str] = declared_as(VerifySettings, "corpus")
    queries: list[str] = declared_as(VerifySettings, "queries")
    agreement_from: str = declared_as(VerifySettings, "agreement_from")
    corpus_queries: int = declared_as(VerifySettings, "corpus_queries")
    precision: list[str] = declared_as(VerifySettings, "precision")
    target_retention: float = setting(
        0.95, help="Recommend the smallest and the fastest point keeping this fraction of the source's score (STS "
                   "Spearman, nDCG@10 with --metric retrieval, agreement@10 with --metric agreement: the source "
                   "agrees with itself, so this is the agreement the point must reach).")
    calibration: Optional[str] = declared_as(ShrinkSettings, "calibration")
    calibration_samples: int = declared_as(ShrinkSettings, "calibration_samples")
    threads: Optional[int] = declared_as(VerifySettings, "threads")
    latency_batch_size: int = setting(32, min=1, help="Batch size of the throughput measurement.")
    latency_texts: int = setting(128, min=1, help="Texts timed per depth and round (a fixed sample of the STS "
                                                  "sentences).")
    latency_rounds: int = setting(3, min=1, help="Timed rounds, alternating the depths (fewer than 3: the timing is "
                                                 "reported as not reliable).")
    batch_size: int = declared_as(VerifySettings, "batch_size")
    seed: int = seed_setting("Random seed (calibration sampling, which texts the latency is timed on).")

    def __post_init__(self) -> None:
        # one value where a list is expected is a list of one (a string is one set, not its letters)
        for name in ("layers", "dims"):
            if isinstance(getattr(self, name), int):
                setattr(self, name, [getattr(self, name)])
        if isinstance(self.precision, str):
            self.precision = parse_name_list(self.precision)
        for name in ("sts", "retrieval", "corpus", "queries"):
            if isinstance(getattr(self, name), (str, os.PathLike)):
                setattr(self, name, [os.fspath(getattr(self, name))])
        if self.layers is None:
            self.layers = []
        self.head = None if self.head is None else Head(self.head)
        self.select, self.metric = Select(self.select), SweepMetric(self.metric)
        check_choices(self)  # bounds, and --threads within the machine's CPUs
        self._check()

    def _check(self) -> None:
        """What no single setting's bounds say; refused before any model is loaded."""
        if self.head is not None and self.head not in SWEEP_HEADS:
            raise ValidationError(f"sweep --head must be pca or truncate, got {self.head.value}")
        check_retention_gate("--target-retention", self.target_retention)
        if self.metric is SweepMetric.RETRIEVAL and not self.retrieval:
            raise ValidationError("sweep --metric retrieval needs a --retrieval set")
        self._check_agreement()
        if self.precision:
            self._check_precision()
        if not self.sts:
            raise ValidationError("sweep needs at least one --sts set")
        if not self.dims:  # the depths are checked once the model is known (a static model has none)
            raise ValidationError("sweep needs at least one width (--dims)")
        if self.sts_columns is not None and len(self.sts_columns) != 3:
            raise ValidationError(f"--sts-columns needs three names (sentence1, sentence2, score), got "
                                  f"{','.join(self.sts_columns)}")

    def for_model(self, static: bool) -> SweepSettings:
        """These settings for a transformer (``static=False``: depths required, the head pca unless given) or a
        static model (no depths, no layer selection, the head truncate: a static model's narrower widths are its
        table's first columns); an axis that does not apply is refused in one line."""
        from dataclasses import replace

        if not static:
            if not self.layers:
                raise ValidationError("sweep needs at least one depth (--layers) and one width (--dims)")
            return replace(self, head=self.head or Head.PCA)
        if self.layers:
            raise ValidationError("sweep --layers: a static model has no layers to cut (a token table, no "
                                  "attention); leave --layers out and sweep its widths (--dims)")
        if self.select is not Select.AUTO:
            raise ValidationError(f"sweep --select {self.select.value}: a static model has no layers to select; "
                                  "leave --select out")
        if self.head is Head.PCA:
            raise ValidationError("sweep --head pca: a static model's narrower widths are its table's first columns "
                                  "(no head to fit; its table was reduced by a PCA, so they lead): leave --head out "
                                  "or pass truncate")
        return replace(self, head=Head.TRUNCATE)

    def _check_agreement(self) -> None:
        agreement = self.metric is SweepMetric.AGREEMENT
        if agreement and not self.corpus:
            raise ValidationError("sweep --metric agreement needs a --corpus (the documents searched)")
        given = [flag for flag, value in (("--corpus", self.corpus), ("--queries", self.queries)) if value]
        if given and not agreement:
            raise ValidationError(f"sweep {' and '.join(given)}: scored only with --metric agreement")
        if self.queries and len(self.queries) != len(self.corpus):
            raise ValidationError(f"--queries is one file per --corpus, in order: {len(self.queries)} given for "
                                  f"{len(self.corpus)} corpora")

    def _check_precision(self) -> None:
        from espresso_export.runtime.precision import check_precision

        for p in self.precision:
            check_precision(p)
        if self.metric is SweepMetric.STS:
            raise ValidationError("sweep --precision scores searches: use --metric retrieval or agreement (STS "
                                  "Spearman at a vector precision is not measured)")
        self.precision = list(dict.fromkeys(self.precision))
