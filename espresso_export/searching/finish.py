"""The end of ``auto``: choose the answer, build it into the output folder (model, int8 export where int8 keeps the
target, the final check against the source on the user's data, card, a recipe ``run`` rebuilds it from) and
write the search's record.

Output folder::

    model/            the answer, a sentence-transformers folder (a static answer: model2vec's format)
    export/           its ONNX export (int8 where it keeps the target)
    verify.json       verify's report: the user's corpus, queries and labelled sets against the source
    README.md         the model card
    recipe.yaml       `espresso-export run recipe.yaml` rebuilds the model (the texts it reads beside it)
    auto.json/.csv    every candidate's measured numbers; auto.png the trade-off
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from espresso_export.core.files import atomic_output, write_text_atomic
from espresso_export.core.types import AutoObjective
from espresso_export.core.vectors import l2_normalised
from espresso_export.searching.answer import Answer, best_reached, choose
from espresso_export.searching.auto_result import AutoResult, above_error, measured_on, within_error
from espresso_export.searching.candidates import Candidate, Heal, find
from espresso_export.searching.context import Context
from espresso_export.searching.final_check import (
    below_on_all,
    belief_lines,
    form_on_all_documents,
    run_verify,
    verdict,
)
from espresso_export.searching.judged_choice import best_judged, choose_judged
from espresso_export.searching.plain_cuts import rebuild_plain
from espresso_export.searching.recipe_file import write_recipe
from espresso_export.searching.scoring import Vectors
from espresso_export.searching.vocab import describe, prune_answer
from espresso_export.verification.estimate_error import error_line

MAX_ANSWERS = 3  # candidates built and checked in full, at most, when the sample's choice misses on all documents
ANSWER_PARTS = ("model", "export", "verify.json")
INT8_SLACK = 0.01  # judged choice: int8 weights kept when their known-item retention is within this of float32's
SECOND = ".second-answer"  # where a second answer is built beside the first, in the output's temp folder


@dataclass(frozen=True)
class Built:
    """An answer built into a folder (:data:`ANSWER_PARTS`) and judged there: its stored form as the final check
    chose it, the export's weights, the verdict, the vocabulary pruned, and what building it said."""

    answer: Answer
    export: dict
    verify: dict
    vocabulary: dict | None
    hints: tuple[str, ...] = ()

    @property
    def below(self) -> bool:
        """Its known-item retention on all the documents misses the target somewhere."""
        return bool(self.verify["known_item_below"])


def finish(ctx: Context, cands: list[Candidate], out: Path, *, overwrite: bool) -> AutoResult:
    """Build, export and check the answer. When its known-item retention on all the documents is below the target
    (the search's sample flattered it), the next cheapest heal that kept the target on the sample is checked the
    same way, until one keeps it on all of them, up to :data:`MAX_ANSWERS` in all (the last checked is the
    answer); for bytes per vector, also when the answer stores more bytes on all of them than the next one did
    on the sample (:func:`_second_answer`). Labelled sets only judge: a labelled gate missed is reported, never a
    reason to choose another."""
    s = ctx.settings
    began = time.perf_counter()
    answer, checks = choose_judged(ctx, cands) if s.judged_choice else (choose(cands, s, ctx.queries), None)
    s = ctx.settings  # --judge-command: the pairs it filled are now the judgments (judged_choice._judged_by_command)
    reached = answer or (best_judged(checks) if checks else None) or best_reached(cands, s, ctx.queries)
    result = AutoResult.of(ctx, cands, reached, met=answer is not None, judged=checks)
    near = within_error(cands, s, answer, with_queries=result.with_queries)
    with atomic_output(out, overwrite=overwrite, inputs=[ctx.source]) as tmp:
        built, hints = _checked(ctx, cands, answer, tmp) if answer is not None else (None, [])
        result.hints += hints
        if built is not None:
            result.answer, result.export, result.verify = built.answer, built.export, built.verify
            result.vocabulary = built.vocabulary
            result.hints += [f"{line}: within its noise, not failed" for line in built.verify["within_noise"]]
            result.hints += [f"{line}: reported, not gating (your judgments chose)"
                             for line in built.verify["not_gating"]]
            result.hints += belief_lines(built.verify) + built.verify["labels"]
            result.hints.append(error_line(result.estimate_error))
            high = above_error(cands, s, built.answer, with_queries=result.with_queries)
            result.hints += [high] if high else []
            if built.vocabulary is not None:
                result.hints.append(describe(built.vocabulary))
            cand = find(cands, built.answer.name)
            _card(tmp / "model", tmp / "export", tmp / "verify.json", tmp, f"{Path(ctx.source).name}-auto")
            write_recipe(ctx, cand, built.answer, built.export["weights"], tmp)
        result.hints += [near] if near else []
        result.output = out
        now = time.perf_counter()
        result.seconds = now - ctx.start
        result.timing = {"budget_seconds": s.budget_seconds, "finish_estimated_seconds": round(ctx.reserve, 1),
                         "finish_seconds": round(now - began, 1), "seconds": round(result.seconds, 1)}
        result.write(tmp)
    return result


def _checked(ctx: Context, cands: list[Candidate], answer: Answer, tmp: Path) -> tuple[Built, list[str]]:
    """The answer built in ``tmp`` and checked; the next cheapest in its place while it misses on all the
    documents (:data:`MAX_ANSWERS` at most); what the checks said."""
    s, hints = ctx.settings, []
    tried: set[tuple[str, str]] = set()
    while True:
        built = _build(ctx, cands, answer, tmp)
        hints += built.hints
        if s.judged_choice:  # chosen on the judgments: the final check judges it, the estimate only reports
            return built, hints
        tried.add((built.answer.name, built.answer.heal))
        nxt = choose(cands, s, ctx.queries, exclude=tried) if len(tried) < MAX_ANSWERS else None
        if nxt is not None and not built.below and _fewer_bytes(ctx, nxt, built.answer):
            built, note = _second_answer(ctx, cands, built, nxt, tmp)
            return built, hints + note
        if not built.below or nxt is None:
            return built, hints
        hints.append(f"{built.answer.describe()} kept {built.answer.form.retention:.3f} on "
                     f"{measured_on(built.answer.measured)} but {below_on_all(built.verify)}, less than "
                     f"{s.min_retention:g}: checked the next cheapest, {nxt.describe()}")
        _remove_parts(tmp)
        answer = nxt


def _build(ctx: Context, cands: list[Candidate], answer: Answer, folder: Path) -> Built:
    """``answer`` built into ``folder``, exported, verified and judged; for bytes per vector its stored form
    chosen again on all the documents."""
    s = ctx.settings
    folder.mkdir(exist_ok=True)
    cand = find(cands, answer.name)
    _build_model(ctx, cand, answer.measured, folder / "model")
    # a static answer keeps its table whole: the corpus's words were added to it, and a row is all it costs
    vocabulary = prune_answer(ctx, folder / "model") if s.pruning and not cand.is_static else None
    export = _export(ctx, folder / "model", folder / "export")
    report = run_verify(ctx, folder / "export", answer.form, answer.measured.score.dim)  # the answer's own width
    write_text_atomic(folder / "verify.json", json.dumps(report.to_dict(), indent=2) + "\n")
    hints = []
    if s.objective is AutoObjective.BYTES_PER_VECTOR:
        form = form_on_all_documents(report, s.min_retention, s.precision)
        if form is not None and form.form != answer.form.form:
            hints.append(f"stored form chosen again on all the documents: {answer.form.describe()} kept "
                         f"{answer.form.retention:.3f} on {measured_on(answer.measured)}; {form.describe()} keeps "
                         f"{form.retention:.3f} on all of them, the fewest bytes that do")
            answer = answer.with_form(form)
    judged = verdict(report, s.min_retention, answer.form, bool(s.sts), s.max_noise,
                     known_item_gates=not s.judged_choice)
    return Built(answer, export, judged, vocabulary, tuple(hints))


def _build_model(ctx: Context, cand: Candidate, heal: Heal, folder: Path) -> None:
    if heal.folder is not None:
        shutil.copytree(heal.folder, folder)
        return
    if not cand.is_cut:  # the student as it comes: its folder (an alias or Hub id resolved to one)
        from espresso_export.model.checkpoint import resolve

        shutil.copytree(resolve(cand.student)[1], folder)
        return
    rebuild_plain(ctx, cand, folder)


def _export(ctx: Context, model: Path, folder: Path) -> dict:
    """Export with int8 weights; keep int8 when its known-item retention keeps the target, else float32."""
    from espresso_export.exporting.export import export
    from espresso_export.runtime import OnnxEncoder

    export(model, folder, quantize="int8")
    measured = {}
    sample = ctx.sample
    for name, file in (("int8", None), ("float32", "onnx/model.onnx")):
        enc = OnnxEncoder(folder, file=file)
        texts = (sample.queries.texts, sample.documents, sample.queries.targets)
        asked = l2_normalised(enc.encode(sample.asked)) if sample.asked else None
        measured[name] = ctx.scorer.score(Vectors(*(l2_normalised(enc.encode(t)) for t in texts), asked))
    bar = ctx.settings.min_retention
    if ctx.settings.judged_choice:  # the estimate's level is not what chose: int8 may lose little of float32's
        bar = min(bar, measured["float32"].retention - INT8_SLACK)
    weights = "int8" if measured["int8"].retention >= bar else "float32"
    if weights == "float32":
        shutil.rmtree(folder)
        export(model, folder)
    return {"weights": weights, "measured": {name: score.to_dict() for name, score in measured.items()}}


def _fewer_bytes(ctx: Context, nxt: Answer, answer: Answer) -> bool:
    """For bytes per vector: the next answer stored fewer bytes on the sample than this one does on all the
    documents (its form chosen again there), so it may store fewer there too."""
    return ctx.settings.objective is AutoObjective.BYTES_PER_VECTOR and \
        nxt.form.bytes_per_vector < answer.form.bytes_per_vector


def _second_answer(ctx: Context, cands: list[Candidate], first: Built, nxt: Answer, tmp: Path
                   ) -> tuple[Built, list[str]]:
    """``nxt`` built and checked beside the answer built in ``tmp``; the one storing fewer bytes per vector on all
    the documents (while keeping the target there) is kept in ``tmp``, the other deleted."""
    beside = tmp / SECOND
    second = _build(ctx, cands, nxt, beside)
    better = not second.below and second.answer.form.bytes_per_vector < first.answer.form.bytes_per_vector
    note = (f"{nxt.describe()} stored {nxt.form.bytes_per_vector} bytes on {measured_on(nxt.measured)}, fewer than "
            f"{first.answer.describe()} stores on all the documents ({first.answer.form.describe()}): checked it "
            "too; ")
    if better:
        _remove_parts(tmp)
        for part in ANSWER_PARTS:
            shutil.move(str(beside / part), tmp / part)
        shutil.rmtree(beside)
        return second, [*second.hints, note + f"it keeps the target there at {second.answer.form.describe()}, the "
                                              "answer"]
    shutil.rmtree(beside)
    kept = "on all of them it misses the target" if second.below else \
        f"on all of them it stores {second.answer.form.describe()}"
    return first, [note + kept + f": {first.answer.name} stays the answer"]


def _remove_parts(folder: Path) -> None:
    for part in ANSWER_PARTS:
        path = folder / part
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _card(model: Path, export_dir: Path, report: Path, tmp: Path, name: str) -> None:
    from espresso_export.publishing.push import push

    staging = tmp / ".card"
    push(model, f"your-name/{name}", onnx=export_dir, verify_report=report, dry_run=staging)
    shutil.move(str(staging / "README.md"), tmp / "README.md")
    shutil.rmtree(staging)
