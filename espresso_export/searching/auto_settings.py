"""The settings of ``auto``, declared once: the API (:func:`espresso_export.searching.auto.auto`), the ``auto``
command and the recipe's ``auto`` keys derive from this class. Settings that are verify's or distill's (the
labelled sets, the latency gate, the training length, threads) are their declarations, taken whole.
Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from espresso_export.core.common_settings import seed_setting
from espresso_export.core.errors import ValidationError
from espresso_export.core.parsing import parse_duration, parse_int_list, parse_name_list
from espresso_export.core.settings import check_choices, declared_as, setting
from espresso_export.core.types import AutoObjective
from espresso_export.training.trainer_settings import TrainerSettings
from espresso_export.verification.verify_settings import (
    VerifySettings,
    check_judging,
    check_queries_per_corpus,
    check_retention_gate,
)

OUTPUT_PRECISIONS = ("float32", "int8", "binary")  # what the index may store; binary searched with rescoring
DEFAULT_MAX_DIM = 384  # the candidates' default width at most: all-MiniLM-L6-v2's, the common small-model width
DEFAULT_TEXTS = 20_000  # healing texts at most by default
MIN_HEALING_TEXTS = 100  # --max-texts at least: fewer is too short a heal to say anything
FINAL_LATENCY_BUDGET = 5.0  # the final check's extra timed seconds per batch size: the search spent the budget


@dataclass
class AutoSettings:
    """:func:`espresso_export.searching.auto.auto`: what the model must keep, what it minimises, and the
    budget the search spends."""

    corpus: list[str] = setting(
        default_factory=list, path="data", flags=("--corpus", "-c"),
        help="Your documents, repeatable: .jsonl (a record's title goes in front of its text), .txt, .csv or a BEIR "
             "folder. The candidates heal on them and are scored on them, no labels needed.")
    corpus_field: Optional[str] = declared_as(VerifySettings, "corpus_field")  # every read of the documents
    queries: list[str] = setting(
        default_factory=list, path="data",
        help="Your queries, unlabelled (.txt one a line, .jsonl), one file per --corpus in order: up to 100 of "
             "them score every candidate too (each one's top 10 documents join the sample), and the estimate is "
             "the higher of the known-item retention and the belief retention on them; the final check also "
             "reports the agreement of the answer's search with the source's for them. Default: agreement "
             "queries made from the documents.")
    sentences: list[str] = setting(
        default_factory=list, path="data",
        help="General sentences mixed into the healing texts (as distill's --corpus takes them), repeatable. "
             "Default: the documents alone.")
    doc_share: float = setting(0.5, min=0.05, max=1.0, help="With --sentences: the share of the healing texts "
                                                            "taken from the documents.")
    doc_sentences: float = setting(0.5, min=0.0, max=1.0, help="With --sentences: the share of the other healing "
                                                               "texts that are sentences of your documents (short "
                                                               "texts of your domain, as queries are); the rest "
                                                               "are --sentences. Without: all of them.")
    retrieval: list[str] = setting(default_factory=list, path="data",
                                   help="Labelled retrieval sets (BEIR folders) the answer is also judged (and "
                                        "gated) on, repeatable. Never used to choose.")
    sts: list[str] = setting(default_factory=list, path="data",
                             help="Labelled STS sets the answer is also judged (and gated) on, repeatable "
                                  "(verify's --sts forms). Never used to choose.")
    min_retention: float = setting(0.97, help="Keep at least this fraction of the source's quality: the known-item "
                                              "retention on the documents, and every labelled set given.")
    objective: AutoObjective = setting(AutoObjective.LATENCY,
                                       help="What to make smallest: latency, size (bytes of weights) or "
                                            "bytes-per-vector (what the index stores per document).")
    max_latency_ratio: Optional[float] = declared_as(VerifySettings, "max_latency_ratio")
    latency_budget: float = declared_as(VerifySettings, "latency_budget", default=FINAL_LATENCY_BUDGET)
    time_budget: str = setting("1h", help="Wall time of the whole command (90s, 45m, 2h, 1h30m), planned from "
                                          "this machine's measured speed: the final export and check are "
                                          "estimated and kept aside.")
    device: str = declared_as(TrainerSettings, "device")
    amp: str = declared_as(TrainerSettings, "amp")
    student: Optional[str] = setting(None, path="model", help="Also try this smaller pretrained model as an HPD "
                                                              "student (a folder, Hub id or alias), beside the cuts.")
    static: bool = setting(True, flags=("--static/--no-static",),
                           help="Also try a static model of the source (no attention: distill --student static), "
                                "healed on the healing texts, where the static extra is installed.")
    layers: list[int] = setting(default_factory=list, cli_type=Optional[str],
                                parse=lambda t: parse_int_list(t, "--layers"),
                                help="Depths to consider, comma-separated (2,3,4). Default: every depth below "
                                     "the source's.")
    dim: Optional[int] = setting(None, min=8, help="Width the candidates are healed at (a PCA head). Default: the "
                                                   f"source's width, at most {DEFAULT_MAX_DIM}.")
    precision: Union[str, list[str]] = setting(
        default_factory=lambda: list(OUTPUT_PRECISIONS), cli_type=str, parse=parse_name_list,
        help="Output precisions the index may store (float32,int8,binary; binary is searched with rescoring).")
    sample_documents: int = setting(2000, min=20, renamed_from=("eval_passages",),
                                    help="Documents the candidates are searched over (a seeded sample of yours; "
                                         "every known-item query's own document is in it).")
    sample_queries: int = setting(200, min=10, renamed_from=("eval_queries",),
                                  help="Known-item queries the candidates are scored on, cut out of the sample.")
    corpus_queries: int = setting(1000, min=10, renamed_from=("check_queries",),
                                  help="Agreement and known-item queries of the final check on all your documents, "
                                       "per corpus (verify's --corpus-queries): more than the sample's, since that "
                                       "check decides.")
    known_items: str = declared_as(VerifySettings, "known_items")  # the search's and the final check's, one method
    max_noise: float = declared_as(VerifySettings, "max_noise")  # a score wider than this decides no target
    judgments: Optional[str] = declared_as(VerifySettings, "judgments")  # the final check's: judging, never choosing
    write_judging: Optional[str] = declared_as(VerifySettings, "write_judging")  # the answer's pairs to judge
    judged_choice: bool = setting(
        False, flags=("--judged-choice/--no-judged-choice",),
        help="Let your judgments choose: the answer is the cheapest candidate whose judged retention (--judgments, "
             "on the final check's queries over all your documents) keeps --min-retention; the known-item estimate "
             "is reported beside it. With --write-judging (and no --judgments), the pairs deciding the candidates up to "
             "the estimate's own answer are written to judge first.")
    judge_command: Optional[str] = declared_as(VerifySettings, "judge_command")  # with --judged-choice: it chooses
    judge_per_query: bool = declared_as(VerifySettings, "judge_per_query")
    prune_vocab: Optional[bool] = setting(
        None, flags=("--prune-vocab/--no-prune-vocab",),
        help="Prune the answer's vocabulary to the tokens of your documents and the healing texts (prune-vocab): "
             "a smaller embedding table, the same vectors for any text made of those tokens. Default: on for "
             "--objective size.")
    max_texts: Optional[int] = setting(None, min=MIN_HEALING_TEXTS, help="Healing texts at most. Default: what "
                                                                         f"the budget allows, up to {DEFAULT_TEXTS:,}.")
    max_seq_len: Optional[int] = setting(None, min=8, help="Truncate healing texts to this many tokens. Default: "
                                                           "distill's choice from the healing texts' lengths.")
    batch_size: int = setting(32, min=1, help="Healing batch size.")
    threads: Optional[int] = declared_as(VerifySettings, "threads")
    seed: int = seed_setting()
    keep_work: bool = setting(False, flags=("--keep-work/--no-keep-work",),
                              help="Keep the work folder (every candidate) after a search that met the target "
                                   "within its budget (it is always kept otherwise, for a larger budget to "
                                   "continue).")

    @property
    def scoring(self) -> tuple[str, str]:
        """(``amp``, ``device``): where and at which precision the search encodes to score candidates."""
        return self.amp, self.device

    def __post_init__(self) -> None:
        for name in ("corpus", "queries", "sentences", "retrieval", "sts"):
            if isinstance(getattr(self, name), (str, os.PathLike)):
                setattr(self, name, [os.fspath(getattr(self, name))])
        if isinstance(self.precision, str):
            self.precision = parse_name_list(self.precision)
        if isinstance(self.layers, int):
            self.layers = [self.layers]
        self.objective = AutoObjective(self.objective)
        check_choices(self)
        self._check()

    @property
    def pruning(self) -> bool:
        """Whether the answer's vocabulary is pruned (``prune_vocab``, by default for the size objective)."""
        return self.objective is AutoObjective.SIZE if self.prune_vocab is None else self.prune_vocab

    @property
    def budget_seconds(self) -> float:
        return parse_duration(self.time_budget, "--time-budget")

    def _check(self) -> None:
        if not self.corpus:
            raise ValidationError("auto needs your documents: --corpus docs.jsonl (no labels needed)")
        check_retention_gate("--min-retention", self.min_retention)
        check_queries_per_corpus(self.queries, self.corpus)  # before the search, not after it in the final check
        check_judging(self.judgments, self.write_judging, self.corpus, self.judge_command)  # so too the judging files
        if self.judged_choice and not (self.judgments or self.write_judging):
            raise ValidationError("--judged-choice chooses on your judgments: give --judgments FILE, or "
                                  "--write-judging FILE for the pairs to judge first")
        if self.judge_command and not self.judged_choice:  # the final check may write its pairs more than once
            raise ValidationError("in auto, --judge-command fills the pairs --judged-choice --write-judging FILE "
                                  "writes and chooses on them: give --judged-choice too")
        if self.judged_choice and self.objective is AutoObjective.BYTES_PER_VECTOR:
            raise ValidationError("--judged-choice chooses by latency or size: judged retention is measured on "
                                  "float32 vectors at full width, not on every stored form bytes-per-vector compares")
        self.budget_seconds  # noqa: B018 - refuses a bad duration before any work
        bad = [p for p in self.precision if p not in OUTPUT_PRECISIONS]
        if bad or not self.precision:
            raise ValidationError(f"--precision {','.join(bad) or '(none)'}: choose from {','.join(OUTPUT_PRECISIONS)}")
        self.precision = list(dict.fromkeys(self.precision))
        if self.objective is not AutoObjective.BYTES_PER_VECTOR and "float32" not in self.precision:
            self.precision.insert(0, "float32")
        if any(d < 1 for d in self.layers):
            raise ValidationError(f"--layers {self.layers}: depths are counts of layers, 1 or more")
