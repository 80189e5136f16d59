"""The Markdown body of the card, one function per section: summary, lineage, verification,
Matryoshka dimensions, intended use and limitations (usage is :mod:`espresso_export.publishing.usage`).

Every number is printed through :mod:`espresso_export.core.formatting`, the same formatters as the
``verify`` report, so the card and the report never disagree on a value.
"""

from __future__ import annotations

from espresso_export.core.formatting import (
    byte_size,
    markdown_table,
    number,
    param_count,
)
from espresso_export.core.types import Head
from espresso_export.publishing.facts import DenseInfo, ModelFacts, StaticFacts
from espresso_export.publishing.model_ids import display_id, short_id


def _healed_text(st: StaticFacts) -> str:
    if st.healed is None:
        return "unknown (no `espresso.json`)"
    if not st.healed:
        return "no: model2vec's distillation alone, not trained on any texts"
    text = f"on {st.healed_on:,} texts" if st.healed_on else "yes"
    after, before = st.heldout.get("mean_cosine_after"), st.heldout.get("mean_cosine_before")
    if isinstance(after, (int, float)) and isinstance(before, (int, float)):
        text += f" (held-out cosine to the source {before:.3f} -> {after:.3f})"
    return text


def static_speed(facts: ModelFacts) -> str:
    """The speed ``verify`` measured (its report, also ``auto``'s ``verify.json``): texts a second per batch size and
    the speed-up over the source; empty without a report that timed it."""
    m = facts.metrics
    if m is None:
        return ""
    parts = []
    for b in m.latency:
        rate = b.candidate_per_s or (b.batch_size * 1000 / b.candidate_ms if b.candidate_ms else None)
        if rate:
            parts.append(f"{rate:,.0f} texts/s at batch {b.batch_size}"
                         + (f", {number(b.speedup, '.1f')}x{'?' if b.reasons else ''} the source's" if b.speedup else ""))
    threads = f" on {m.threads} threads" if m.threads else ""
    what = f" of `{m.candidate_file}`" if m.candidate_file else ""  # an export's graph, as verify ran it
    return "; ".join(parts) + f" (measured{what} by `verify`{threads})" if parts else ""


def _static_rows(facts: ModelFacts) -> list[list[str]]:
    st = facts.static
    vocab = f"{st.tokens:,} tokens" + (f", {st.corpus_words:,} of them words of the healing corpus"
                                       if st.corpus_words else "")
    return [["base model", display_id(facts.source_id) if facts.source_id else "unknown (not an espresso-export folder)"],
            ["architecture", f"static token table in model2vec's format: {st.tokens:,} tokens x {facts.output_dim} "
                             "dims, no attention"],
            ["embedding", f"{facts.output_dim}-d, the mean of the text's token rows"
                          + (", L2-normalised" if facts.normalized else "")],
            ["vocabulary", vocab],
            ["healed on your documents", _healed_text(st)],
            ["max sequence length", f"{facts.max_seq_length} tokens" if facts.max_seq_length else "no limit"],
            ["parameters", param_count(facts.params)],
            ["table (safetensors)", f"{byte_size(facts.weights_bytes)} ({st.dtype})"],
            ["size on disk", f"{byte_size(facts.weights_bytes + st.other_bytes)} with the tokenizer and configs"]]


def summary_table(facts: ModelFacts) -> list[str]:
    rows = _static_rows(facts) if facts.static is not None else [["base model", display_id(facts.source_id) if facts.source_id else "unknown (not an espresso-export folder)"],
            ["architecture", f"{facts.model_type or '?'}, {facts.layers if facts.layers is not None else '?'} layers, "
                             f"{facts.hidden_size or '?'}-d hidden"],
            ["embedding", f"{facts.output_dim or '?'}-d, {facts.pooling.value} pooling"
                          + (", L2-normalised" if facts.normalized else "")],
            ["head", " -> ".join(f"Dense {m.in_features}->{m.out_features}" if isinstance(m, DenseInfo) else "Normalize"
                                 for m in facts.post) or "none"],
            ["max sequence length", f"{facts.max_seq_length} tokens" if facts.max_seq_length else "tokenizer default"],
            ["parameters", param_count(facts.params)],
            ["weights (safetensors)", byte_size(facts.weights_bytes)]]
    if facts.static is not None and (speed := static_speed(facts)):
        rows.append(["speed", speed])
    if facts.onnx is not None:
        rows.append(["ONNX", ", ".join(f"`{name}` ({byte_size(size)})" for name, size in facts.onnx.graphs)])
        if facts.onnx.openvino:
            rows.append(["OpenVINO (.xml + .bin)", ", ".join(f"`{name}` ({byte_size(size)})"
                                                            for name, size in facts.onnx.openvino)])
        if speed := onnx_speed(facts.onnx.manifest):
            rows.append(["ONNX speed (timed by the export)", speed])
    if facts.matryoshka_dims:
        rows.append(["matryoshka dimensions", ", ".join(map(str, facts.matryoshka_dims))])
    return markdown_table(["property", "value"], rows)


def onnx_speed(manifest: dict) -> str:
    """The export's timing (exporting/timing.py): the recommended file, each file's speed, what was slower."""
    timing = manifest.get("timing")
    if not timing or not timing.get("recommended"):
        return ""
    recommended = timing["recommended"]  # "onnx/model_quantized.onnx"; format 1 named files without their folder
    shown = recommended if "/" in recommended else f"onnx/{recommended}"
    notes = list(timing.get("notes", []))
    warning = [notes.pop(0)] if notes and not timing.get("reliable", True) else []  # first, before the numbers
    parts = warning + [f"recommended `{shown}` (passed validation; another file replaces the one asked "
                       "for only when it is faster in every timing round, so a file that is slower on the median "
                       "alone, as noted below, can stay recommended)"]
    for f in manifest.get("files", []):
        rates = (f.get("speed") or {}).get("sentences_per_second", {})
        vs = (f.get("speed") or {}).get("vs_fp32")
        if rates:
            parts.append(f"`{f['file']}` " + ", ".join(f"{v:,.0f} sent/s at batch {b}" for b, v in rates.items())
                         + ("" if not vs else " (" + ", ".join(f"{r:.2f}x" for r in vs.values()) + " fp32)"))
    parts += notes
    if streams := timing.get("streams"):
        parts.append(f"`{streams['file']}` on {streams['streams']} streams (`OnnxEncoder(..., streams="
                     f"{streams['streams']})`): {streams['vs_one_stream']:.2f}x one stream at batch {streams['batch']}")
    cpu = manifest.get("cpu", {})
    where = ", ".join(x for x in (cpu.get("isa", "?"), cpu.get("model")) if x)
    return "; ".join(parts) + f" ({timing.get('threads')} threads, {where})"


def _per_vector(v) -> str:
    return f"{v} B" if v is not None else "n/a"


_SIZE_FORMAT = {"parameters": param_count, "bytes on disk": byte_size}  # other size rows: bytes per vector


def _metric_rows(facts: ModelFacts) -> list[list[str]]:
    m = facts.metrics
    rows: list[list[str]] = []
    for s in m.sts:
        rows.append([f"STS Spearman x100, {s.name} ({s.pairs} pairs)", number(s.candidate), number(s.source),
                     f"{number(s.retention, '.4f')} retained"])
    for r in m.retrieval:
        where = f"{r.name} ({r.queries} queries, {r.docs} docs)"
        if r.candidate_ndcg is not None:
            rows.append([f"nDCG@10, {where}", number(r.candidate_ndcg, ".4f"), number(r.source_ndcg, ".4f"),
                         f"{number(r.ndcg_retention, '.4f')} retained"])
        if r.candidate_recall_100 is not None:
            rows.append([f"recall@100, {where}", number(r.candidate_recall_100, ".4f"),
                         number(r.source_recall_100, ".4f"), f"{number(r.recall_100_retention, '.4f')} retained"])
        rows.append([f"MRR@10, {where}", number(r.candidate_mrr, ".4f"),
                     number(r.source_mrr, ".4f"), f"{number(r.mrr_retention, '.4f')} retained"])
    rows += _agreement_rows(m.agreement)
    for j in m.judged:
        iv = f" (95% interval {j['ci95'][0]:.3f}-{j['ci95'][1]:.3f})" if j.get("ci95") else ""
        rows.append([f"judged nDCG@10 (the publisher's relevance judgments, {j.get('queries_judged')} queries), "
                     f"{j.get('name')}", number(j.get("candidate_ndcg_at_10"), ".4f"),
                     number(j.get("source_ndcg_at_10"), ".4f"), f"{number(j['retention'], '.4f')} retained{iv}"])
    for b in m.latency:
        rows.append([f"latency, batch {b.batch_size} (ms per batch)", number(b.candidate_ms, ".1f"),
                     number(b.source_ms, ".1f"),
                     f"{number(b.ratio, '.3f')} ({number(b.speedup, '.2f')}x{'?' if b.reasons else ''} faster)"])
    for label, (c, s, ratio) in m.size.items():
        show = _SIZE_FORMAT.get(label, _per_vector)
        rows.append([label, show(c), show(s), number(ratio, ".3f")])
    return rows


def _agreement_rows(corpora) -> list[list[str]]:
    """Agreement with the source's ranking on the user's corpus: the source is the reference (its own score is 1)."""
    rows = []
    for a in corpora:
        where = f"{a.name} ({a.queries} queries: {a.queries_from}; {a.passages} passages)"
        ci = f"95% interval {a.agreement_ci95[0]:.3f}-{a.agreement_ci95[1]:.3f}" if a.agreement_ci95 else ""
        k = a.known_item
        if k is not None:
            iv = f" (95% interval {k['ci95'][0]:.3f}-{k['ci95'][1]:.3f})" if k["ci95"] else ""
            rows.append([f"known-item nDCG@10 ({k['method']}), {a.name}", number(k["candidate"], ".4f"),
                         number(k["source"], ".4f"), f"{number(k['retention'], '.4f')} retained{iv}"])
        b = a.belief
        if b is not None:
            iv = f" (95% interval {b['ci95'][0]:.3f}-{b['ci95'][1]:.3f})" if b["ci95"] else ""
            rows.append([f"belief retention on your {b['queries']} queries ({a.queries_from}), {a.name}", "",
                         "reference", f"{number(b['retention'], '.4f')} retained{iv}"])
        rows.append([f"agreement@10 with the source's ranking, {where}", number(a.agreement_at_10, ".4f"),
                     "reference", ci])
        rows.append([f"nDCG@10, the source's ranking as relevance, {where}", number(a.ndcg_at_10, ".4f"),
                     "reference", ""])
        rows.append([f"recall@100 of the source's top 10, {where}", number(a.recall_at_100, ".4f"), "reference", ""])
        rows += [[f"agreement@10 at {label} ({_per_vector(size)} per vector), {a.name}", number(value, ".4f"),
                  "reference", ""] for label, size, value in a.variants]
    return rows


def _estimate_error(facts: ModelFacts) -> str:
    """What the known-item retention is: an estimate without labels, and how far it read from labelled retention
    for this kind of model on labelled collections."""
    from espresso_export.verification.estimate_error import error_line, measured_error

    line = error_line(measured_error(facts.estimate_kind))
    return f"The known-item retention is an estimate made without labels; {line}."


def verification_section(facts: ModelFacts) -> list[str]:
    m = facts.metrics
    lines = ["## Verification", ""]
    if m is None:
        return lines + ["No `espresso-export verify` report was included, so this card makes no quality or speed "
                        "claims. Measure it with `espresso-export verify MODEL --against SOURCE --json report.json` "
                        "and push again with `--verify-report report.json`.", ""]
    measured = (f" on `{m.candidate_file}` of the export (its parameters and bytes below are that file's)"
                if m.candidate_file else " on the PyTorch model" if m.candidate_kind == "pytorch" else "")
    lines += [f"Measured by `espresso-export verify` {m.version or ''}{measured} against {display_id(m.source)}, side "
              f"by side in one process{f', {m.threads} thread(s)' if m.threads else ''}; the full report is "
              "`verify_report.json`.", ""]
    lines += markdown_table(["metric", "this model", short_id(m.source), "ratio"], _metric_rows(facts))
    if any(a.known_item is not None for a in m.agreement):
        lines += [_estimate_error(facts), ""]
    unreliable = [f"batch {b.batch_size}: {'; '.join(b.reasons)}" for b in m.latency if b.reasons]
    if unreliable:
        lines += ["? verify marked this speed measurement unreliable: " + " | ".join(unreliable) + ".", ""]
    if m.gate:
        verdict = "passed" if m.gate_passed else "FAILED"
        lines += [f"Quality gate: **{verdict}**.", ""]
        lines += markdown_table(["check", "threshold", "value", "result"],
                                [[c.name, c.threshold, number(c.value, ".4f"), "pass" if c.passed else "FAIL"]
                                 for c in m.gate])
    return lines


def matryoshka_section(facts: ModelFacts) -> list[str]:
    dims = facts.matryoshka_dims
    if not dims:
        return []
    why = ("this model is ESE-trained" if facts.ese else "its head keeps the first dimensions of the source embedding "
           "(`truncate` head), which is meant for Matryoshka/ESE-trained sources")
    if facts.exported_dims:
        why = ("the export declared them (`export --dims`) and the head is the PCA `shrink` fitted: a PCA's first d "
               "components are the PCA fitted at d, so a truncated vector is exactly that smaller model's vector"
               if facts.pca_head else "the export declared them (`export --dims`); the head was not fitted to stand "
               "alone at these widths, so check each one with `espresso-export verify MODEL --against SOURCE --dims "
               + ",".join(map(str, dims[1:])) + "` before relying on it")
    lines = ["## Matryoshka dimensions", "",
             f"Declared widths: {', '.join(map(str, dims))}, because {why}. `matryoshka_dimensions` is set in this "
             "card, in `config.json` (read by serving stacks such as vLLM to accept a smaller `dimensions` request) and "
             "in `config_sentence_transformers.json`. Keep the first d values and L2-normalise again "
             "(sentence-transformers: `truncate_dim=d`; cosine similarity needs no renormalisation)."]
    if not facts.dims_listed_by_training and not facts.exported_dims:
        lines.append(f"The widths below {dims[0]} are halvings of the full width; "
                     + ("only the full width was measured by `verify`." if facts.metrics else "none was measured."))
    return lines + [""]


def _limitations(facts: ModelFacts, src: str) -> list[str]:
    bullets = []
    m = facts.metrics
    if m is None:
        bullets.append("Quality and speed were not measured for this upload (no verify report).")
    else:
        bullets.append("Quality was measured only on the sets in the table above; other tasks and domains can lose more.")
        if m.sts and all(s.smoke for s in m.sts):
            bullets.append("The only STS set is espresso-export's built-in smoke set (173 pairs): a sanity check, not "
                           "a benchmark.")
        if m.gate_passed is False:
            bullets.append("The verification gate FAILED: " + "; ".join(
                f"{c.name} = {number(c.value, '.4f')}, needs {c.threshold}" for c in m.gate if not c.passed) + ".")
    if facts.static is not None:
        bullets += _static_limitations(facts.static)
    steps = [s.get("step") for s in facts.lineage]
    if steps and "distill" not in steps and "train" not in steps and not facts.ese:
        bullets.append("Layers were removed without retraining (no distillation or fine-tuning step).")
    if pruned := facts.vocab_pruning:
        corpus = pruned.get("corpus") or {}
        bullets.append(
            f"The vocabulary was pruned from {pruned.get('vocab_size_before', 0):,} to "
            f"{pruned.get('vocab_size_after', 0):,} tokens, keeping those a domain corpus uses"
            + (f" ({corpus['sentences']:,} texts)" if isinstance(corpus.get("sentences"), int) else "")
            + ": texts of that domain encode as before; other text is split into the tokens kept and can "
            "differ from the unpruned model (`verify` on your own texts reports their token coverage).")
    if facts.head == Head.PCA.value:
        cal = next((step.get("calibration") for step in facts.lineage if step.get("step") == "shrink"), None)
        fitted = (f"on {cal['sentences']:,} sentences of `{short_id(str(cal['source']))}`"
                  if isinstance(cal, dict) and cal.get("source") and cal.get("sentences") else "on a calibration corpus")
        bullets.append(f"The PCA head was fitted {fitted}; texts far from them may lose more.")
    bullets.append(f"It inherits the biases and the license terms of {src}.")
    return bullets


def _static_limitations(st: StaticFacts) -> list[str]:
    bullets = ["A static model has no attention: a text's vector is the mean of its tokens' rows, so word order and "
               "context are lost (\"dog bites man\" and \"man bites dog\" get the same vector)."]
    if st.healed:
        bullets.append("The table was healed on one collection's texts: texts far from them can lose more of the "
                       "source's quality.")
    elif st.healed is False:
        bullets.append("The table was not healed on any texts (model2vec's distillation alone): on a collection's "
                       "own documents it usually keeps less of the source's quality than a healed one.")
    return bullets


def intended_use_section(facts: ModelFacts) -> list[str]:
    src = display_id(facts.source_id) if facts.source_id else "the original model"
    if facts.static is not None:
        return _static_intended_use(facts, src)
    lines = ["## Intended use", "",
             "Sentence and short-passage embeddings for semantic similarity, clustering and retrieval where the "
             f"source model is too large or too slow: CPU servers, laptops and edge devices. Languages and domain are "
             f"those of {src}{', narrowed by the vocabulary pruning below' if facts.vocab_pruning else ''}; "
             "inputs longer than "
             f"{facts.max_seq_length or 'the tokenizer limit'} tokens are truncated.", "",
             "## Limitations", ""]
    return lines + [f"- {b}" for b in _limitations(facts, src)] + [""]


def _static_intended_use(facts: ModelFacts, src: str) -> list[str]:
    lines = ["## Intended use", "",
             "Sentence and passage embeddings for search, clustering and similarity where even a small transformer "
             "is too slow or too large: a table look-up per token and no attention, many times faster than "
             f"{src} on a CPU (the speed above, where `verify` timed it). Languages and domain are those of {src}"
             + (", and the healing texts'" if facts.static.healed else "")
             + (f"; texts are read up to {facts.max_seq_length} tokens." if facts.max_seq_length else "."), "",
             "## Limitations", ""]
    return lines + [f"- {b}" for b in _limitations(facts, src)] + [""]
