"""The end of ``auto``: pick the winner, build it into the output folder (model, int8 export where int8 keeps the
target, verification against the source on the user's data, card, a recipe ``run`` rebuilds it from) and write
the search's record.

Output folder::

    model/            the winner, a sentence-transformers folder
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
from dataclasses import replace
from pathlib import Path

from espresso_export.core.evidence import undecided
from espresso_export.core.files import atomic_output, write_text_atomic
from espresso_export.core.vectors import l2_normalised
from espresso_export.searching import candidates as C
from espresso_export.searching.auto_result import AutoResult, Pick, measured_on
from espresso_export.searching.budget import LATENCY_BUDGET
from espresso_export.searching.evaluation import RESCORE, Vectors


def decided(score: dict, queries: int, settings) -> bool:
    """Whether a stage's (or stored form's) known-item score over ``queries`` may decide the target: enough
    queries and a 95% interval no wider than ``--max-noise`` (:func:`~espresso_export.core.evidence.undecided`).
    A score that cannot is never an answer, however high it reads."""
    return undecided(queries, score.get("ci95"), settings.max_noise) is None


def pick(cands: list[C.Candidate], settings, queries: int, exclude=frozenset()) -> Pick | None:
    """The cheapest measured stage of any candidate that keeps the target (and the latency gate) by a score that
    decides it (:func:`decided`, over the search's ``queries``), by the objective; ties go to the better score.
    ``exclude``: (candidate, stage) pairs already tried."""
    target, objective = settings.min_retention, settings.objective.value
    found = []
    for cand in cands:
        if settings.max_latency_ratio is not None and cand.latency_ratio > settings.max_latency_ratio:
            continue
        for stage, score in cand.scores.items():
            if (cand.name, stage) in exclude:
                continue
            if objective == "bytes-per-vector":
                forms = [v for v in score.get("variants", []) if decided(v, queries, settings)]
                variant = C.cheapest_variant(forms, target, settings.precision)
            else:
                variant = score if score["retention"] >= target and decided(score, queries, settings) else None
            if variant is not None:
                key = C.cost(cand, objective, score, target, settings.precision)
                found.append((key, -score["retention"], cand.name, stage, variant))
    if not found:
        return None
    _, _, name, stage, variant = min(found, key=lambda f: (f[0], f[1]))
    cand = next(c for c in cands if c.name == name)
    return Pick(cand.name, stage, cand.scores[stage], variant)


def _best_effort(cands: list[C.Candidate], settings, queries: int) -> Pick | None:
    """Nothing kept the target: the best stage whose score decides (else the best scored), shown as what the
    search reached."""
    stages = [(decided(score, queries, settings), score["retention"], c, k) for c in cands
              for k, score in c.scores.items()]
    if not stages:
        return None
    *_, cand, stage = max(stages, key=lambda s: s[:2])
    return Pick(cand.name, stage, cand.scores[stage], cand.scores[stage])


def _build_model(ctx, cand: C.Candidate, stage: dict, folder: Path) -> None:
    if "folder" in stage:
        shutil.copytree(stage["folder"], folder)
        return
    if cand.student is not None:  # the student as it comes: its folder (an alias or Hub id resolved to one)
        from espresso_export.model.checkpoint import resolve

        shutil.copytree(resolve(cand.student)[1], folder)
        return
    from espresso_export.searching.recipe_file import rebuild_plain

    rebuild_plain(ctx, cand, folder)


def _export(ctx, model: Path, folder: Path) -> dict:
    """Export with int8 weights; keep int8 when its known-item retention keeps the target, else float32."""
    from espresso_export.exporting.export import export
    from espresso_export.runtime import OnnxEncoder

    export(model, folder, quantize="int8")
    measured = {}
    for name, file in (("int8", None), ("float32", "onnx/model.onnx")):
        enc = OnnxEncoder(folder, file=file)
        ev = ctx.scorer.ev
        v = Vectors(*(l2_normalised(enc.encode(t)) for t in (ev.cloze.texts, ev.passages, ev.cloze.targets)))
        measured[name] = ctx.scorer.score(v).to_dict()
    weights = "int8" if measured["int8"]["retention"] >= ctx.settings.min_retention else "float32"
    if weights == "float32":
        shutil.rmtree(folder)
        export(model, folder)
    return {"weights": weights, "measured": measured}


def _verify(ctx, export_dir: Path, chosen: dict, width: int):
    """verify against the source: the chosen stored form, or for bytes per vector every form (the search scored
    them on a sample; :func:`_full_corpus_form` chooses again on all the documents, where searching is cheap)."""
    from espresso_export.verification.verify import verify

    s = ctx.settings
    if s.objective.value == "bytes-per-vector":
        dims = [d for d in C.nested_widths(width) if d < width]
        precision = list(dict.fromkeys(["float32", *s.precision]))
    else:
        dims = [chosen["dim"]] if chosen["dim"] < width else []
        precision = list(dict.fromkeys(["float32", chosen["precision"]]))
    return verify(str(export_dir), ctx.source, corpus=list(s.corpus), corpus_field=s.corpus_field,
                  queries=list(s.queries),
                  retrieval=list(s.retrieval), sts=list(s.sts) or ["builtin"], dims=dims, precision=precision,
                  rescore=RESCORE if "binary" in precision else 0,
                  min_retention=s.min_retention if s.sts else None,
                  min_retrieval_retention=s.min_retention if s.retrieval else None,
                  max_latency_ratio=s.max_latency_ratio, threads=s.threads, known_items=s.known_items,
                  agreement_queries=s.check_queries, seed=s.seed,
                  latency_budget=LATENCY_BUDGET,  # short: the search already spent the budget
                  progress=ctx.progress)


def _form(chosen: dict) -> tuple[str, int, int]:
    return chosen["precision"], chosen["dim"], RESCORE if chosen["precision"] == "binary" else 0


def _as_stored(report, target: float, chosen: dict, sts_gated: bool) -> list[str]:
    """verify gates the float vectors at full width; the answer may store narrower or smaller ones: every
    labelled retrieval set (and STS set given with ``--sts``) judged again as the index will hold them."""
    precision, dim, rescore = _form(chosen)
    form = f"{dim}-d {precision}" + (f", rescored {rescore}x" if rescore else "")
    vectors = report.vectors
    if vectors is None:
        return []
    missed = []
    for row in vectors.retrieval:
        for r in row.results:
            v = r.variant
            if (v.precision, v.dim, v.rescore) == (precision, dim, rescore) and r.retention is not None \
                    and r.retention < target:
                missed.append(f"nDCG@10 retention on {row.name} of the vectors as stored ({form}) = "
                              f"{r.retention:.3f}, needs >= {target:g}")
    for row in vectors.sts if sts_gated else []:
        if row.dim == dim and row.retention is not None and row.retention < target:
            missed.append(f"STS retention on {row.name} at {dim} dims = {row.retention:.3f}, needs >= {target:g}")
    return missed


def _full_corpus_form(report, target: float, precisions) -> dict | None:
    """The fewest bytes per vector of a stored form (binary: rescored, as searched) whose known-item retention
    keeps ``target`` on every corpus in full; None when none does."""
    found: dict[tuple, list] = {}
    for row in report.agreement:
        for r in row.results:
            v = r.variant
            if r.known_item and (v.precision != "binary" or v.rescore == RESCORE):
                found.setdefault((v.precision, v.dim, v.bytes_per_vector), []).append(r.known_item["retention"])
    forms = [{"dim": d, "precision": p, "bytes_per_vector": b, "retention": min(kept), "measured_on": "all documents"}
             for (p, d, b), kept in found.items()]
    return C.cheapest_variant(forms, target, precisions)


def _describe(form: dict) -> str:
    return f"{form['dim']}-d {form['precision']} ({form['bytes_per_vector']} bytes)"


def _stored_known_item(row, chosen: dict) -> dict | None:
    """A corpus' known-item retention with its documents stored as the answer stores them."""
    for r in row.results:
        if (r.variant.precision, r.variant.dim, r.variant.rescore) == _form(chosen) and r.known_item:
            return r.known_item
    return row.known_item


def _verdict(report, target: float, chosen: dict, sts_gated: bool, max_noise: float) -> dict:
    """verify's gate, each labelled set again for the vectors as stored, and the known-item retention on every
    corpus in full (the search scored a sample), also as stored: a corpus whose whole 95% interval lies below
    the target fails; one below it within its noise is noted."""
    known = [(a.name, _stored_known_item(a, chosen)) for a in report.agreement if a.known_item]
    missed, noted = _as_stored(report, target, chosen, sts_gated), []
    unsure = {name: why for name, k in known if (why := undecided(k["queries"], k.get("ci95"), max_noise))}
    below = [name for name, k in known if k["retention"] < target or name in unsure]
    for name, k in known:
        if name in unsure:
            missed.append(f"known-item retention on all of {name} = {k['retention']:.3f}, undecided: "
                          f"{unsure[name]} (give more documents, --check-queries, or --max-noise)")
            continue
        if k["retention"] >= target:
            continue
        line = f"known-item retention on all of {name} = {k['retention']:.3f}, needs >= {target:g}"
        iv = k.get("ci95")
        (noted if iv and iv[1] >= target else missed).append(line + (f" (95% interval {iv[0]:.3f}-{iv[1]:.3f})"
                                                                     if iv else ""))
    return {"passed": report.passed and not missed, "failed": [c.describe() for c in report.failed] + missed,
            "within_noise": noted, "known_item": {name: k for name, k in known}, "known_item_below": below}


def _card(model: Path, export_dir: Path, report: Path, tmp: Path, name: str) -> None:
    from espresso_export.publishing.push import push

    stage = tmp / ".card"
    push(model, f"your-name/{name}", onnx=export_dir, verify_report=report, dry_run=stage)
    shutil.move(str(stage / "README.md"), tmp / "README.md")
    shutil.rmtree(stage)


MAX_ANSWERS = 3  # candidates built and checked in full, at most, when the sample's choice misses on all documents


def finish(ctx, cands: list[C.Candidate], out: Path, *, overwrite: bool) -> AutoResult:
    """Build, export and verify the winner. When its known-item retention on all the documents is below the target
    (the search's sample flattered it), the next cheapest stage that kept the target on the sample is checked
    the same way, until one keeps it on all of them, up to :data:`MAX_ANSWERS` in all (the last checked is the
    answer); for bytes per vector, also when the answer stores more bytes on all of them than the next pick did
    on the sample (:func:`_second_answer`). Labelled sets only judge: a labelled gate missed is reported, never a
    reason to choose another."""
    from espresso_export.searching.recipe_file import write_recipe

    s = ctx.settings
    began = time.perf_counter()
    queries = len(ctx.scorer.ev.cloze)
    winner = pick(cands, s, queries)
    result = AutoResult.of(ctx, cands, winner or _best_effort(cands, s, queries), met=winner is not None)
    with atomic_output(out, overwrite=overwrite, inputs=[ctx.source]) as tmp:
        tried: set[tuple[str, str]] = set()
        while winner is not None:
            cand = next(c for c in cands if c.name == winner.name)
            winner = _answer(ctx, cand, winner, tmp, result)
            tried.add((winner.name, winner.stage_name))
            nxt = pick(cands, s, queries, exclude=frozenset(tried)) if len(tried) < MAX_ANSWERS else None
            if nxt is not None and not result.verify["known_item_below"] and _fewer_bytes(s, nxt, winner):
                winner = _second_answer(ctx, cands, nxt, tmp, result)
                cand = next(c for c in cands if c.name == winner.name)
                break
            if not result.verify["known_item_below"] or nxt is None:
                break
            on_all = ", ".join(f"{result.verify['known_item'][name]['retention']:.3f} on all of {name}"
                               for name in result.verify["known_item_below"])
            result.hints.append(
                f"{winner.name} ({winner.stage_name}) kept {winner.variant['retention']:.3f} on "
                f"{measured_on(winner.stage)} but {on_all}, less than {s.min_retention:g}: checked the next "
                f"cheapest, {nxt.name} ({nxt.stage_name})")
            shutil.rmtree(tmp / "model")
            shutil.rmtree(tmp / "export")
            winner = result.winner = nxt
        if winner is not None:
            result.hints += [f"{line}: within its noise, not failed" for line in result.verify["within_noise"]]
            if result.vocabulary is not None:
                from espresso_export.searching.vocab import describe

                result.hints.append(describe(result.vocabulary))
            _card(tmp / "model", tmp / "export", tmp / "verify.json", tmp, f"{Path(ctx.source).name}-auto")
            write_recipe(ctx, cand, winner, result.export["weights"], tmp)
        result.output = out
        now = time.perf_counter()
        result.seconds = now - ctx.start
        result.timing = {"budget_seconds": s.budget_seconds, "finish_estimated_seconds": round(ctx.reserve, 1),
                         "finish_seconds": round(now - began, 1), "seconds": round(result.seconds, 1)}
        result.write(tmp)
    return result


def _fewer_bytes(s, nxt: Pick, answer: Pick) -> bool:
    """For bytes per vector: the next pick stored fewer bytes on the sample than the answer does on all the
    documents (its form chosen again there), so it may store fewer there too."""
    return s.objective.value == "bytes-per-vector" and \
        nxt.variant["bytes_per_vector"] < answer.variant["bytes_per_vector"]


ANSWER_PARTS = ("model", "export", "verify.json")


def _second_answer(ctx, cands: list[C.Candidate], nxt: Pick, tmp: Path, result: AutoResult) -> Pick:
    """The answer built in ``tmp`` set aside, ``nxt`` built and checked the same way, and the one storing fewer
    bytes per vector on all the documents (while keeping the target there) kept; the other is deleted."""
    first, kept = result.winner, tmp / ".first-answer"
    kept.mkdir()
    for part in ANSWER_PARTS:
        shutil.move(str(tmp / part), kept / part)
    saved = (result.export, result.verify, result.vocabulary, list(result.hints))
    second = _answer(ctx, next(c for c in cands if c.name == nxt.name), nxt, tmp, result)
    missed = bool(result.verify["known_item_below"])
    better = not missed and second.variant["bytes_per_vector"] < first.variant["bytes_per_vector"]
    note = (f"{nxt.name} ({nxt.stage_name}) stored {nxt.variant['bytes_per_vector']} bytes on "
            f"{measured_on(nxt.stage)}, fewer than {first.name} ({first.stage_name}) stores on all the documents "
            f"({_describe(first.variant)}): checked it too; ")
    if better:
        shutil.rmtree(kept)
        result.hints.append(note + f"it keeps the target there at {_describe(second.variant)}, the answer")
        return second
    for part in ANSWER_PARTS:
        path = tmp / part
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        shutil.move(str(kept / part), path)
    kept.rmdir()
    result.export, result.verify, result.vocabulary, result.hints = saved
    result.winner = first
    result.hints.append(note + ("on all of them it misses the target" if missed else
                                f"on all of them it stores {_describe(second.variant)}")
                        + f": {first.name} stays the answer")
    return first


def _answer(ctx, cand: C.Candidate, winner: Pick, tmp: Path, result: AutoResult) -> Pick:
    """``winner`` built into ``tmp``, exported, verified and judged (on ``result``); the pick as stored (for
    bytes per vector, its stored form chosen again on all the documents)."""
    s = ctx.settings
    _build_model(ctx, cand, winner.stage, tmp / "model")
    if s.pruning:
        from espresso_export.searching.vocab import prune_answer

        result.vocabulary = prune_answer(ctx, tmp / "model")
    result.export = _export(ctx, tmp / "model", tmp / "export")
    report = _verify(ctx, tmp / "export", winner.variant, winner.stage["dim"])  # the answer's own width
    write_text_atomic(tmp / "verify.json", json.dumps(report.to_dict(), indent=2) + "\n")
    if s.objective.value == "bytes-per-vector":
        form = _full_corpus_form(report, s.min_retention, s.precision)
        if form is not None and _form(form) != _form(winner.variant):
            result.hints.append(
                f"stored form chosen again on all the documents: {_describe(winner.variant)} kept "
                f"{winner.variant['retention']:.3f} on {measured_on(winner.stage)}; {_describe(form)} keeps "
                f"{form['retention']:.3f} on all of them, the fewest bytes that do")
            winner = replace(winner, variant=form)
    result.winner = winner
    result.verify = _verdict(report, s.min_retention, winner.variant, bool(s.sts), s.max_noise)
    return winner
