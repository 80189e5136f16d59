"""distill: healing a cut MiniLM, exact resume, cached targets, corpus readers, augmentation, bad input, CLI."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from espresso_export.data.augment import Augment, augment, parse_augment
from espresso_export.model.checkpoint import Normalize, load
from espresso_export.cli.app import main
from espresso_export.data import read_corpus, read_sts
from espresso_export.distilling import distill, teacher_targets
from espresso_export.model.post import renormalized
from espresso_export.model.embed import encode
from espresso_export.core.errors import NotFoundError, OfflineError, UnsupportedModelError, ValidationError
from espresso_export.shrinking.heads import fit_pca
from espresso_export.core.metrics import sts_spearman
from espresso_export.training.loop import TrainingInterrupted

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory, calibration_file) -> Path:
    return calibration_file  # 300 sentences


def _tiny(tiny_bert, tmp, out="out", **kw):
    args = dict(dim=8, corpus=[kw.pop("corpus")], student_layers=2, batch_size=32, lr=1e-3, epochs=2,
                cache_dir=tmp / "cache", heldout=0, seed=0)
    args.update(kw)
    return distill(str(tiny_bert), tmp / out if out else None, **args)


# --- healing a real model -----------------------------------------------------------------------------

def test_healing_a_2_layer_minilm_lowers_the_mse_and_raises_sts_over_the_plain_cut(minilm_path, shared_data, tmp_path):
    stsb = shared_data / "stsb"
    dev = (stsb / "sts-dev.csv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "dev-slice.csv").write_text("\n".join(dev[::10]) + "\n", encoding="utf-8")  # 150 mixed-genre pairs
    (tmp_path / "train.csv").write_text("\n".join((stsb / "sts-train.csv").read_text().splitlines()[:200]) + "\n")
    result = distill(minilm_path, tmp_path / "healed", dim=64, corpus=[tmp_path / "train.csv"], student_layers=2,
                     epochs=2, batch_size=32, lr=1e-3, eval_sts=tmp_path / "dev-slice.csv", heldout=30,
                     cache_dir=tmp_path / "cache", seed=0)
    assert result.layers == [2, 5]  # spread
    h = result.heldout
    assert h["sentences"] == 30 and h["relative_mse_after"] < 0.8 * h["relative_mse_before"]
    e = result.eval
    assert e["best"] > e["initial"] + 3.0, e  # initial = the plain cut with a PCA head

    # the written folder scores what the run reported, read back by the loader like any checkpoint
    pairs = read_sts(tmp_path / "dev-slice.csv")
    ckpt = load(tmp_path / "healed")
    assert ckpt.output_dim == 64 and ckpt.depth == 2 and isinstance(ckpt.post[-1], Normalize)
    score = sts_spearman(encode(ckpt, pairs.sentence1), encode(ckpt, pairs.sentence2), pairs.scores)
    assert score == pytest.approx(e["best"], abs=0.05)
    prov = json.loads((tmp_path / "healed" / "espresso.json").read_text())
    assert prov["step"] == "distill" and prov["teacher"]["id"] == str(Path(minilm_path).resolve())
    assert prov["student"]["layers"] == [2, 5] and prov["training"]["steps"] == result.train["steps"]
    assert prov["corpus"]["sha256"] and prov["best_eval"]["best"] == e["best"]
    assert not (tmp_path / "healed.run").exists()  # checkpoints removed after success


# --- cache, resume -------------------------------------------------------------------------------------

def test_cached_targets_equal_the_teachers_pca_output_and_are_reused(tiny_bert, corpus_file, tmp_path):
    teacher = load(tiny_bert)
    sentences = read_corpus([corpus_file]).sentences
    t = teacher_targets(teacher, sentences, dim=8, pca_samples=10_000, layers=[1], cache_dir=tmp_path)
    assert not t.reused and isinstance(t.targets, np.memmap)
    teacher.post = renormalized(teacher.post)
    emb = encode(teacher, sentences)
    pca = fit_pca(emb, 8)
    np.testing.assert_allclose(t.pca.components, pca.components, atol=1e-5)
    np.testing.assert_allclose(np.asarray(t.targets), pca.transform(emb), atol=1e-5)
    again = teacher_targets(load(tiny_bert), sentences, dim=8, pca_samples=10_000, layers=[1], cache_dir=tmp_path)
    assert again.reused and again.folder == t.folder
    np.testing.assert_array_equal(np.asarray(again.targets), np.asarray(t.targets))
    other = teacher_targets(load(tiny_bert), sentences, dim=4, pca_samples=10_000, cache_dir=tmp_path)
    assert not other.reused and other.folder == t.folder  # same teacher pass, new PCA
    np.testing.assert_allclose(np.asarray(other.targets), np.asarray(t.targets)[:, :4], atol=1e-5)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = load_file(str(folder / "model.safetensors"))
    out.update({f"dense/{k}": v for k, v in load_file(str(folder / "3_Dense" / "model.safetensors")).items()})
    return out


def test_resume_after_ctrl_c_reproduces_the_uninterrupted_run(tiny_bert, corpus_file, tmp_path):
    full = _tiny(tiny_bert, tmp_path, out="full", corpus=corpus_file, eval_sts="builtin", checkpoint_every=0)

    def ctrl_c(step):
        if step == 11:  # second epoch, mid-way
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(TrainingInterrupted):
        _tiny(tiny_bert, tmp_path, out="part", corpus=corpus_file, eval_sts="builtin", checkpoint_every=0, on_step=ctrl_c)
    assert not (tmp_path / "part").exists() and (tmp_path / "part.run" / "checkpoint" / "trainer.json").is_file()
    with pytest.raises(ValidationError, match="pass --resume"):
        _tiny(tiny_bert, tmp_path, out="part", corpus=corpus_file, eval_sts="builtin", checkpoint_every=0)
    resumed = _tiny(tiny_bert, tmp_path, out="part", corpus=corpus_file, eval_sts="builtin", checkpoint_every=0,
                    resume=True)
    assert resumed.targets_cached and resumed.train["resumed_from"] == 11
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "part")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert resumed.eval["history"] == full.eval["history"]


def test_resume_from_another_runs_checkpoint_is_refused(tiny_bert, corpus_file, tmp_path):
    def ctrl_c(step):
        if step == 2:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(TrainingInterrupted):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, on_step=ctrl_c)
    with pytest.raises(ValidationError, match=r"belongs to another run.*dim: 8 there, 6 now"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, dim=6, resume=True)
    with pytest.raises(ValidationError, match="nothing to resume"):
        _tiny(tiny_bert, tmp_path, out="other", corpus=corpus_file, resume=True)


# --- bad input -----------------------------------------------------------------------------------------

def test_bad_inputs_are_refused_with_a_clear_reason(tiny_models, tiny_bert, corpus_file, tmp_path):
    with pytest.raises(NotFoundError, match="teacher: model not found"):
        distill(tmp_path / "nope", tmp_path / "o", dim=8, corpus=[corpus_file], student_layers=2)
    with pytest.raises(NotFoundError, match="student: model not found"):
        distill(tiny_bert, tmp_path / "o", dim=8, corpus=[corpus_file], student=str(tmp_path / "nope"))
    odd = tmp_path / "t5"
    odd.mkdir()
    (odd / "config.json").write_text('{"model_type": "t5"}')
    with pytest.raises(UnsupportedModelError, match="teacher: unsupported architecture 't5'"):
        distill(odd, tmp_path / "o", dim=8, corpus=[corpus_file], student_layers=2)
    with pytest.raises(ValidationError, match="give a --student, or --student-layers"):
        distill(tiny_bert, tmp_path / "o", dim=8, corpus=[corpus_file])
    with pytest.raises(ValidationError, match="larger than the teacher's embedding width 32"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, dim=33)
    with pytest.raises(ValidationError, match="--pca-samples 20 on a corpus of 300 sentences gives 20"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, dim=24, pca_samples=20)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\n")
    with pytest.raises(ValidationError, match="the corpus is empty"):
        _tiny(tiny_bert, tmp_path, corpus=empty)
    with pytest.raises(ValidationError, match="fewer than one batch"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, batch_size=512)
    with pytest.raises(ValidationError, match="--layer-targets needs a student cut from the teacher"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, student=str(tiny_models["roberta"]), layer_targets=True)


# --- corpus and augmentation ---------------------------------------------------------------------------

def test_a_beir_collection_is_read_for_healing_as_verify_embeds_its_documents(tmp_path):
    from espresso_export.data import read_retrieval

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "Espresso", "text": "A coffee brewed under pressure."}\n'
        '{"_id": "d2", "title": "", "text": "Untitled text."}\n'
        '{"_id": "d3", "text": "No title field."}\n', encoding="utf-8")
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "what is espresso"}\n', encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    expected = ["Espresso A coffee brewed under pressure.", "Untitled text.", "No title field."]
    assert read_retrieval(beir).docs == expected
    for field in (None, "text"):  # auto or named: the title goes in front of the text
        assert read_corpus([beir / "corpus.jsonl"], field=field).sentences == expected
    (tmp_path / "qa.jsonl").write_text('{"title": "T", "query": "a question"}\n', encoding="utf-8")
    assert read_corpus([tmp_path / "qa.jsonl"]).sentences == ["a question"]  # only a text field takes the title


def test_corpus_readers_dedupe_drop_empty_and_count(tmp_path, shared_data):
    (tmp_path / "a.txt").write_text("one\n\ntwo\none\n  \n")
    (tmp_path / "b.jsonl").write_text('{"body": "two"}\n{"body": "three"}\n{"body": ""}\n')
    (tmp_path / "c.csv").write_text('id,body\n1,"four, with comma"\n2,five\n')  # a field names a column too
    (tmp_path / "d.tsv").write_text("x\tbody\n1\tsix\n")
    c = read_corpus([tmp_path / "a.txt", tmp_path / "b.jsonl", tmp_path / "c.csv", tmp_path / "d.tsv"], field="body")
    assert c.sentences == ["one", "two", "three", "four, with comma", "five", "six"]
    counts = c.counts()
    assert (counts["read"], counts["empty_dropped"], counts["duplicates_dropped"]) == (11, 3, 2)
    assert [s["kind"] for s in counts["sources"]] == ["txt", "jsonl", "csv", "tsv"]
    assert read_corpus([tmp_path / "c.csv"], column="0").sentences == ["id", "1", "2"]
    (tmp_path / "e.csv").write_text('id,text\n1,seven\n')
    assert read_corpus([tmp_path / "e.csv"]).sentences == ["seven"]  # no name: the first text-like column
    for names in ({"column": "body"}, {"field": "body"}):  # a name that is not there: refused, never another column
        with pytest.raises(ValidationError, match="no column 'body'"):
            read_corpus([tmp_path / "e.csv"], **names)
    stsb = read_corpus([shared_data / "stsb" / "sts-dev.csv"])
    assert stsb.sources[0].kind == "stsb" and stsb.sources[0].lines == 3000  # both sentences of 1,500 pairs
    with pytest.raises(OfflineError, match="Hub is unreachable"):
        read_corpus(["hf://someone/some-dataset"])


def test_max_sentences_in_order_keeps_the_first_sources_whole(tmp_path):
    from espresso_export.distilling import prepare_corpus

    (tmp_path / "domain.txt").write_text("".join(f"domain {i}\n" for i in range(30)))
    (tmp_path / "general.txt").write_text("".join(f"general {i}\n" for i in range(300)) + "domain 3\n")
    (tmp_path / "more.txt").write_text("".join(f"more {i}\n" for i in range(300)))
    specs = [tmp_path / "domain.txt", tmp_path / "general.txt", tmp_path / "more.txt"]
    kept, counts = prepare_corpus(specs, max_sentences=100, sample="in-order", seed=1)
    assert kept[:30] == [f"domain {i}" for i in range(30)] and len(kept) == 100
    assert all(s.startswith("general ") for s in kept[30:]) and kept[30:] != [f"general {i}" for i in range(70)]
    assert counts["capped_to"] == 100 and counts["sample"] == "in-order"
    assert prepare_corpus(specs, max_sentences=100, sample="in-order", seed=1)[0] == kept  # seeded
    shuffled, _ = prepare_corpus(specs, max_sentences=100, seed=1)  # random: every source contributes
    assert len(shuffled) == 100 and sum(s.startswith("domain") for s in shuffled) < 30
    assert any(s.startswith("more") for s in shuffled)


def test_augmentation_is_offline_deterministic_and_off_by_default():
    sentences = ["A big dog runs fast across the green field today.", "The small child is happy with the gift."]
    a = augment(sentences, ["word-dropout", "span-swap", "synonym"], copies=3, seed=1)
    assert a == augment(sentences, [Augment.WORD_DROPOUT, Augment.SPAN_SWAP, Augment.SYNONYM], copies=3, seed=1)
    assert a and all(s not in sentences for s in a)
    syn = augment(["The big dog is happy."], ["synonym"], copies=5, seed=0)
    assert any(w in s for s in syn for w in ("large", "huge", "glad", "cheerful"))
    assert augment(sentences, [], copies=3) == []
    with pytest.raises(ValidationError, match="unknown augmentation 'back-translate'"):
        parse_augment(["synonym,back-translate"])


# --- CLI -----------------------------------------------------------------------------------------------

def test_cli_distill_writes_a_sentence_transformers_folder(tiny_bert, corpus_file, tmp_path, capsys):
    code = main(["distill", "--teacher", str(tiny_bert), "--student-layers", "0,3", "--dim", "8", "--corpus",
                 str(corpus_file), "--corpus", "builtin", "--max-sentences", "200", "--sample", "in-order",
                 "--augment", "synonym",
                 "--batch-size", "32", "--loss", "cosine+mse", "--eval-sts", "builtin", "--cache-dir",
                 str(tmp_path / "cache"), "-o", str(tmp_path / "out"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layers"] == [0, 3] and out["corpus"]["capped_to"] == 200 and out["corpus"]["augmented"] > 0
    assert out["corpus"]["sample"] == "in-order"
    assert json.loads((tmp_path / "out" / "espresso.json").read_text())["training"]["lr"] == 1e-3  # healing default
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    v = st.encode(["a dog runs in the city", "the cat sleeps"])
    assert v.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    ours = encode(load(tmp_path / "out"), ["a dog runs in the city", "the cat sleeps"])
    np.testing.assert_allclose(v, ours, atol=1e-5)
    assert main(["distill", "--teacher", str(tiny_bert), "--dim", "8", "--corpus", str(corpus_file),
                 "--student-layers", "2", "--loss", "huber", "-o", str(tmp_path / "x")]) == 2


def test_cli_ctrl_c_exits_130_with_a_checkpoint_and_resume_finishes(tiny_bert, corpus_file, tmp_path, capsys):
    args = ["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--corpus", str(corpus_file),
            "--batch-size", "32", "--epochs", "6", "--checkpoint-every", "3", "--cache-dir", str(tmp_path / "cache"),
            "-o", str(tmp_path / "out"), "--json"]
    ckpt = tmp_path / "out.run" / "checkpoint" / "trainer.json"

    def press_ctrl_c_once_a_checkpoint_exists():
        deadline = time.time() + 120
        while not ckpt.is_file() and time.time() < deadline:
            time.sleep(0.05)
        signal.raise_signal(signal.SIGINT)  # delivered to the main thread, as a real Ctrl-C

    watcher = threading.Thread(target=press_ctrl_c_once_a_checkpoint_exists)
    watcher.start()
    code = main(args)
    watcher.join()
    err = capsys.readouterr().err
    assert code == 130, err
    assert "--resume" in err and not (tmp_path / "out").exists()
    step = json.loads(ckpt.read_text())["step"]
    assert main([*args, "--resume"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train"]["resumed_from"] == step and out["train"]["steps"] == out["train"]["total_steps"]
    assert (tmp_path / "out" / "espresso.json").is_file() and not (tmp_path / "out.run").exists()


def test_default_learning_rate_is_the_hpd_papers_for_another_student(tiny_models, tiny_bert, corpus_file, tmp_path):
    distill(tiny_bert, tmp_path / "hpd", student=tiny_models["distilbert"], dim=8, corpus=[str(corpus_file)],
            batch_size=32, max_steps=1, heldout=0, cache_dir=tmp_path / "cache")
    assert json.loads((tmp_path / "hpd" / "espresso.json").read_text())["training"]["lr"] == 1e-4


# --- the pair loss --------------------------------------------------------------------------------------

def _pair_gap(task) -> float:
    """Mean squared gap between the student's and the teacher targets' cosine over the task's pairs."""
    h = task.embed(task.sentences)
    t = np.asarray(task.targets.targets)
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    t = t / np.linalg.norm(t, axis=1, keepdims=True)
    a, b = task.pairs[:, 0], task.pairs[:, 1]
    return float(np.mean(((h[a] * h[b]).sum(1) - (t[a] * t[b]).sum(1)) ** 2))


@pytest.mark.slow  # the pair loss's mechanics on the tiny models run by default; this is its quality on MiniLM
def test_pair_loss_on_a_real_cut_raises_sts_and_learns_the_teachers_pair_similarities(minilm_path, shared_data,
                                                                                        tmp_path):
    stsb = shared_data / "stsb"
    dev = (stsb / "sts-dev.csv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "dev-slice.csv").write_text("\n".join(dev[::10]) + "\n", encoding="utf-8")
    (tmp_path / "train.csv").write_text("\n".join((stsb / "sts-train.csv").read_text().splitlines()[:300]) + "\n")
    untrained = distill(minilm_path, None, dim=64, pairs=[tmp_path / "train.csv"], student_layers=2, max_steps=1,
                        lr=1e-12, batch_size=32, heldout=0, cache_dir=tmp_path / "cache", run_dir=tmp_path / "r0",
                        seed=0)
    result = distill(minilm_path, tmp_path / "pairs", dim=64, pairs=[tmp_path / "train.csv"], student_layers=2,
                     epochs=3, batch_size=32, lr=1e-4, eval_sts=tmp_path / "dev-slice.csv", heldout=0,
                     cache_dir=tmp_path / "cache", seed=0)
    assert result.corpus["training_pairs"] == result.corpus["pairs"]["pairs"] == 298  # 300 rows, 2 repeated
    assert result.train["steps"] == 3 * 19  # 298 pairs, 16 a batch
    assert _pair_gap(result.task) < 0.5 * _pair_gap(untrained.task)
    e = result.eval
    assert e["best"] > e["initial"] + 1.0, e  # measured: 74.8 -> 76.8
    prov = json.loads((tmp_path / "pairs" / "espresso.json").read_text())
    assert prov["training"]["loss"] == "pair" and prov["training"]["pairs_per_batch"] == 16
    assert prov["corpus"]["pairs"]["sources"][0] == {"spec": str(tmp_path / "train.csv"), "pairs": 300, "kept": 298}


def test_pair_files_of_every_kind_become_distinct_sentence_pairs(tmp_path, shared_data):
    from espresso_export.data import read_sentence_pairs
    from espresso_export.distilling import add_pair_sentences

    (tmp_path / "p.jsonl").write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "b", "positive": "a"}\n'
                                      '{"anchor": "c", "positive": "c"}\n{"anchor": "c", "positive": "d"}\n')
    (tmp_path / "t.tsv").write_text("a\tb\tx\ne\tf\tg\n")
    pairs, counts = read_sentence_pairs([tmp_path / "p.jsonl", tmp_path / "t.tsv"])
    assert pairs == [("a", "b"), ("c", "d"), ("e", "f"), ("a", "x"), ("e", "g")]  # reversed and self pairs dropped
    assert counts["sources"] == [{"spec": str(tmp_path / "p.jsonl"), "pairs": 4, "kept": 2},
                                 {"spec": str(tmp_path / "t.tsv"), "pairs": 4, "kept": 3}]
    sts, _ = read_sentence_pairs(shared_data / "stsb" / "sts-dev.csv")
    nli, _ = read_sentence_pairs(shared_data / "nli" / "snli-dev-test.tsv.gz", limit=300)
    assert 1400 < len(sts) <= 1500 and len(nli) > 100
    sentences, rows, added = add_pair_sentences(["x", "a"], pairs)
    assert sentences == ["x", "a", "b", "c", "d", "e", "f", "g"] and added == 6
    assert [(sentences[i], sentences[j]) for i, j in rows] == pairs
    (tmp_path / "one.jsonl").write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "b", "positive": "a"}\n')
    with pytest.raises(ValidationError, match="1 distinct pairs"):
        read_sentence_pairs(tmp_path / "one.jsonl")


def test_pair_loss_inputs_are_checked(tiny_bert, corpus_file, tmp_path):
    lines = corpus_file.read_text(encoding="utf-8").splitlines()
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in zip(lines[0:200:2], lines[1:200:2])), encoding="utf-8")
    with pytest.raises(ValidationError, match="--loss pair needs --pairs"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, loss="pair")
    with pytest.raises(ValidationError, match="--pairs trains with a pair loss"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, pairs=[pairs], loss="mse")
    with pytest.raises(ValidationError, match="--augment adds single sentences"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, pairs=[pairs], augment=["synonym"])
    with pytest.raises(ValidationError, match="--layer-targets works with the mse losses"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, pairs=[pairs], layer_targets=True)
    with pytest.raises(ValidationError, match="give a --corpus of sentences, or --pairs"):
        distill(tiny_bert, tmp_path / "o", dim=8, student_layers=2)
    with pytest.raises(ValidationError, match="100 pairs are left for training .* fewer than one batch"):
        _tiny(tiny_bert, tmp_path, corpus=corpus_file, pairs=[pairs], batch_size=256)


def test_cli_distill_with_pairs_only_defaults_to_the_pair_loss(tiny_models, tiny_bert, corpus_file, tmp_path, capsys):
    lines = corpus_file.read_text(encoding="utf-8").splitlines()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": a, "positive": b}) + "\n"
                             for a, b in zip(lines[0:120:2], lines[1:120:2])), encoding="utf-8")
    code = main(["distill", "--teacher", str(tiny_bert), "--student", str(tiny_models["roberta"]), "--dim", "8",
                 "--pairs", str(pairs), "--batch-size", "16", "--max-steps", "2", "--heldout", "0",
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "out"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["corpus"]["training_sentences"] == 120 and out["corpus"]["training_pairs"] == 60
    training = json.loads((tmp_path / "out" / "espresso.json").read_text())["training"]
    assert training["loss"] == "pair" and training["lr"] == 5e-5 and training["pairs_per_batch"] == 8
    code = main(["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--pairs", str(pairs),
                 "--corpus", str(corpus_file), "--loss", "pair+mse", "--batch-size", "16", "--max-steps", "1",
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "out2")])
    assert code == 0
    summary = " ".join(capsys.readouterr().out.split())  # the table wraps its cells
    assert "270 sentences + 30 held out" in summary and "60 distinct pairs (0 sentences added)" in summary


def test_one_named_loss_in_the_bar_the_epoch_line_the_table_and_the_json(tiny_bert, corpus_file, tmp_path, capsys,
                                                                          monkeypatch):
    """The bar showed a smoothed loss, the epoch line the epoch mean and the table the last step's: three
    numbers for one run. Now every view shows the epoch-mean loss, named so."""
    import re

    monkeypatch.setenv("ESPRESSO_PROGRESS_SECONDS", "0")  # a log line per step (stderr is not a terminal here)
    args = ["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--corpus", str(corpus_file),
            "--batch-size", "64", "--eval-sts", "builtin", "--eval-limit", "40", "--heldout", "0", "--cache-dir",
            str(tmp_path / "cache")]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    bar = re.findall(r"healing: \d+/\d+ \(100%\), epoch-mean loss ([\d.e+-]+)", err)
    line = re.findall(r"epoch 1: eval -?[\d.]+ \(best[^)]*\), epoch-mean loss ([\d.e+-]+)", err)
    table = re.findall(r"epoch-mean loss ([\d.e+-]+)", re.sub(r"[\s│]+", " ", out))  # the table may fold a row
    assert bar and line and table and bar[-1] == line[-1] == table[-1], (err, out)
    assert "final loss" not in out and "mean loss" not in err.replace("epoch-mean loss", "")
    assert main([*args, "-o", str(tmp_path / "b"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "final_loss" not in result["train"]
    assert f"{result['train']['epoch_mean_loss']:.4g}" == table[-1]
    assert result["eval"]["history"][-1]["loss"] == pytest.approx(result["train"]["epoch_mean_loss"], abs=1e-6)


def test_the_in_batch_ranking_term_against_a_hand_computed_example():
    """KL(teacher || student) of each row's softmax over its cosines to the other rows, temperature 1:
    row 0: teacher p = (1, e^0.7071)/(1 + e^0.7071) = (0.33024, 0.66976), student the reverse:
    KL = (0.66976 - 0.33024) * 0.70711 = 0.24008; row 1: teacher (0.33024, 0.66976), student (0.5, 0.5):
    0.05882; row 2: teacher (0.5, 0.5), student (0.33024, 0.66976): 0.06122; mean 0.12004."""
    from espresso_export.distilling.tasks import rank_kl

    teacher = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    student = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert float(rank_kl(student, teacher, temperature=1.0)) == pytest.approx(0.12004, abs=2e-5)
    # cosines only: row scale does not matter; a student that ranks like the teacher scores 0
    assert float(rank_kl(student * torch.tensor([[3.0], [0.5], [2.0]]), teacher, temperature=1.0)) == \
        pytest.approx(0.12004, abs=2e-5)
    assert float(rank_kl(teacher * 7.0, teacher, 0.1)) == pytest.approx(0.0, abs=1e-6)
    assert float(rank_kl(student[:1], teacher[:1], 0.1)) == 0.0  # one text ranks nothing
    # a lower temperature (the default 0.1) sharpens it; the gradient reaches the student
    x = student.clone().requires_grad_(True)
    value = rank_kl(x, teacher, 0.1)
    value.backward()
    assert float(value.detach()) > 0.12004 and torch.isfinite(x.grad).all() and float(x.grad.abs().sum()) > 0


# --- mixed precision -----------------------------------------------------------------------------------

def test_auto_precision_is_bf16_only_on_a_cpu_with_bf16_instructions(tmp_path):
    from espresso_export.core.cpu import bf16_isa
    from espresso_export.training.schedule import cpu_auto_amp

    cpus = {"zen4": "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16\n",
            "spr": "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_int8\n",
            "avx2": "flags\t\t: fpu sse2 avx2 fma\n",
            "arm": "Features\t: fp asimd bf16 i8mm\n"}
    for name, text in cpus.items():
        (tmp_path / name).write_text(text)
    assert [bf16_isa(tmp_path / n) for n in cpus] == ["avx512_bf16", "amx_bf16", None, "bf16"]
    assert bf16_isa(tmp_path / "missing") is None
    avx2, zen4 = tmp_path / "avx2", tmp_path / "zen4"
    assert cpu_auto_amp("auto", "cpu", avx2) == "auto"  # no bf16 in hardware: full precision stays
    assert cpu_auto_amp("off", "cpu", zen4) == "off" and cpu_auto_amp("bf16", "cpu", avx2) == "bf16"  # as asked
    assert cpu_auto_amp("auto", "cuda", zen4) == "auto"  # CUDA's own rule applies there
    if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert cpu_auto_amp("auto", "cpu", zen4) == "bf16"


def test_bf16_distill_keeps_its_teacher_pass_apart_close_to_fp32_and_says_so(tiny_bert, corpus_file, tmp_path):
    fp32 = _tiny(tiny_bert, tmp_path, "fp32", corpus=corpus_file, amp="off", epochs=1)
    bf16 = _tiny(tiny_bert, tmp_path, "bf16", corpus=corpus_file, amp="bf16", epochs=1)
    folders = sorted((tmp_path / "cache").glob("teacher-*"))
    assert len(folders) == 2  # one cache per precision: bf16 targets never stand in for fp32 ones
    by_precision = {json.loads((f / "meta.json").read_text())["precision"]: f for f in folders}
    assert set(by_precision) == {"fp32", "bfloat16"}
    a, b = (np.load(by_precision[k] / "embeddings.npy") for k in ("fp32", "bfloat16"))
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99 and not np.array_equal(a, b)  # the same function, computed in bf16
    assert fp32.precision == "fp32" and bf16.precision.startswith("bf16")
    for out, result in (("fp32", fp32), ("bf16", bf16)):
        prov = json.loads((tmp_path / out / "espresso.json").read_text())
        assert prov["training"]["precision"] == result.precision == result.to_dict()["precision"]
    # the saved weights are fp32 (autocast keeps fp32 master weights) and the model trained
    assert load(tmp_path / "bf16").model.embeddings.word_embeddings.weight.dtype == torch.float32
    assert np.isfinite(bf16.train["epoch_mean_loss"])


def test_mixed_precision_states_are_pooled_in_fp32():
    from espresso_export.core.types import Pooling
    from espresso_export.model.embed import pool

    states = (torch.randn(2, 300, 8) + 100).bfloat16()  # a long text: a bf16 running sum would drift
    mask = torch.ones(2, 300, dtype=torch.long)
    out = pool(states, mask, Pooling.MEAN)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, states.double().mean(1).float(), rtol=1e-6, atol=1e-5)


def test_frozen_embeddings_stay_the_teachers_while_the_layers_train(tiny_bert, corpus_file, tmp_path):
    _tiny(tiny_bert, tmp_path, "frozen", corpus=corpus_file, freeze_embeddings=True, epochs=1)
    _tiny(tiny_bert, tmp_path, "trained", corpus=corpus_file, epochs=1)
    source, frozen, trained = (load(p).model for p in (tiny_bert, tmp_path / "frozen", tmp_path / "trained"))
    words = lambda m: m.get_input_embeddings().weight  # noqa: E731
    torch.testing.assert_close(words(frozen), words(source), rtol=0, atol=0)
    assert not torch.equal(words(trained), words(source))  # the default trains them
    layer = lambda m: m.encoder.layer[0].attention.self.query.weight  # noqa: E731
    assert not torch.equal(layer(frozen), layer(source))
    prov = json.loads((tmp_path / "frozen" / "espresso.json").read_text())
    assert prov["training"]["freeze_embeddings"] is True


def test_prune_corpus_prunes_the_trained_student_as_prune_vocab_would(tiny_bert, corpus_file, tmp_path):
    """distill --prune-corpus (what auto's recipe rebuilds a pruned heal with) = distill, then prune-vocab."""
    from espresso_export.model.embed import encode
    from espresso_export.model.vocabulary import find_pruning
    from espresso_export.shrinking.pruning import prune_vocab

    keep = tmp_path / "keep.txt"
    keep.write_text("the dog runs in the house\na red car\n", encoding="utf-8")
    result = _tiny(tiny_bert, tmp_path, "pruned", corpus=corpus_file, epochs=1, prune_corpus=[str(keep)])
    _tiny(tiny_bert, tmp_path, "whole", corpus=corpus_file, epochs=1)
    after = prune_vocab(tmp_path / "whole", tmp_path / "whole-pruned", corpus=[str(keep)])
    pruned, again = load(tmp_path / "pruned"), load(tmp_path / "whole-pruned")
    assert pruned.n_params == again.n_params == result.params < load(tmp_path / "whole").n_params
    assert after.vocab_after < after.vocab_before
    texts = ["the dog runs", "a red car in the house"]
    np.testing.assert_allclose(encode(pruned, texts), encode(again, texts), atol=1e-6)
    assert find_pruning(pruned.provenance)["corpus"]["sentences"] == 2
    with pytest.raises(ValidationError):  # a missing corpus fails before the training
        _tiny(tiny_bert, tmp_path, "missing", corpus=corpus_file, prune_corpus=[str(tmp_path / "nope.txt")])
    assert not (tmp_path / "missing").exists()
