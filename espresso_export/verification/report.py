"""The verify report: one dataclass, three views (JSON dict, rich tables, Markdown) and the gate
(its checks: :mod:`.gate`).

The tables are built once as :class:`Section` rows and rendered either to the
terminal or to Markdown for a model card, so both always show the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from rich.markup import escape

from espresso_export import __version__
from espresso_export.core.errors import GateFailedError
from espresso_export.core.formatting import byte_size, markdown_table, number, param_count, rounded
from espresso_export.core.metrics import ratio_interval, spearman_ratio_interval
from espresso_export.verification.latency_report import (
    LATENCY_HEADERS,
    UNRELIABLE,
    LatencyRow,
    LatencySetup,
    latency_dict,
    latency_footnotes,
    latency_rows,
    latency_title,
    ratio,
)
from espresso_export.verification.gate import Check, Thresholds, gate_checks, interval_list, noise_policy
from espresso_export.verification.retrieval import RetrievalScores, labels_note, missed
from espresso_export.verification.sts import retention


def _models_title(c: dict, s: dict) -> str:
    """The specs go in the title, not in a cell: a path or Hub id has no space a narrow column could break at."""
    title = f"models: candidate {c['spec']}, source {s['spec']}"
    runs = len(c.get("load_seconds_runs") or [])
    if runs and runs == len(s.get("load_seconds_runs") or []):
        title += f" (load time: median of {runs} warm loads, in turns)"
    return title


def _cache_cell(info: dict) -> str:
    if not info.get("used"):
        return "encoded (no cache)"
    if info.get("encoded_texts"):
        return "encoded, cached" if not info.get("reused_texts") else "partly from cache"
    return "from cache"


def _token_length_rows(v: dict) -> list[tuple[str, str]]:
    """Tokens the candidate's own tokenizer makes of the verify texts: a word whose token was removed splits
    into more pieces, so a pruned model does more work per text (and its latency shows it)."""
    cand, src = v.get("candidate_tokens"), v.get("tokens")
    if not cand or not src:
        return []
    return [("tokens of the verify texts, candidate's tokenizer", f"{cand:,} ({cand / src - 1:+.1%} vs source)")]


@dataclass(frozen=True)
class StsRow:
    name: str
    spec: str
    kind: str  # builtin / file / hub
    pairs: int
    candidate: float  # Spearman x100
    source: float
    # each pair's cosine under the candidate and the source, and its gold score: the retention interval's input
    cosines: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    subset_of: int | None = None  # the whole set's pairs when --sts-limit measured a subset

    @property
    def smoke(self) -> bool:
        return self.kind == "builtin"

    @property
    def retention(self) -> float | None:
        return retention(self.candidate, self.source)

    @cached_property
    def retention_ci95(self) -> tuple[float, float] | None:
        """95% interval of the retention over this set's pairs (paired bootstrap), or None."""
        return None if self.cosines is None or self.source <= 0 else spearman_ratio_interval(*self.cosines)

    def to_dict(self) -> dict:
        return {"name": self.name, "spec": self.spec, "kind": self.kind, "smoke_set": self.smoke,
                "pairs": self.pairs, "subset_of": self.subset_of, "candidate_spearman": rounded(self.candidate), "source_spearman": rounded(self.source),
                "retention": rounded(self.retention), "retention_ci95": interval_list(self.retention_ci95)}


@dataclass(frozen=True)
class RetrievalRow:
    name: str
    spec: str
    index: str
    candidate: RetrievalScores
    source: RetrievalScores

    @property
    def smoke(self) -> bool:
        """The built-in smoke set's pairs made into a retrieval set: a sanity check, not a benchmark."""
        from espresso_export.data import BUILTIN

        return self.spec == BUILTIN

    @property
    def mrr_retention(self) -> float | None:
        return retention(self.candidate.mrr_at_10, self.source.mrr_at_10)

    @property
    def ndcg_retention(self) -> float | None:
        """Candidate/source nDCG@10: what the retrieval gate checks."""
        return retention(self.candidate.ndcg_at_10, self.source.ndcg_at_10)

    def retention_interval(self, score: str) -> tuple[float, float] | None:
        """95% interval of the ``score`` retention over this set's queries (paired bootstrap), or None."""
        c, s = self.candidate.column(score), self.source.column(score)
        return None if c is None or s is None else ratio_interval(c, s)

    @cached_property
    def ndcg_retention_ci95(self) -> tuple[float, float] | None:
        return self.retention_interval("ndcg_at_10")

    @cached_property
    def recall_at_100_retention_ci95(self) -> tuple[float, float] | None:
        return self.retention_interval("recall_at_100")

    def interval_note(self) -> str | None:
        """What the retention intervals say, for under the set's table."""
        ndcg, recall = self.ndcg_retention_ci95, self.recall_at_100_retention_ci95
        if ndcg is None:
            return None
        note = f"retention, 95% interval over the {self.candidate.queries} queries (paired bootstrap): " \
               f"nDCG@10 {ndcg[0]:.3f}-{ndcg[1]:.3f}"
        return note + (f", recall@100 {recall[0]:.3f}-{recall[1]:.3f}" if recall else "")

    def to_dict(self) -> dict:
        c, s = self.candidate, self.source
        return {"name": self.name, "spec": self.spec, "smoke_set": self.smoke, "index": self.index,
                "queries": c.queries, "docs": c.docs, "candidate": c.to_dict(), "source": s.to_dict(),
                "source_missed": missed(s), "labels_note": labels_note(s), "ndcg_retention": rounded(self.ndcg_retention),
                "ndcg_retention_ci95": interval_list(self.ndcg_retention_ci95),
                "recall_at_100_retention": rounded(retention(c.recall_at_100, s.recall_at_100)),
                "recall_at_100_retention_ci95": interval_list(self.recall_at_100_retention_ci95),
                "mrr_retention": rounded(self.mrr_retention),
                "recall_retention": rounded(retention(c.recall_at_10, s.recall_at_10)),
                "index_bytes_ratio": rounded(ratio(c.index_bytes, s.index_bytes)),
                "query_time_ratio": rounded(ratio(c.query_ms_per_query, s.query_ms_per_query))}


@dataclass(frozen=True)
class Section:
    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    footnotes: Sequence[str] = ()


@dataclass
class VerifyReport:
    candidate: dict  # Embedder.info()
    source: dict
    threads: int
    sts: list[StsRow]
    latency: list[LatencyRow]
    latency_setup: LatencySetup
    retrieval: list[RetrievalRow]
    thresholds: Thresholds = field(default_factory=Thresholds)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    vocabulary: dict | None = None  # a pruned candidate: token coverage of the verify texts (pruning.coverage)
    source_cache: dict | None = None  # EncodeCache.info() of the source: were its vectors read from disk
    nonfinite: dict[str, int] = field(default_factory=dict)  # role -> texts whose vector holds NaN or inf
    agreement: list = field(default_factory=list)  # AgreementRow per --corpus (.corpus_agreement)
    vectors: object = None  # --precision / --dims: a VectorReport (.vectors_report)
    judged: list = field(default_factory=list)  # JudgedRow per --corpus, from --judgments (.judging)
    estimate_error: dict | None = None  # with a known-item retention: its measured error for this kind (.estimate_error)

    # --- derived numbers ---------------------------------------------------------------------------
    @property
    def sts_average(self) -> dict | None:
        if not self.sts:
            return None
        cand = sum(r.candidate for r in self.sts) / len(self.sts)
        src = sum(r.source for r in self.sts) / len(self.sts)
        return {"candidate_spearman": rounded(cand), "source_spearman": rounded(src), "retention": rounded(retention(cand, src))}

    @property
    def size(self) -> dict:
        c, s = self.candidate, self.source
        return {key: rounded(ratio(c.get(key), s.get(key)))
                for key in ("n_params", "disk_bytes", "bytes_per_vector", "load_seconds")}

    @property
    def checks(self) -> list[Check]:
        return gate_checks(self, self.thresholds)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def raise_for_gate(self) -> None:
        """Raise :class:`GateFailedError` (exit code 3) naming every threshold that does not hold."""
        failed = self.failed
        if failed:
            raise GateFailedError("quality gate failed: " + "; ".join(c.describe() for c in failed))

    # --- views -------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "espresso_version": __version__,
            "candidate": self.candidate,
            "source": self.source,
            "size_ratios": self.size,
            "sts": {"sets": [r.to_dict() for r in self.sts], "average": self.sts_average},
            "latency": latency_dict(self.latency, self.latency_setup),
            "source_cache": self.source_cache,
            "retrieval": [r.to_dict() for r in self.retrieval],
            "vocabulary": self.vocabulary,
            "agreement": [r.to_dict() for r in self.agreement],
            "vectors": self.vectors.to_dict() if self.vectors else None,
            "judged": [r.to_dict() for r in self.judged],
            "estimate_error": self.estimate_error,
            "gate": {"thresholds": self.thresholds.to_dict(), "passed": self.passed,
                     "checks": [c.to_dict() for c in self.checks], "failed": [c.name for c in self.failed]},
            "notes": self.notes,
            "seconds": round(self.seconds, 2),
        }

    def sections(self) -> list[Section]:
        c, s, r = self.candidate, self.source, self.size
        out = [Section(_models_title(c, s), ("", "candidate", "source", "ratio"), [
            ("format", c["kind"], s["kind"], ""),
            ("parameters", param_count(c["n_params"]), param_count(s["n_params"]), number(r["n_params"], ".3f")),
            ("bytes on disk", byte_size(c["disk_bytes"]), byte_size(s["disk_bytes"]), number(r["disk_bytes"], ".3f")),
            ("bytes per vector", f"{c['bytes_per_vector']} ({c['dim']}-d float32)",
             f"{s['bytes_per_vector']} ({s['dim']}-d float32)", number(r["bytes_per_vector"], ".3f")),
            ("load time", f"{c['load_seconds']:.2f} s", f"{s['load_seconds']:.2f} s", number(r["load_seconds"])),
            *([("vectors", "encoded", _cache_cell(self.source_cache), "")] if self.source_cache else []),
        ])]
        if self.sts:
            rows = [(row.name, str(row.pairs), f"{row.candidate:.2f}", f"{row.source:.2f}", number(row.retention, ".4f"))
                    for row in self.sts]
            if len(self.sts) > 1:
                avg = self.sts_average
                rows.append(("average", "", f"{avg['candidate_spearman']:.2f}", f"{avg['source_spearman']:.2f}",
                             number(avg["retention"], ".4f")))
            notes = [f"{row.name}: {ci[0]:.3f}-{ci[1]:.3f}" for row in self.sts
                     for ci in (row.retention_ci95,) if ci is not None]
            out.append(Section("STS: Spearman x100 of cosine vs gold",
                               ("set", "pairs", "candidate", "source", "retention"), rows,
                               ["retention, 95% interval over the pairs (paired bootstrap): " + "; ".join(notes)]
                               if notes else []))
        if self.latency:
            out.append(Section(latency_title(self.latency_setup, self.latency), LATENCY_HEADERS,
                               latency_rows(self.latency), latency_footnotes(self.latency)))
        for row in self.retrieval:
            cs, ss = row.candidate, row.source
            out.append(Section(
                f"retrieval: {row.name} ({cs.queries} queries, {cs.docs} docs, faiss {row.index})",
                ("", "candidate", "source", "ratio"),
                [("nDCG@10", f"{cs.ndcg_at_10:.4f}", f"{ss.ndcg_at_10:.4f}", number(row.ndcg_retention, ".4f")),
                 ("recall@100", f"{cs.recall_at_100:.4f}", f"{ss.recall_at_100:.4f}",
                  number(retention(cs.recall_at_100, ss.recall_at_100), ".4f")),
                 ("MRR@10", f"{cs.mrr_at_10:.4f}", f"{ss.mrr_at_10:.4f}", number(row.mrr_retention, ".4f")),
                 ("recall@10", f"{cs.recall_at_10:.4f}", f"{ss.recall_at_10:.4f}",
                  number(retention(cs.recall_at_10, ss.recall_at_10), ".4f")),
                 ("index memory", byte_size(cs.index_bytes), byte_size(ss.index_bytes),
                  number(ratio(cs.index_bytes, ss.index_bytes), ".3f")),
                 ("query time (ms/query)", f"{cs.query_ms_per_query:.4f}", f"{ss.query_ms_per_query:.4f}",
                  number(ratio(cs.query_ms_per_query, ss.query_ms_per_query), ".3f"))],
                [note for note in (row.interval_note(), labels_note(row.source)) if note]))
        from espresso_export.verification.judging import judged_sections
        from espresso_export.verification.vectors_report import vector_sections

        out += vector_sections(self.agreement, self.vectors) + judged_sections(self.judged)
        v = self.vocabulary
        if v and v.get("computed"):
            out.append(Section(
                f"vocabulary: the candidate's was pruned from {v['vocab_size_before']:,} to {v['vocab_size_after']:,} tokens",
                ("", "value"),
                [("tokens of the verify texts covered", f"{v['coverage']:.4f} ({v['covered_tokens']:,} of {v['tokens']:,})"),
                 ("distinct tokens covered", f"{v['distinct_covered']:,} of {v['distinct_tokens']:,}"),
                 ("coverage of the pruning corpus", number(v.get("pruning_corpus_coverage"), ".4f")),
                 *_token_length_rows(v)]))
        out.append(self._gate_section())
        return out

    def _gate_section(self) -> Section:
        checks = self.checks
        noisy = [ch.name for ch in checks if ch.within_noise]
        unsure = [ch.name for ch in checks if not ch.reliable]
        return Section(
            "gate" + ("" if checks else ": no thresholds given"), ("check", "threshold", "value", "result"),
            [(ch.name, ch.threshold, ch.cell(), "pass" if ch.passed else "FAIL") for ch in checks],
            ([f"within the noise of its set or timing (the 95% interval holds the threshold; more pairs, queries or "
              f"timing rounds would decide it): {', '.join(noisy)}" + noise_policy(self.thresholds)] if noisy else [])
            + ([f"? timing NOT reliable (see the latency table): {', '.join(unsure)}" + noise_policy(self.thresholds)]
               if unsure else []))

    def to_markdown(self) -> str:
        lines = ["## Verification", "",
                 f"`{self.candidate['spec']}` measured against `{self.source['spec']}` with espresso-export "
                 f"{__version__} (`espresso-export verify`), in one process, {self.threads} thread(s).", ""]
        for sec in self.sections():
            lines += [f"### {sec.title[0].upper()}{sec.title[1:]}", ""]
            if sec.rows:
                lines += markdown_table(sec.headers, sec.rows)
            if sec.footnotes:
                lines += [*sec.footnotes, ""]
        verdict = "passed" if self.passed else "FAILED: " + "; ".join(c.describe() for c in self.failed)
        lines += [f"Gate: **{verdict}**." if self.checks else "No gate thresholds were given.", ""]
        lines += [f"> {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def print(self, console=None) -> None:
        """The tables on ``console`` (default: stdout's); they stay readable at 80 columns."""
        from rich.table import Table

        from espresso_export.core.console import out_console

        console = console or out_console()
        for sec in self.sections():
            if not sec.rows:
                console.print(f"[bold]{sec.title}[/]")
                continue
            table = Table(title=sec.title, title_justify="left")
            for h in sec.headers:
                table.add_column(h, justify="left" if h in ("", "set", "check", "threshold", "model", "vectors") else "right",
                                 overflow="fold")  # a long path folds; it is never cut to "..."
            for row in sec.rows:
                table.add_row(*[("[bold red]FAIL[/]" if v == "FAIL" else str(v)) for v in row])
            console.print(table)
            for note in sec.footnotes:
                style = "yellow" if note.startswith(UNRELIABLE) else "dim"
                console.print(f"[{style}]{escape(note)}[/]", highlight=False)
        if self.checks:
            console.print("[bold green]gate passed[/]" if self.passed else
                          "[bold red]gate failed:[/] " + "; ".join(c.describe() for c in self.failed), highlight=False)
        for note in self.notes:
            console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def check_report_path(path: Path, kind: str) -> None:
    """Before measuring, so a bad ``--json``/``--markdown`` path fails at once (exit 2) and not after the
    measurement: the file must be writable, and may replace only a previous report (JSON with the report's keys,
    Markdown opening with its heading), a FIFO or a device, never another file of the user's."""
    from espresso_export.core.errors import ValidationError

    path = Path(path).expanduser()
    if path.is_dir():
        raise ValidationError(f"--{kind} {path} is a folder; give a file name")
    if path.exists() and not path.is_file():  # a FIFO, a device, /dev/stdout: written into
        if not os.access(path, os.W_OK):
            raise ValidationError(f"--{kind} {path} is not writable")
        return
    _check_folder_writable(path, kind)
    if path.exists() and not _is_report(path, kind):
        raise ValidationError(f"--{kind} {path} exists and is not a verify report; it is kept: remove it or give "
                              "another file name")


def _check_folder_writable(path: Path, kind: str) -> None:
    """The report is written beside ``path`` and renamed into place: its folder (or the nearest existing folder
    above it, where the missing ones will be made) must be a folder this process can write in."""
    from espresso_export.core.errors import ValidationError

    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ValidationError(f"--{kind} {path} cannot be written: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValidationError(f"--{kind} {path} cannot be written: no permission to write in {folder}")


def _is_report(path: Path, kind: str) -> bool:
    """Whether the file at ``path`` is a report this command wrote (so replacing it loses nothing)."""
    import json

    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 20).decode("utf-8")
        if kind == "markdown":
            return head.startswith("## Verification")
        data = json.loads(head) if len(head) < (1 << 20) else None
        return isinstance(data, dict) and "espresso_version" in data and "gate" in data and "sts" in data
    except (OSError, UnicodeDecodeError, ValueError):
        return False
