"""The settings of ``verify``, declared once: :func:`~espresso_export.verification.verify.verify` takes them (an
instance or its fields as keywords), and the ``verify`` command and the recipe's ``verify`` step derive from this
class. Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from espresso_export.core.evidence import MAX_NOISE
from espresso_export.core.parsing import parse_int_list, parse_name_list
from espresso_export.core.settings import check_choices, declared_as, setting
from espresso_export.core.types import IndexKind, Pooling, WithinNoise
from espresso_export.core.common_settings import POOLING_HELP, seed_setting, trust_remote_code_setting
from espresso_export.distilling.distill_settings import DistillSettings

MEASURE_THREADS_HELP = ("Intra-op threads for torch and onnxruntime (fixed for every model measured). Default: "
                        "torch's default, the physical core count.")


NEEDS_STS = "verify needs at least one STS set (--sts; sts: in a recipe)"
LATENCY_GATE_NEEDS_BATCHES = ("the latency gate (--max-latency-ratio; max_latency_ratio: in a recipe) needs batch "
                              "sizes to time (--batch-sizes; batch_sizes:), not none")
RETRIEVAL_GATE_NEEDS_SET = ("the retrieval gate (--min-retrieval-retention; min_retrieval_retention: in a recipe) "
                            "needs a retrieval set (--retrieval; retrieval:)")


def _int_list(text: str, option: str) -> list[int]:
    """A comma-separated option whose empty form ("" or none) means no values."""
    return [] if str(text).strip().lower() in ("", "none") else parse_int_list(text, option)


MAX_RETENTION_GATE = 1.5  # a retention can pass 1 (a cut scoring above its source); a gate above this is a typo


def check_retention_gate(flag: str, value: float | None) -> None:
    """A retention threshold is a ratio: ``--min-sts-retention 95`` is a gate no model can pass, refused at once (exit 2)
    rather than found out after every measurement as a failed gate (exit 3)."""
    from espresso_export.core.errors import ValidationError

    if value is not None and not 0 < value <= MAX_RETENTION_GATE:
        hint = f": did you mean {value / 100:g}?" if MAX_RETENTION_GATE < value <= 100 else ""
        raise ValidationError(f"{flag} is a ratio of the source's score (0.95 keeps 95%), between 0 and "
                              f"{MAX_RETENTION_GATE:g}; got {value:g}{hint}")


def check_queries_per_corpus(queries: list[str], corpus: list[str]) -> None:
    from espresso_export.core.errors import ValidationError

    if queries and len(queries) != len(corpus):
        raise ValidationError(f"--queries is one file per --corpus, in order: {len(queries)} given for "
                              f"{len(corpus)} corpora")


def check_judging(judgments: str | None, write_judging: str | None, corpus, judge_command: str | None = None) -> None:
    """A corpus to judge, a judgments file that reads, a pairs file that replaces nothing judged, a judge program
    with a file to fill (:mod:`.judging`)."""
    from espresso_export.verification.judging import check_judging as check

    check(judgments, write_judging, corpus, judge_command)


def check_vectors(s: VerifySettings) -> None:
    """The corpus, precision and width settings: known precisions, positive widths, one --queries per
    --corpus, and an agreement gate that has a corpus and is a share (0 to 1)."""
    from espresso_export.core.errors import ValidationError
    from espresso_export.runtime.precision import check_precision

    for name in s.precision:
        check_precision(name)
    if s.rescore and not any(p in ("binary", "ubinary") for p in s.precision):
        raise ValidationError("--rescore re-ranks a binary search: give --precision binary (or ubinary) with it")
    if any(d < 1 for d in s.dims):
        raise ValidationError(f"--dims must be positive widths, got {','.join(map(str, s.dims))}")
    check_queries_per_corpus(s.queries, s.corpus)
    if s.min_agreement is not None and not 0 < s.min_agreement <= 1:
        raise ValidationError(f"--min-agreement is a share of the source's top 10 (0.8 keeps 8 of 10), between 0 "
                              f"and 1; got {s.min_agreement:g}")
    if s.min_agreement is not None and not s.corpus:
        raise ValidationError("the agreement gate (--min-agreement; min_agreement: in a recipe) needs a corpus "
                              "(--corpus; corpus:)")
    check_retention_gate("--min-judged-retention", s.min_judged_retention)
    if s.min_judged_retention is not None and not (s.judgments or s.judge_command):
        raise ValidationError("the judged gate (--min-judged-retention) needs your judgments (--judgments, or "
                              "--judge-command to fill --write-judging)")
    check_judging(s.judgments, s.write_judging, s.corpus, s.judge_command)


def check_across(sts, retrieval, batch_sizes, *, min_retrieval_retention, max_latency_ratio,
                 min_sts_retention=None) -> None:
    """The checks that involve several settings, run when the settings are made (so a recipe fails before its
    first step). Named as the command line spells them."""
    from espresso_export.core.errors import ValidationError

    check_retention_gate("--min-sts-retention", min_sts_retention)
    check_retention_gate("--min-retrieval-retention", min_retrieval_retention)
    if max_latency_ratio is not None and not max_latency_ratio > 0:
        raise ValidationError(f"--max-latency-ratio is candidate/source time (0.5: twice as fast), above 0; "
                              f"got {max_latency_ratio:g}")
    if not sts:
        raise ValidationError(NEEDS_STS)
    if batch_sizes and min(batch_sizes) < 1:
        raise ValidationError(f"latency batch sizes must be positive integers, got {list(batch_sizes)}")
    if max_latency_ratio is not None and not batch_sizes:
        raise ValidationError(LATENCY_GATE_NEEDS_BATCHES)
    if min_retrieval_retention is not None and not retrieval:
        raise ValidationError(RETRIEVAL_GATE_NEEDS_SET)


@dataclass
class VerifySettings:
    """:func:`espresso_export.verification.verify.verify`: the measurements and the gate."""

    sts: list[str] = setting(
        default_factory=lambda: ["builtin"], path="data",
        help="STS set, repeatable: 'builtin' (a shipped smoke set, not a benchmark), an STS-B file (tab-separated, "
             "score in column 5, sentences in 6-7), a csv/tsv/jsonl with sentence1,sentence2,score columns, or a Hub "
             "dataset id owner/name[:split] (online, needs `datasets`). Default: builtin.")
    sts_columns: Optional[list[str]] = setting(
        None, cli_type=Optional[str], parse=parse_name_list,
        help="Column names for csv/tsv/jsonl STS files: sentence1,sentence2,score.")
    sts_limit: Optional[int] = setting(None, min=2, help="Use N pairs of each STS set, spread evenly over it "
                                                         "(quick checks).")
    retrieval: list[str] = setting(
        default_factory=list, path="data",
        help="Retrieval set, repeatable: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) or an STS spec "
             "(sentence1 = query, its pair = relevant document when scored >= --relevant-score, all sentence2 = "
             "corpus).")
    corpus: list[str] = setting(
        default_factory=list, path="data",
        help="Your documents, repeatable: a .jsonl/.txt/.csv file (FILE#FIELD for a jsonl field or csv column) or a "
             "BEIR folder. No labels needed: the source's ranking is the reference (agreement@10, nDCG@10 with the "
             "source's ranks as grades, recall@100 of its top 10), and the known-item retention (a sentence, title "
             "or half cut out of its document, the rest found: the candidate's nDCG@10 over the source's).")
    corpus_field: Optional[str] = declared_as(DistillSettings, "corpus_field")  # of every --corpus, as distill's
    queries: list[str] = setting(
        default_factory=list, path="data",
        help="Queries for the --corpus searches (.txt one a line, .jsonl), repeatable: one per --corpus, in order. "
             "Default: agreement queries made from the corpus (--agreement-from).")
    agreement_from: str = setting(
        "auto", choices=("auto", "sentence", "title", "passage"), renamed_from=("pseudo_queries",),
        help="Agreement queries made from a --corpus when no --queries: a passage's title, one sentence of a passage, or the passage "
             "itself (its own passage left out of the results); auto: title when the corpus has titles, else "
             "sentence where most passages have two or more, else the first half of a one-sentence text (10+ "
             "words), else the passage (5+ words).")
    corpus_queries: int = setting(200, min=1, renamed_from=("agreement_queries",),
                                  help="Agreement and known-item queries searched per --corpus, at most each (a "
                                       "seeded sample).")
    known_items: str = setting("auto", choices=("auto", "sentence", "title", "half"),
                               help="What a --corpus's known-item query is, cut out of its document: a sentence, "
                                    "the title, or the first half of a short text; auto: sentences where most "
                                    "documents have two or more, else titles, else halves.")
    precision: list[str] = setting(
        default_factory=list, cli_type=str, parse=parse_name_list,
        help="Also measure the candidate's vectors stored at these precisions, comma-separated: float32, int8, "
             "uint8, binary, ubinary (sentence-transformers' names): retrieval quality, agreement, bytes per vector "
             "and index size at each.")
    rescore: int = setting(0, min=0, help="Binary precisions: also search K x top-k by Hamming distance, re-ranked "
                                          "with the float query (0: no rescoring).")
    calibration: Optional[str] = setting(
        None, path="data",
        help="Sentences int8/uint8 ranges are fitted on when the candidate is not an export that stores them "
             "(export.json vector_calibration). Default: the calibration corpus shipped with espresso-export.")
    calibration_samples: int = setting(4096, min=2, help="Use at most this many calibration sentences.")
    dims: list[int] = setting(default_factory=list, cli_type=str, parse=lambda text: _int_list(text, "--dims"),
                              help="Also measure the candidate's vectors truncated to these widths (the leading "
                                   "dimensions, renormalised), comma-separated: retention of every metric at each.")
    relevant_score: float = setting(4.0, renamed_from=("retrieval_min_score",), help="STS-built retrieval: pairs scored at least this are relevant.")
    index: IndexKind = setting(IndexKind.FLAT, help="faiss index: flat (exact inner product) or ivf.")
    nlist: int = setting(100, min=1, help="IVF: number of k-means cells.")
    nprobe: int = setting(10, min=1, help="IVF: cells searched per query.")
    batch_sizes: list[int] = setting(default_factory=lambda: [1, 32], cli_type=str,
                                     parse=lambda text: [] if str(text).strip().lower() == "none"
                                     else parse_int_list(text, "--batch-sizes"),
                                     help="Latency batch sizes, comma-separated; none: no latency (a quality-only "
                                          "check).")
    threads: Optional[int] = setting(None, min=1, cpus=True, help=MEASURE_THREADS_HELP)
    latency_texts: int = setting(128, min=1, help="Texts timed per batch size and round (a fixed sample of the STS "
                                                  "sentences).")
    latency_rounds: int = setting(3, min=1, help="Timed rounds at least, per batch size (a round: every latency "
                                                 "text once through each model, taking turns batch by batch).")
    latency_budget: float = setting(20.0, min=0, help="Then more rounds, up to this many seconds per batch size, "
                                                      "until the speed-up's 95% CI is within +-3%.")
    min_sts_retention: Optional[float] = setting(None, renamed_from=("min_retention",),
                                                 help="Gate: candidate/source Spearman on every STS set must be at "
                                                      "least this.")
    max_latency_ratio: Optional[float] = setting(None, help="Gate: candidate/source time per batch (same round, "
                                                            "median over rounds: 1 / the speed-up) must be at most "
                                                            "this at every batch size.")
    min_retrieval_retention: Optional[float] = setting(None, help="Gate: candidate/source nDCG@10 on every retrieval "
                                                                  "set must be at least this.")
    min_agreement: Optional[float] = setting(None, help="Gate: agreement@10 with the source's ranking on every "
                                                        "--corpus must be at least this (0 to 1).")
    judgments: Optional[str] = setting(
        None, path="file",
        help="Your relevance judgments of --corpus query-document pairs: the --write-judging file filled in (relevance "
             "0 not relevant, 1 relevant, 2 highly, any number >= 0; null: not judged) or a TSV query_id, doc_id, "
             "relevance. Reports the judged retention on each corpus, the candidate's labelled nDCG@10 over the "
             "source's, on the queries whose pairs in both top 10s are all judged (others are skipped and counted). "
             "In auto: the final check judges the answer with them; they never choose it.")
    write_judging: Optional[str] = setting(
        None, path="dir",
        help="Write the pairs a judge (a person, an LLM, a cross-encoder) fills to compare the two models on each "
             "--corpus, as JSON lines with relevance null: per query, the documents of the source's and the "
             "candidate's top 10s, the queries in a random order set by their ids. A file holding any judgment is "
             "kept (exit 2). In auto: the answer's pairs, written by the final check.")
    judge_command: Optional[str] = setting(  # not in recipes: a recipe from elsewhere must not run a program
        None, recipe=False, help="Fill the --write-judging file by running this program, as espresso-export judge --command does "
                   "(an LLM or a cross-encoder behind a script: examples/judges/), then read it back as --judgments "
                   "in the same run. In auto (with --judged-choice) its judgments choose the answer; its time is "
                   "not planned in --time-budget.")
    judge_per_query: bool = setting(
        False, flags=("--judge-per-query/--judge-per-pair",),
        help="Run --judge-command once per query (judge --per-query: the query and its documents in, one relevance "
             "a line out) instead of once per pair.")
    min_judged_retention: Optional[float] = setting(None, help="Gate: the judged retention (--judgments or "
                                                               "--judge-command) on every --corpus must be at least "
                                                               "this.")
    within_noise: WithinNoise = setting(
        WithinNoise.VALUE, help="Gate: what a retention check whose 95% interval holds its threshold does (a set "
                                "too small to decide): value (decide on the measured value), pass (fail only when "
                                "the whole interval is below: a CI gate that does not flap) or fail (pass only when "
                                "the whole interval is at or above: a strict release gate).")
    max_noise: float = setting(MAX_NOISE, min=0.001, help="Gate: the widest half of a 95% interval a --corpus "
                               "estimate (agreement@10, known-item retention) may have and still decide its "
                               "threshold; wider, or fewer than 10 queries, and the check fails as undecided.")
    batch_size: int = setting(64, min=1, renamed_from=("encode_batch_size",), help="Sentences per forward pass.")
    cache: bool = setting(True, help="Keep the source's embeddings under $ESPRESSO_CACHE (default "
                                     "~/.cache/espresso-export), keyed by its files, the texts and the batch size, "
                                     "and reuse them on the next run.")
    seed: int = seed_setting("Random seed (which texts the latency is timed on; which queries --corpus searches).")
    trust_remote_code: bool = trust_remote_code_setting()
    cache_dir: Optional[str] = setting(None, cli=False, recipe=False,
                                       help="Where the source's embeddings are kept. Default: $ESPRESSO_CACHE, else "
                                            "~/.cache/espresso-export.")
    pooling: Optional[Pooling] = setting(None, cli=False, recipe=False, help=POOLING_HELP)

    def __post_init__(self) -> None:
        from espresso_export.core.errors import ValidationError

        check_choices(self)  # bounds, and --threads within the machine's CPUs
        check_across(self.sts, self.retrieval, self.batch_sizes, min_retrieval_retention=self.min_retrieval_retention,
                     max_latency_ratio=self.max_latency_ratio, min_sts_retention=self.min_sts_retention)
        if self.sts_columns is not None and len(self.sts_columns) != 3:
            raise ValidationError(f"--sts-columns needs three names (sentence1, sentence2, score), got "
                                  f"{','.join(self.sts_columns)}")
        check_vectors(self)

    @property
    def columns(self) -> tuple[str, str, str]:
        """The three STS column names: ``sts_columns``, else sentence1, sentence2, score."""
        from espresso_export.data.sts_sets import DEFAULT_COLUMNS

        return tuple(self.sts_columns) if self.sts_columns else DEFAULT_COLUMNS  # type: ignore[return-value]

    @property
    def thresholds(self):
        """The gate's part of the settings, as the report records it."""
        from espresso_export.verification.gate import Thresholds

        return Thresholds(min_sts_retention=self.min_sts_retention, max_latency_ratio=self.max_latency_ratio,
                          min_retrieval_retention=self.min_retrieval_retention, within_noise=self.within_noise,
                          min_agreement=self.min_agreement, max_noise=self.max_noise,
                          min_judged_retention=self.min_judged_retention)


def declared_default(name: str) -> Any:
    """The default of the setting ``name``, for the library's structured objects that take it (one declaration)."""
    from espresso_export.core.settings import field_of

    return field_of(VerifySettings, name).default


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"verify(): {old} is now {new} (a VerifySettings field); the old name will be removed in 1.0",
                  DeprecationWarning, stacklevel=4)


def legacy_keywords(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the old API's objects turned into settings, each with a DeprecationWarning naming the new
    ones: ``index=IndexOptions(...)`` and a ``thresholds=`` object (its fields are settings now). The two renamed
    fields are declared ``renamed_from`` on their settings, which :func:`~espresso_export.core.settings.resolve`
    honours."""
    out = dict(kwargs)
    index = out.get("index")
    if index is not None and hasattr(index, "nprobe"):  # an IndexOptions: three settings now
        _deprecated("index=IndexOptions(...)", "index, nlist and nprobe")
        out.update(index=index.kind, nlist=index.nlist, nprobe=index.nprobe)
    thresholds = out.pop("thresholds", None)
    if thresholds is not None:
        _deprecated("thresholds=Thresholds(...)", "min_sts_retention, max_latency_ratio, min_retrieval_retention "
                                                  "and "
                                                  "within_noise")
        out.update(thresholds.to_dict())
    return out


def legacy_options(**fields: Any) -> VerifySettings:
    """What ``VerifyOptions(...)`` made, as :class:`VerifySettings` (its old field names still accepted)."""
    warnings.warn("VerifyOptions is now VerifySettings; the old name will be removed in 1.0", DeprecationWarning,
                  stacklevel=2)
    from espresso_export.core.settings import resolve

    return resolve(VerifySettings, None, legacy_keywords(fields), call="VerifyOptions")
