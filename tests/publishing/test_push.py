"""``push``: staging (--dry-run), the model card, and uploads through huggingface-hub's real client.

The uploads go to ``fake_hub.FakeHub`` on 127.0.0.1 (``HF_ENDPOINT``), in a subprocess because
huggingface-hub reads ``HF_ENDPOINT`` / ``HF_HUB_OFFLINE`` / ``HF_HUB_DISABLE_XET`` at import.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from espresso_export.publishing.facts import read_model
from espresso_export.publishing.report_metrics import parse_report
from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
REPORT = Path(__file__).parents[1] / "data" / "verify_report.json"
TOKEN = "hf_pushTestSecret0123456789abcdefXYZ"
REPO = "me/tiny-small"
BASE_FILES = {
    "README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json", "1_Pooling/config.json",
    "3_Dense/config.json", "3_Dense/model.safetensors", "espresso.json",
}


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder``: relative path -> sha256."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n", 2)[1])


def write_report(path: Path, candidate: Path | None = None) -> Path:
    report = json.loads(REPORT.read_text())
    if candidate is not None:
        report["candidate"]["path"] = report["candidate"]["spec"] = str(candidate)
    path.write_text(json.dumps(report))
    return path


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    """`--debug` in an earlier test leaves ESPRESSO_DEBUG=1 in os.environ; these tests check the one-line errors."""
    monkeypatch.delenv("ESPRESSO_DEBUG", raising=False)


@pytest.fixture(scope="module")
def shrunk(tiny_bert, calibration_file, tmp_path_factory) -> Path:
    """A 2-layer, 8-d PCA-head model made by shrink (read-only: copy it to modify)."""
    from espresso_export import shrink

    out = tmp_path_factory.mktemp("push") / "small"
    shrink(tiny_bert, out, layers=2, dim=8, calibration=calibration_file)
    return out


@pytest.fixture(scope="module")
def truncated(tiny_bert, tmp_path_factory) -> Path:
    from espresso_export import shrink

    out = tmp_path_factory.mktemp("push") / "trunc"
    shrink(tiny_bert, out, layers=2, dim=8, head="truncate")
    return out


@pytest.fixture
def onnx_export(shrunk, tmp_path) -> Path:
    """An export folder by the contract of `export`: export.json, model*.onnx and the tokenizer files."""
    import onnx
    from onnx import TensorProto, helper

    folder = tmp_path / "export"
    folder.mkdir()
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])])
    onnx.save(helper.make_model(graph), str(folder / "model.onnx"))
    onnx.save(helper.make_model(graph), str(folder / "model_int8.onnx"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(shrunk / name, folder / name)
    (folder / "export.json").write_text(json.dumps({"source": str(shrunk), "dim": 8, "opset": 17}))
    return folder


@pytest.fixture
def fake_hub():
    hubs: list[FakeHub] = []

    def start(**kwargs) -> FakeHub:
        hubs.append(FakeHub(token=TOKEN, **kwargs).start())
        return hubs[-1]

    yield start
    for hub in hubs:
        hub.stop()


def push_subprocess(hub: FakeHub, tmp_path: Path, *args, token: str | None = TOKEN, xet: bool = True,
                    extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf-home"), PYTHONPATH=str(ROOT),
               HF_HUB_DISABLE_TELEMETRY="1")
    if token is not None:
        env["HF_TOKEN"] = token
    if not xet:
        env["HF_HUB_DISABLE_XET"] = "1"
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "espresso_export", "push", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)


# --- the verify report adapter --------------------------------------------------------------------


def test_metrics_adapter_reads_the_verify_report_schema():
    m = parse_report(json.loads(REPORT.read_text()))
    assert m.source == "minilm" and m.candidate_dim == 8 and m.threads == 2 and m.gate_passed is True
    assert [(s.name, s.pairs, s.retention, s.smoke) for s in m.sts] == [
        ("sts-smoke", 173, 0.9323, True), ("sts-test", 1379, 0.9372, False)]
    assert [(b.batch_size, b.ratio, b.speedup) for b in m.latency] == [(1, 0.4622, 2.1232), (32, 0.4509, 2.1835)]
    assert m.retrieval[0].candidate_mrr == 0.611204 and m.retrieval[0].mrr_retention == 0.9142
    assert (m.retrieval[0].candidate_ndcg, m.retrieval[0].ndcg_retention) == (0.512345, 0.9147)
    assert (m.retrieval[0].candidate_recall_100, m.retrieval[0].source_recall_100) == (0.702001, 0.76025)
    assert m.size["parameters"] == (11456, 22713216, 0.0005) and len(m.gate) == 4


def test_metrics_adapter_reads_reports_without_ndcg():
    """Reports written before nDCG@10 and recall@100 existed still read: those fields are None, not an error."""
    report = json.loads(REPORT.read_text())
    for row in report["retrieval"]:
        for side in ("candidate", "source"):
            del row[side]["ndcg_at_10"], row[side]["recall_at_100"]
        del row["ndcg_retention"], row["recall_at_100_retention"]
    r = parse_report(report).retrieval[0]
    assert (r.candidate_mrr, r.candidate_ndcg, r.ndcg_retention, r.candidate_recall_100) == (0.611204, None, None, None)


# --- --dry-run: staging and the card --------------------------------------------------------------


def test_dry_run_stages_the_expected_files_with_card_metrics(shrunk, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    write_report(folder / "verify_report.json", candidate=folder)  # found in the folder
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    (folder / "README.md").write_text("old card")
    (folder / "notes.md").write_text("scratch")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "x.lock").write_text("")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out = tmp_path / "staged"
    code, stdout, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", out, "--json", "--token", TOKEN)
    assert code == 0, err
    result = json.loads(stdout)
    staged = tree(out)
    assert set(staged) == BASE_FILES | {"verify_report.json"}
    assert {f["path"]: f["sha256"] for f in result["files"]} == staged
    assert {s["path"] for s in result["skipped"]} == {"pytorch_model.bin", "README.md", "notes.md", ".cache/x.lock"}
    assert result["card"]["metrics"] is True and result["dry_run"] == str(out.resolve()) and result["url"] is None
    for name in ("model.safetensors", "3_Dense/model.safetensors", "tokenizer.json", "modules.json"):
        assert staged[name] == hashlib.sha256((folder / name).read_bytes()).hexdigest()

    card = (out / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert {"espresso-export", "sentence-transformers", "feature-extraction", "pca-head"} <= set(meta["tags"])
    assert "base_model" not in meta  # the source is a local folder, not a Hub id
    results = meta["model-index"][0]["results"]
    assert meta["model-index"][0]["name"] == REPO
    sts_test = next(r for r in results if r["dataset"]["name"] == "sts-test")
    assert {m["type"]: m["value"] for m in sts_test["metrics"]} == {"spearman_cosine": 0.7688,
                                                                    "spearman_cosine_retention": 0.9372}
    retrieval = next(r for r in results if r["task"]["type"] == "information-retrieval")["metrics"]
    assert {m["type"]: m["value"] for m in retrieval} == {
        "cosine_mrr@10": 0.6112, "cosine_ndcg@10": 0.5123, "cosine_recall@100": 0.702,
        "cosine_ndcg@10_retention": 0.9147, "cosine_recall@10": 0.4021, "cosine_mrr@10_retention": 0.9142}
    # the retention / latency / size table and the gate
    for text in ("| STS Spearman x100, sts-test (1379 pairs) | 76.88 | 82.03 | 0.9372 retained |",
                 "| latency, batch 32 (ms per batch) | 14.2 | 31.6 | 0.451 (2.18x faster) |",
                 "| nDCG@10, dbpedia-5k (400 queries, 5000 docs) | 0.5123 | 0.5601 | 0.9147 retained |",
                 "| recall@100, dbpedia-5k (400 queries, 5000 docs) | 0.7020 | 0.7602 | 0.9234 retained |",
                 "| parameters | 0.01M | 22.71M | 0.001 |", "Quality gate: **passed**."):
        assert text in card, text
    assert "built-in smoke set" not in card  # said only when the smoke set is the only STS set
    # huggingface-hub's own parser reads the model-index back
    from huggingface_hub import ModelCard

    evals = ModelCard(card).data.eval_results
    assert any(e.metric_type == "spearman_cosine" and e.metric_value == 0.7688 and e.dataset_name == "sts-test"
               for e in evals)
    # no local paths and no token in anything staged or printed
    blob = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert b"/home/user" not in blob and str(tmp_path).encode() not in blob
    assert TOKEN.encode() not in blob and TOKEN not in stdout + err
    assert json.loads((out / "verify_report.json").read_text())["sts"]["sets"][1]["candidate_spearman"] == 76.8812


def test_dry_run_output_is_atomic(shrunk, tmp_path, capsys):
    out = tmp_path / "staged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--dry-run", out)
    assert code == 2 and "already exists" in err and tree(out) == {"keep.txt": hashlib.sha256(b"mine").hexdigest()}
    code, _, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--dry-run", out, "--overwrite")  # not ours
    assert code == 2 and "replaces only a folder espresso-export wrote" in err and (out / "keep.txt").is_file()
    (out / "keep.txt").unlink()
    for _ in range(2):  # into the empty folder, then over the staged one
        code, _, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--dry-run", out, "--overwrite")
        assert code == 0 and set(tree(out)) == BASE_FILES and not list(tmp_path.glob(".staged.*"))


@pytest.mark.parametrize(("family", "pooling", "head"), [
    ("bert", None, "pca"), ("bert", "cls", "truncate"), ("bert", "max", "none"), ("qwen2", None, "none"),
])
def test_card_transformers_snippet_reproduces_the_embeddings(shrunk, tiny_models, tmp_path, capsys, family, pooling,
                                                             head):
    """What the card tells a plain transformers user to run gives sentence-transformers' vectors."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from espresso_export import encode, load, shrink

    model = shrunk
    if head != "pca":
        model = tmp_path / "model"
        shrink(tiny_models[family], model, layers=2, dim=8 if head == "truncate" else None, head=head, pooling=pooling)
    out = tmp_path / "staged"
    assert run(capsys, "push", model, "--repo-id", REPO, "--dry-run", out)[0] == 0
    card = (out / "README.md").read_text()
    snippet = re.search(r"### transformers\n.*?```python\n(.*?)```", card, re.S).group(1)
    marker = {"mean": "# mean pooling", "cls": "# CLS pooling", "max": "# max pooling", "lasttoken": "# last real token"}
    assert marker[pooling or ("lasttoken" if family == "qwen2" else "mean")] in snippet
    namespace: dict = {}
    exec(snippet.replace(f'snapshot_download("{REPO}")', repr(str(out))), namespace)
    texts = ["A man is playing a guitar.", "the cat sleeps in the big house", "dogs play football today"]
    by_hand = namespace["embed"](texts).numpy()
    st = SentenceTransformer(str(out), device="cpu").encode(texts)
    ours = encode(load(out), texts)
    assert by_hand.shape == ours.shape == (3, 8 if head != "none" else 32)
    np.testing.assert_allclose(by_hand, st, atol=1e-5)
    np.testing.assert_allclose(by_hand, ours, atol=1e-5)
    assert f'SentenceTransformer("{REPO}")' in card


def test_truncate_head_declares_matryoshka_dimensions(truncated, shrunk, tmp_path, capsys):
    from transformers import AutoConfig

    out = tmp_path / "staged"
    assert run(capsys, "push", truncated, "--repo-id", REPO, "--dry-run", out)[0] == 0
    assert front_matter((out / "README.md").read_text())["matryoshka_dimensions"] == [8]
    assert json.loads((out / "config.json").read_text())["matryoshka_dimensions"] == [8]
    assert json.loads((out / "config_sentence_transformers.json").read_text())["matryoshka_dimensions"] == [8]
    assert "matryoshka_dimensions" not in json.loads((truncated / "config.json").read_text())  # input untouched

    # an ESE-trained model lists the widths it was trained for; serving stacks read them from config.json
    folder = tmp_path / "ese"
    shutil.copytree(truncated, folder)
    prov = json.loads((folder / "espresso.json").read_text())
    prov["ese"] = {"dims": [8, 4, 2], "layers": [1, 2]}
    (folder / "espresso.json").write_text(json.dumps(prov))
    out2 = tmp_path / "staged-ese"
    assert run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", out2)[0] == 0
    card = (out2 / "README.md").read_text()
    meta = front_matter(card)
    assert meta["matryoshka_dimensions"] == [8, 4, 2] and {"ese", "matryoshka", "truncate-head"} <= set(meta["tags"])
    assert AutoConfig.from_pretrained(out2).matryoshka_dimensions == [8, 4, 2]
    assert "## Matryoshka dimensions" in card and "truncate_dim=4" in card

    # `train --ese` records the width it trained (compression_dim): no halvings it never trained are declared
    prov["ese"] = {"compression_dim": 4}
    (folder / "espresso.json").write_text(json.dumps(prov))
    out4 = tmp_path / "staged-ese-k"
    assert run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", out4)[0] == 0
    assert front_matter((out4 / "README.md").read_text())["matryoshka_dimensions"] == [8, 4]

    # a PCA head of a model that was not ESE-trained declares none
    out3 = tmp_path / "staged-pca"
    assert run(capsys, "push", shrunk, "--repo-id", REPO, "--dry-run", out3)[0] == 0
    assert "matryoshka_dimensions" not in json.loads((out3 / "config.json").read_text())
    assert "matryoshka_dimensions" not in front_matter((out3 / "README.md").read_text())


def test_lineage_walks_the_parent_chain_to_the_hub_source(shrunk, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    first = json.loads((folder / "espresso.json").read_text())
    first["source"]["id"] = "sentence-transformers/all-MiniLM-L6-v2"
    distill = {"espresso_version": "0.1.0", "step": "distill",
               "teacher": {"id": "sentence-transformers/all-mpnet-base-v2", "depth": 12, "hidden_size": 768},
               "student": {"id": str(folder), "depth": 2, "hidden_size": 32, "layers": None},
               "dim": 8, "pooling": "mean", "corpus": {"sha256": "ab", "sentences": 5000},
               "training": {"steps": 300, "epochs": 1, "batch_size": 32, "lr": 5e-5, "loss": "mse"},
               "best_eval": {"sts": "/data/sts-dev.csv", "initial": 60.0, "best": 71.5}, "parent": first}
    (folder / "espresso.json").write_text(json.dumps(distill))
    facts = read_model(folder)
    assert [s["step"] for s in facts.lineage] == ["shrink", "distill"]
    assert facts.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    from espresso_export.publishing.card import render_card

    card = render_card(facts, REPO)
    meta = front_matter(card)
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and "distillation" in meta["tags"]
    lineage = card.split("## Lineage", 1)[1].split("##", 1)[0]
    assert "1. source: [sentence-transformers/all-MiniLM-L6-v2]" in lineage
    assert "2. **shrink**" in lineage and "3. **distill**" in lineage and "all-mpnet-base-v2" in lineage
    assert "steps 300" in lineage and "best eval 71.50 (from 60.00)" in lineage and str(folder) not in card
    assert "layers None" not in lineage  # a student that was not cut has no layer list
    assert "without retraining" not in card


def test_onnx_export_is_staged_under_onnx(shrunk, onnx_export, tmp_path, capsys):
    out = tmp_path / "staged"
    code, stdout, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--onnx", onnx_export, "--dry-run", out, "--json")
    assert code == 0, err
    staged = tree(out)
    onnx_files = {k for k in staged if k.startswith("onnx/")}
    assert onnx_files == {f"onnx/{p.name}" for p in onnx_export.iterdir()}
    assert staged["onnx/model_int8.onnx"] == hashlib.sha256((onnx_export / "model_int8.onnx").read_bytes()).hexdigest()
    assert json.loads((out / "onnx" / "export.json").read_text())["source"] == "small"  # local path cut
    card = (out / "README.md").read_text()
    assert "onnx" in front_matter(card)["tags"] and "from espresso_export.runtime import OnnxEncoder" in card
    assert 'OnnxEncoder(f"{folder}/onnx")' in card and "`onnx/model_int8.onnx`" in card

    # an export inside the model folder, FOLDER/onnx, is found without --onnx
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    shutil.copytree(onnx_export, folder / "onnx")
    out2 = tmp_path / "staged2"
    assert run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", out2)[0] == 0
    assert set(tree(out2)) == BASE_FILES | onnx_files


def test_not_an_export_folder_is_refused(shrunk, tmp_path, capsys):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "model.onnx").write_bytes(b"x")
    code, _, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--onnx", tmp_path / "exp", "--dry-run", tmp_path / "o")
    assert code == 2 and "export.json" in err and not (tmp_path / "o").exists()


def test_folder_not_made_by_espresso_export_warns_and_has_no_metrics(tiny_bert, tmp_path, capsys):
    folder = tmp_path / "plain"
    shutil.copytree(tiny_bert, folder)
    write_report(folder / "verify_report.json", candidate=folder)
    out = tmp_path / "staged"
    code, stdout, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", out, "--json")
    assert code == 0, err
    assert "not made by espresso-export" in err and "mean pooling" in err
    card = (out / "README.md").read_text()
    meta = front_matter(card)
    assert "model-index" not in meta and "base_model" not in meta
    assert "No `espresso-export verify` report" in card and "lineage is unknown" in card
    assert "verify_report.json" not in tree(out) and json.loads(stdout)["card"]["metrics"] is False


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["noslash", "a/b/c", "-bad/name", "me/na--me", "me/name.git", "me/" + "x" * 97,
                                     "me/bad name", "me/", "/name", "me/name."])
def test_malformed_repo_id_exit_2(shrunk, tmp_path, capsys, repo_id):
    code, _, err = run(capsys, "push", shrunk, "--repo-id", repo_id, "--dry-run", tmp_path / "o")
    assert code == 2 and "--repo-id must be owner/name" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_folder_not_a_model_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "push", empty, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "not a model folder: no config.json" in err
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (pickled / "pytorch_model.bin").write_bytes(b"x")
    code, _, err = run(capsys, "push", pickled, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "pickle" in err and "safetensors only" in err
    code, _, err = run(capsys, "push", tmp_path / "missing", "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "not found" in err and not (tmp_path / "o").exists()


def test_truncated_weights_exit_2(shrunk, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    code, _, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "truncated" in err


@pytest.mark.parametrize(("content", "message"), [("[1, 2]", "expected a JSON object"), ("{not json", "cannot read"),
                                                  ('{"sts": {}}', "not a verify report")])
def test_bad_verify_report_exit_2(shrunk, tmp_path, capsys, content, message):
    report = tmp_path / "report.json"
    report.write_text(content)
    code, _, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--verify-report", report, "--dry-run", tmp_path / "o")
    assert code == 2 and message in err and "report.json" in err


# --- uploads through huggingface-hub's client to a local Hub --------------------------------------


def _expected_upload(shrunk: Path, tmp_path: Path, capsys, *extra) -> dict[str, str]:
    out = tmp_path / "expected"
    assert run(capsys, "push", shrunk, "--repo-id", REPO, "--dry-run", out, *extra)[0] == 0
    return tree(out)


def test_push_end_to_end_lfs_private_branch(shrunk, tmp_path, capsys, fake_hub):
    """LFS upload path (hf_xet disabled): create_repo(private) -> branch -> preupload -> LFS batch/PUT/verify -> commit."""
    report = write_report(tmp_path / "report.json", candidate=shrunk)
    expected = _expected_upload(shrunk, tmp_path, capsys, "--verify-report", report)
    hub = fake_hub(lfs=True)
    res = push_subprocess(hub, tmp_path, shrunk, "--repo-id", REPO, "--private", "--revision", "dev",
                          "--verify-report", report, "--commit-message", "tiny upload", "--json", xet=False,
                          extra_env={"HF_HUB_VERBOSITY": "debug"})
    assert res.returncode == 0, res.stderr
    assert hub.repos[REPO]["payload"]["visibility"] == "private" and hub.branches == [(REPO, "dev")]
    [commit] = hub.commits
    assert commit.revision == "dev" and not commit.create_pr and commit.summary == "tiny upload"
    assert commit.files == expected and "README.md" in expected and "verify_report.json" in expected
    assert sorted(commit.lfs_paths) == ["3_Dense/model.safetensors", "model.safetensors"]
    assert {expected[p] for p in commit.lfs_paths} == set(hub.storage)
    result = json.loads(res.stdout)
    assert {f["path"]: f["sha256"] for f in result["files"]} == expected
    assert result["commit_oid"] in result["commit_url"] and result["pr_url"] is None and result["private"] is True
    assert hub.yaml_checked[0]["model-index"][0]["name"] == REPO and not hub.unhandled
    api_calls = [r for r in hub.requests if not r["path"].startswith(("/lfs-storage/", "/api/agent-harnesses"))]
    assert len(api_calls) >= 7 and all(r["authorization"] == f"Bearer {TOKEN}" for r in api_calls)
    assert TOKEN not in res.stdout + res.stderr  # huggingface-hub debug logging included


def test_push_create_pr_plain_commit_path(shrunk, tmp_path, capsys, fake_hub):
    """hf_xet left enabled: the Hub answers "regular" for every file, so content goes inline in the commit."""
    expected = _expected_upload(shrunk, tmp_path, capsys)
    hub = fake_hub(lfs=False)
    res = push_subprocess(hub, tmp_path, shrunk, "--repo-id", REPO, "--create-pr", "--json", xet=True)
    assert res.returncode == 0, res.stderr
    [commit] = hub.commits
    assert commit.create_pr and commit.revision == "main" and commit.files == expected and not commit.lfs_paths
    assert "visibility" not in hub.repos[REPO]["payload"]  # no --private: the namespace default
    preupload = next(r for r in hub.requests if "/preupload/" in r["path"])
    assert preupload["query"] == {"create_pr": ["1"]}
    result = json.loads(res.stdout)
    assert result["pr_url"].endswith("/discussions/1") and result["create_pr"] is True
    assert TOKEN not in res.stdout + res.stderr and not hub.unhandled


def test_push_twice_reuses_the_repository(shrunk, tmp_path, fake_hub):
    hub = fake_hub(lfs=False)
    for _ in range(2):
        res = push_subprocess(hub, tmp_path, shrunk, "--repo-id", REPO)
        assert res.returncode == 0, res.stderr
    assert len(hub.commits) == 2 and list(hub.repos) == [REPO]
    assert "commit" in res.stdout and TOKEN not in res.stdout + res.stderr


@pytest.mark.parametrize(("server", "token", "message"), [
    ({"fail_status": 403}, TOKEN, "may not write to me/tiny-small (403 Forbidden)"),
    ({}, "hf_wrongTokenABCDEF123456", "rejected the token (401 Unauthorized)"),
])
def test_push_hub_refusals_are_one_line_and_mask_the_token(shrunk, tmp_path, fake_hub, server, token, message):
    hub = fake_hub(**server)
    res = push_subprocess(hub, tmp_path, shrunk, "--repo-id", REPO, token=token)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert token not in res.stdout + res.stderr and TOKEN not in res.stdout + res.stderr
    if server:
        assert "hf_***" in res.stderr  # the server echoed the token; it is masked
    assert not hub.commits


def test_push_without_token_exit_2(shrunk, tmp_path, fake_hub):
    hub = fake_hub()
    res = push_subprocess(hub, tmp_path, shrunk, "--repo-id", REPO, token=None)
    assert res.returncode == 2 and "no Hugging Face token: pass --token, set HF_TOKEN" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not [r for r in hub.requests if r["path"] != "/api/agent-harnesses"]


def test_push_hub_unreachable_exit_1(shrunk, tmp_path, fake_hub):
    hub = fake_hub()
    hub.stop()  # nothing listens on its port any more
    res = push_subprocess(hub, tmp_path, shrunk, "--repo-id", REPO)
    assert res.returncode == 1 and "cannot reach the Hugging Face Hub" in res.stderr and "Traceback" not in res.stderr
    assert TOKEN not in res.stdout + res.stderr


def test_card_onnx_snippet_runs_on_the_staged_files(shrunk, tmp_path, capsys):
    """The card's torch-free snippet, run as printed on what push stages, gives the real export's embeddings."""
    import numpy as np

    from espresso_export import export
    from espresso_export.runtime import OnnxEncoder

    exported = tmp_path / "export"
    export(shrunk, exported, validate=False)
    out = tmp_path / "staged"
    code, _, err = run(capsys, "push", shrunk, "--repo-id", REPO, "--onnx", exported, "--dry-run", out)
    assert code == 0, err
    card = (out / "README.md").read_text()
    snippet = re.search(r"### espresso-export `OnnxEncoder` \(no torch\)\n.*?```python\n(.*?)```", card, re.S).group(1)
    call = f'snapshot_download("{REPO}")'
    assert call in snippet
    namespace: dict = {}
    exec(snippet.replace(call, repr(str(out))), namespace)
    expected = OnnxEncoder(exported).encode(["A man is playing a guitar.", "Someone plays an instrument."])
    assert namespace["embeddings"].shape == expected.shape == (2, 8) and f"# {expected.shape}" in snippet
    assert np.allclose(namespace["embeddings"], expected, atol=1e-6)


def test_export_with_safetensors_is_pushed_as_the_runtimes_layout(shrunk, tmp_path, capsys):
    """`export --format onnx,safetensors` writes the repository layout itself: push stages it as it is, the graphs
    under onnx/ and export.json at the root, so every runtime loads the published repository."""
    from espresso_export import export

    both = tmp_path / "both"
    export(shrunk, both, formats=("onnx", "safetensors"), quantize="int8", validate=False)
    out = tmp_path / "staged"
    code, stdout, err = run(capsys, "push", both, "--repo-id", REPO, "--dry-run", out, "--json")
    assert code == 0, err
    staged = set(tree(out))
    assert {"onnx/model.onnx", "onnx/model_quantized.onnx", "export.json", "model.safetensors", "modules.json",
            "tokenizer.json", "tokenizer_config.json", "config.json"} <= staged
    assert not any(p.startswith("onnx/onnx/") for p in staged)
    assert not [s for s in json.loads(stdout)["skipped"] if s["path"].startswith("onnx/")]
    card = (out / "README.md").read_text()
    default = json.loads((both / "export.json").read_text())["default_file"]  # what OnnxEncoder(folder) loads
    # the snippets load the file the export recommends (they loaded model_quantized.onnx whatever it said); on a
    # tiny model the fp32 graph can be the faster one
    assert "## Load it with" in card and f'OnnxEncoder(snapshot_download("{REPO}"), "{default}")' in card
    if default != "onnx/model.onnx":
        assert f'model_kwargs={{"file_name": "{default}"}}' in card
    # transformers.js picks graphs by dtype only: the recommended file when it has a dtype name, else int8's
    js = default if default in ("onnx/model.onnx", "onnx/model_quantized.onnx") else "onnx/model_quantized.onnx"
    assert f"}});  // {js}" in card


def test_card_marks_a_speed_up_verify_did_not_trust():
    """A latency row verify marked unreliable keeps its '?' and its reasons on the card (not printed as a fact)."""
    from espresso_export.core.types import Pooling
    from espresso_export.publishing.card_sections import verification_section
    from espresso_export.publishing.facts import ModelFacts

    report = json.loads(REPORT.read_text())
    report["latency"]["batches"][1]["reasons"] = ["1-min load average 3.2 above 2 cores (other processes compete)"]
    facts = ModelFacts(folder=Path("m"), transformer_dir="", model_type="bert", decoder=False, layers=3,
                       hidden_size=8, pooling=Pooling.MEAN, pooling_declared=True, post=[], module_paths=[],
                       max_seq_length=128, do_lower_case=True, params=11456, weights_bytes=50_000, provenance=None,
                       metrics=parse_report(report))
    card = "\n".join(verification_section(facts))
    assert "Measured by `espresso-export verify` " in card and " on the PyTorch model against " in card
    report["candidate"] |= {"kind": "onnx", "file": "onnx/model_quantized.onnx"}  # verify of the export folder
    onnx_card = "\n".join(verification_section(replace(facts, metrics=parse_report(report))))
    assert " on `onnx/model_quantized.onnx` of the export (its parameters and bytes below are that file's)" in onnx_card
    assert "| latency, batch 1 (ms per batch) |" in card and "(2.12x faster) |" in card
    assert "(2.18x? faster) |" in card
    assert "? verify marked this speed measurement unreliable: batch 32: 1-min load average 3.2 above 2" in card


def test_card_license_comes_from_the_source_or_license_and_the_smoke_set_is_not_a_benchmark(shrunk, tmp_path,
                                                                                           capsys):
    """The card had no `license`, and put verify's built-in smoke set ("not a benchmark") into `model-index`."""
    import yaml

    report = json.loads((Path(__file__).parents[1] / "data" / "verify_report.json").read_text())
    smoke = next(s for s in report["sts"]["sets"] if s.get("smoke_set"))  # the stored report has both kinds
    folder = tmp_path / "m"
    shutil.copytree(shrunk, folder)
    (folder / "verify_report.json").write_text(json.dumps(report))
    assert run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "a")[0] == 0
    meta = yaml.safe_load((tmp_path / "a" / "README.md").read_text().split("---")[1])
    assert meta["license"] == "apache-2.0"  # the tiny source's card says so
    datasets = [r["dataset"]["name"] for r in meta["model-index"][0]["results"]]
    assert datasets and smoke["name"] not in datasets
    assert smoke["name"] in (tmp_path / "a" / "README.md").read_text().split("---", 2)[2]  # still in the body
    # a set measured on --sts-limit pairs is not the benchmark's result either (it read as the whole test set)
    for s in report["sts"]["sets"]:
        s["subset_of"] = None if s.get("smoke_set") else 2 * s["pairs"]
    (folder / "verify_report.json").write_text(json.dumps(report))
    assert run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "limited")[0] == 0
    meta = yaml.safe_load((tmp_path / "limited" / "README.md").read_text().split("---")[1])
    assert not [r for r in meta["model-index"][0]["results"] if r["task"]["type"] == "semantic-similarity"]
    (folder / "verify_report.json").write_text(json.dumps(json.loads((Path(__file__).parents[1] / "data" /
                                                                     "verify_report.json").read_text())))
    source = tmp_path / "unlicensed"  # a source whose card records no license
    shutil.copytree(folder, source)
    prov = json.loads((source / "espresso.json").read_text())
    prov["source"] = {**prov["source"], "id": str(tmp_path / "nowhere")} if isinstance(prov.get("source"), dict) \
        else str(tmp_path / "nowhere")
    (source / "espresso.json").write_text(json.dumps(prov))
    code, _, err = run(capsys, "push", source, "--repo-id", REPO, "--dry-run", tmp_path / "b")
    assert code == 2 and "pass --license" in err and not (tmp_path / "b").exists()
    assert run(capsys, "push", source, "--repo-id", REPO, "--dry-run", tmp_path / "c", "--license", "mit")[0] == 0
    assert yaml.safe_load((tmp_path / "c" / "README.md").read_text().split("---")[1])["license"] == "mit"


# --- a folder that would publish a broken repository is refused -----------------------------------


def _move_dense_outside(folder: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(folder / "3_Dense", outside / "3_Dense")
    return outside / "3_Dense"


def test_a_module_folder_linked_outside_the_model_folder_is_refused(shrunk, tmp_path, capsys):
    """It was silently left out: the repository's modules.json named a folder the upload did not hold."""
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    (folder / "3_Dense").symlink_to(_move_dense_outside(folder, tmp_path), target_is_directory=True)
    code, _, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "3_Dense" in err and "outside" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_module_path_leading_out_of_the_folder_is_refused(shrunk, tmp_path, capsys):
    """``..`` in modules.json read the head's weights from elsewhere and staged a repository whose modules.json
    points outside it."""
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    _move_dense_outside(folder, tmp_path)
    modules = json.loads((folder / "modules.json").read_text())
    for m in modules:
        if m["path"] == "3_Dense":
            m["path"] = "../elsewhere/3_Dense"
    (folder / "modules.json").write_text(json.dumps(modules))
    code, _, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "'../elsewhere/3_Dense'" in err and "outside" in err and not (tmp_path / "o").exists()


def test_a_verify_report_linked_outside_the_folder_is_refused(shrunk, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    (folder / "verify_report.json").symlink_to(write_report(tmp_path / "private-report.json", candidate=folder))
    code, _, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "verify_report.json links to" in err and "outside" in err
    assert not (tmp_path / "o").exists()


def test_a_folder_without_a_tokenizer_is_refused(shrunk, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    code, _, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "o")
    assert code == 2 and "has no tokenizer" in err and str(folder) in err and not (tmp_path / "o").exists()


def test_the_staged_folder_loads_as_the_model_it_came_from(shrunk, tmp_path):
    """push's last check before an upload: the staged folder, read as sentence-transformers reads it, is the model."""
    from espresso_export.publishing.loadable import check_loadable
    from espresso_export.publishing.staging import prepare, write_staging

    prepared = prepare(shrunk)
    staged = tmp_path / "staged"
    write_staging(prepared, staged, REPO)
    check_loadable(staged, prepared.facts)  # as staged: loads
    (staged / "3_Dense" / "model.safetensors").unlink()
    with pytest.raises(ValidationError, match="would not load.*3_Dense"):
        check_loadable(staged, prepared.facts)
    shutil.rmtree(staged)
    write_staging(prepared, staged, REPO)
    (staged / "tokenizer.json").unlink()
    with pytest.raises(ValidationError, match="staged repository has no tokenizer"):
        check_loadable(staged, prepared.facts)


def test_a_linked_folder_that_is_not_a_module_is_listed_as_skipped(shrunk, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(shrunk, folder)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.json").write_text("{}")
    (folder / "notes").symlink_to(tmp_path / "notes", target_is_directory=True)
    code, stdout, err = run(capsys, "push", folder, "--repo-id", REPO, "--dry-run", tmp_path / "o", "--json")
    assert code == 0, err
    assert {"path": "notes/", "reason": "a link to a folder: not followed"} in json.loads(stdout)["skipped"]
