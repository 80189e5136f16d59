"""``push`` of a static model (model2vec's format, ``distill --student static``) and its ONNX export: the card
tells what it is (a token table of its source, healed or not, its vocabulary, size and speed), its usage snippets
run as printed on the staged files, and the upload goes through huggingface-hub's real client to the fake Hub.

The tiny static model and its helpers are the static export tests' (tests/exporting/test_static_export.py); the
Hub and the push helpers are test_push.py's."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from exporting.test_static_export import _texts, static_folder  # noqa: F401  (the tiny static model, a fixture)
from test_push import (  # noqa: F401  (fake_hub and _no_debug: fixtures)
    REPO, _no_debug, fake_hub, front_matter, push_subprocess, run, tree,
)

pytest.importorskip("model2vec", reason="the static extra (model2vec) is not installed")

TEXTS = ["A man is playing a guitar.", "Someone plays an instrument."]  # usage.EXAMPLE_TEXTS


@pytest.fixture(scope="module")
def static_export(static_folder, tmp_path_factory):  # noqa: F811
    from espresso_export import export

    return export(static_folder, tmp_path_factory.mktemp("static-push") / "export", quantize="int8").output


@pytest.fixture(scope="module")
def static_report(static_folder, tiny_bert, tmp_path_factory):  # noqa: F811
    """verify's report on the static folder against its source, timed at batch 8 (a short budget)."""
    from espresso_export import verify

    report = verify(static_folder, tiny_bert, batch_sizes=[8], latency_budget=0.5, latency_rounds=2)
    path = tmp_path_factory.mktemp("static-report") / "verify.json"
    path.write_text(json.dumps(report.to_dict()))
    return path


@pytest.fixture(scope="module")
def staged(static_folder, static_export, static_report, tmp_path_factory):  # noqa: F811
    from espresso_export.publishing.push import push

    out = tmp_path_factory.mktemp("static-staged") / "staged"
    result = push(static_folder, REPO, onnx=static_export, verify_report=static_report, dry_run=out)
    return out, result


def _snippet(card: str, heading: str) -> str:
    return re.search(rf"#+ {re.escape(heading)}\n.*?```python\n(.*?)```", card, re.S).group(1)


def _run(snippet: str, folder) -> dict:
    """The snippet run as printed, the repository id replaced by the staged folder; its variables."""
    namespace: dict = {}
    exec(snippet.replace(f'snapshot_download("{REPO}")', repr(str(folder))).replace(f'"{REPO}"', repr(str(folder))),
         namespace)
    return namespace


def test_the_card_tells_what_a_static_model_is(staged, static_folder):  # noqa: F811
    out, result = staged
    card = (out / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "model2vec" and {"model2vec", "static-embeddings", "onnx"} <= set(meta["tags"])
    assert meta["license"] == "apache-2.0"  # the source's, not model2vec's default card's "mit"
    assert result.static and result.license == "apache-2.0" and result.metrics and result.onnx
    prov = json.loads((static_folder / "espresso.json").read_text())
    tokens, texts = prov["student"]["tokens"], prov["corpus"]["training_sentences"]
    assert "A static sentence-embedding model (16-d embeddings): a token table in" in card
    assert f"| architecture | static token table in model2vec's format: {tokens:,} tokens x 16 dims, no attention |" in card
    assert f"| healed on your documents | on {texts:,} texts (held-out cosine to the source" in card
    assert "| table (safetensors) |" in card and "| size on disk |" in card
    assert re.search(r"\| speed \| [\d,]+ texts/s at batch 8, [\d.]+x\??( the source's)? \(measured by `verify`", card)
    assert "**distill** (espresso-export" in card and "a static token table of `bert` (a local folder)" in card
    assert "healed against the teacher's vectors" in card and "STS Spearman x100, builtin (smoke set)" in card
    assert "word order and context are lost" in card and "0 layers" not in card
    assert "### transformers" not in card and "## Load it with" not in card  # runtimes that cannot read the graph
    staged_files = set(tree(out))
    assert {"README.md", "config.json", "model.safetensors", "tokenizer.json", "modules.json", "espresso.json",
            "export.json", "onnx/model.onnx", "onnx/model_quantized.onnx", "verify_report.json"} <= staged_files


def test_the_cards_snippets_run_as_printed_on_the_staged_files(staged, static_folder):  # noqa: F811
    """model2vec, sentence-transformers and OnnxEncoder, each snippet run with the repository id replaced by the
    staged folder, give model2vec's vectors of the folder."""
    from model2vec import StaticModel

    out, _ = staged
    card = (out / "README.md").read_text()
    expected = StaticModel.from_pretrained(static_folder, force_download=False).encode(TEXTS)
    runs = {"model2vec": "StaticModel.from_pretrained", "ONNX runtime, no torch": "OnnxEncoder(path, "}
    if pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed"):
        runs["sentence-transformers"] = "SentenceTransformer("
    for heading, needle in runs.items():
        snippet = _snippet(card, heading)
        assert REPO in snippet and needle in snippet and "# (2, 16)" in snippet, heading
        got = np.asarray(_run(snippet, out)["embeddings"], dtype=np.float32)
        assert got.shape == (2, 16), heading
        assert (got * expected).sum(1).min() >= 0.999, heading  # int8 table, unit vectors


def test_the_cards_int8_and_binary_vectors_snippet_runs(staged):
    """The export's vectors at int8 (its stored ranges) and binary, by OnnxEncoder and by sentence-transformers."""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    out, _ = staged
    card = (out / "README.md").read_text()
    assert "## Vector sizes" in card and "| 16 | 64 B | 16 B | 2 B |" in card
    found = _run(_snippet(card, "Vector sizes"), out)
    assert found["codes"].dtype == np.int8 and found["codes"].shape == (2, 16) and found["bits"].shape == (2, 2)
    # the same buckets: the export's int8 table against the float one moves a code by a step or two at most
    assert np.corrcoef(found["codes"].ravel(), found["st_codes"].ravel())[0, 1] > 0.99


def test_a_static_folder_without_espresso_json_says_how_it_was_made_is_unknown(static_folder, tmp_path, capsys):  # noqa: F811
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(static_folder, bare)
    (bare / "espresso.json").unlink()
    code, _, err = run(capsys, "push", bare, "--repo-id", REPO, "--dry-run", tmp_path / "out", "--license", "mit")
    assert code == 0, err
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| healed on your documents | unknown (no `espresso.json`) |" in card and "has no espresso.json" in err


def test_a_static_model_and_its_export_upload_through_the_hub_client(staged, static_folder, static_export,  # noqa: F811
                                                                     tmp_path, capsys, fake_hub):  # noqa: F811
    """The same files as the dry run, in one commit; the table and the graphs through LFS."""
    expected = tmp_path / "expected"
    code, _, err = run(capsys, "push", static_folder, "--repo-id", REPO, "--onnx", static_export, "--dry-run", expected)
    assert code == 0, err
    hub = fake_hub(lfs=True)
    res = push_subprocess(hub, tmp_path, static_folder, "--repo-id", REPO, "--onnx", static_export, "--json",
                          xet=False)
    assert res.returncode == 0, res.stderr
    [commit] = hub.commits
    assert commit.files == tree(expected) and "model.safetensors" in commit.lfs_paths
    result = json.loads(res.stdout)
    assert result["card"]["static"] is True and result["card"]["onnx"] is True and not hub.unhandled
    assert hub.yaml_checked[0]["library_name"] == "model2vec"
