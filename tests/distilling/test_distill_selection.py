"""distill --eval-retrieval: the kept checkpoint is chosen on retrieval as well as STS (tiny model, constructed
data on which the two metrics disagree)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from espresso_export.core.errors import NotFoundError
from espresso_export.data import builtin_resource, read_retrieval
from espresso_export.model.checkpoint import load
from espresso_export.model.embed import encode
from espresso_export.distilling import distill
from espresso_export.distilling.selection import retrieval_scores

pytestmark = pytest.mark.usefixtures("one_thread")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def setup(tiny_bert, tmp_path_factory) -> dict:
    """A 300-sentence corpus and 60 other sentences; the student before training and after 3 epochs."""
    tmp = tmp_path_factory.mktemp("select")
    lines = builtin_resource("calibration.txt").read_text(encoding="utf-8").splitlines()
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(lines[:300]) + "\n", encoding="utf-8")

    def run(out, **kw):
        args = {"dim": 8, "corpus": [str(corpus)], "student_layers": 2, "batch_size": 32, "lr": 1e-3, "epochs": 3,
                "cache_dir": tmp / "cache", "heldout": 0, "seed": 0, "run_dir": tmp / f"run-{len(list(tmp.iterdir()))}"}
        args.update(kw)
        return distill(str(tiny_bert), out, **args)

    initial = run(None, max_steps=1, lr=1e-12, epochs=1)  # the plain cut with its PCA head
    final = run(None)
    return {"tmp": tmp, "run": run, "initial": initial.task, "final": final.task, "texts": lines[300:360]}


def _constructed_sets(setup) -> tuple[Path, Path]:
    """Retrieval whose answers are the *initial* student's nearest neighbours (nDCG@10 1.0 before training), and
    STS whose gold scores are the *trained* student's cosines (Spearman 100 after the last epoch)."""
    tmp, texts = setup["tmp"], setup["texts"]
    queries, docs = texts[:20], texts[20:]
    sim = _unit(setup["initial"].embed(queries)) @ _unit(setup["initial"].embed(docs)).T
    beir = tmp / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                                               for i, t in enumerate(docs)))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n"
                                                for i, t in enumerate(queries)))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{int(np.argmax(row))}\t1\n" for i, row in enumerate(sim)))
    first, second = texts[::2], texts[1::2]
    gold = (_unit(setup["final"].embed(first)) * _unit(setup["final"].embed(second))).sum(1)
    sts = tmp / "sts.jsonl"
    sts.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "score": float(s)}) + "\n"
                           for a, b, s in zip(first, second, gold)))
    return beir, sts


def test_retrieval_selected_checkpoint_differs_from_the_sts_selected_one(setup):
    beir, sts = _constructed_sets(setup)
    tmp, run = setup["tmp"], setup["run"]
    by_sts = run(tmp / "by-sts", eval_sts=str(sts))
    both = run(tmp / "by-both", eval_sts=str(sts), eval_retrieval=str(beir))
    last = by_sts.train["steps"]
    assert by_sts.eval["best_step"] == last and by_sts.eval["best"] == pytest.approx(100.0)  # STS: the last epoch
    assert both.eval["best_step"] == 0  # STS + nDCG@10: the checkpoint before training

    e = both.eval
    assert e["score"] == "100 x mean retention vs the teacher (STS Spearman, nDCG@10)"
    measured, teacher = e["measured"], e["teacher"]
    assert [h["step"] for h in e["history"]] == [0, 10, 20, 30] and len(measured) == 4
    assert measured[-1]["sts"] == pytest.approx(100.0) and measured[0]["ndcg_at_10"] == pytest.approx(1.0)
    assert int(np.argmax([m["sts"] for m in measured])) == 3 and int(np.argmax([m["score"] for m in measured])) == 0
    for m in measured:  # the stated combination: 100 x mean(student / teacher)
        assert m["score"] == pytest.approx(50 * (m["sts"] / teacher["sts"] + m["ndcg_at_10"] / teacher["ndcg_at_10"]),
                                           abs=1e-4)
    assert e["best"] == pytest.approx(measured[0]["score"], abs=1e-4)

    # the folders hold the selected weights: read back, each scores what its selection kept
    data = read_retrieval(beir)
    kept = load(tmp / "by-both")
    assert retrieval_scores(lambda t: encode(kept, t), data)["ndcg_at_10"] == pytest.approx(1.0)
    other = load(tmp / "by-sts")
    assert retrieval_scores(lambda t: encode(other, t), data)["ndcg_at_10"] == pytest.approx(measured[-1]["ndcg_at_10"],
                                                                                            abs=1e-4)
    prov = json.loads((tmp / "by-both" / "espresso.json").read_text())
    assert prov["best_eval"]["retrieval"] == str(beir.resolve()) and prov["best_eval"]["best_step"] == 0


def test_eval_retrieval_alone_and_a_missing_folder(setup):
    beir, _ = _constructed_sets(setup)
    alone = setup["run"](None, eval_retrieval=str(beir), epochs=1)
    assert alone.eval["score"] == "100 x mean retention vs the teacher (nDCG@10)" and alone.eval["sts"] is None
    assert alone.eval["best_step"] == 0  # nDCG@10 is 1.0 before training (the constructed answers)
    assert alone.task.score_label == "eval (100 x mean retention)"  # the progress lines: not a Spearman
    with pytest.raises(NotFoundError, match="retrieval set not found"):
        setup["run"](None, eval_retrieval=str(setup["tmp"] / "missing"), epochs=1)


def test_verify_says_when_it_reports_on_the_sets_that_chose_the_checkpoint(setup, tiny_bert, monkeypatch):
    """Reporting on the eval sets that picked the kept checkpoint overstates its retention (a walk-through: 0.968
    nDCG@10 retention on the selection half, 0.875 on the held-out half), and verify said nothing."""
    from espresso_export import verify

    beir, sts = _constructed_sets(setup)
    tmp = setup["tmp"]
    setup["run"](tmp / "chosen", eval_sts=str(sts), eval_retrieval=str(beir), epochs=1)
    monkeypatch.chdir(beir.parent)  # recorded as absolute paths: a relative spec from elsewhere still matches
    fast = {"batch_sizes": [4], "latency_texts": 8, "latency_rounds": 1, "latency_budget": 0, "cache": False}
    report = verify(tmp / "chosen", str(tiny_bert), sts=[sts.name, "builtin"], retrieval=[beir.name], **fast)
    said = [n for n in report.notes if "also chose the candidate's kept checkpoint" in n]
    assert [n.split(" also")[0] for n in said] == [sts.name, beir.name]
    held_out = verify(tmp / "chosen", str(tiny_bert), sts=["builtin"], **fast)  # not a selection set here
    assert not [n for n in held_out.notes if "kept checkpoint" in n]


def test_distill_warns_on_a_test_split_and_on_a_held_out_error_that_rose(setup):
    """Two things the summary printed without comment: selecting on a file named test, and a held-out relative
    MSE that went up (0.44 -> 0.71 in a walk-through's 2-step run)."""
    _, sts = _constructed_sets(setup)
    named_test = sts.with_name("my-sts-test.jsonl")
    named_test.write_text(sts.read_text())
    steady = setup["run"](None, eval_sts=str(named_test), epochs=1, heldout=16)
    assert any(h.startswith("warning: --eval-sts my-sts-test.jsonl reads like a test split") for h in steady.hints)
    h = steady.heldout
    assert (h["relative_mse_after"] > h["relative_mse_before"]) == any("held-out relative MSE rose" in x
                                                                      for x in steady.hints)
    wild = setup["run"](None, epochs=1, heldout=16, lr=2.0)  # wrecks the student (50 gave nan on an AVX2 machine)
    assert wild.heldout["relative_mse_after"] > wild.heldout["relative_mse_before"]
    assert any(x.startswith("warning: the held-out relative MSE rose") for x in wild.hints)
