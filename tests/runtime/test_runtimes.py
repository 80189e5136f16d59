"""Every runtime loads the export as published: sentence-transformers (backend="onnx"), optimum, fastembed,
transformers.js in Node and in headless Chromium (the browser example), and TEI's file and output names.

The real all-MiniLM-L6-v2 cut to L3 with a PCA-128 head, exported fp32 and int8 once per session
(``minilm_export``), staged by ``push --dry-run`` as the Hub repository would hold it. The code each runtime
runs is the model card's own snippet, pointed at the staged folder. Consumers run in their own environment
(tests/consumers.py) and skip with the reason when it is absent.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from consumers import (
    BROWSER_EXAMPLE,
    NODE_MODULES,
    browser_script,
    chromium,
    localise,
    require_consumer,
    run_node,
    run_python,
    run_snippets,
    serve,
)

from espresso_export.core.metrics import cosine_rows
from espresso_export.runtime import EMBEDDING_OUTPUT, TOKEN_OUTPUT, OnnxEncoder

REPO = "me/minilm-L3-d128"
FP32, INT8 = "onnx/model.onnx", "onnx/model_quantized.onnx"
MIN_COSINE = {FP32: 0.9999, INT8: 0.99}  # against PyTorch
JS_COSINE = {FP32: 0.999, INT8: 0.99}  # onnxruntime-web (wasm) against PyTorch / the Python runtime
TIE = 1e-4  # rankings may swap sentences whose scores differ by less
TEXTS = [
    "A man is playing a guitar on stage.", "Someone plays an instrument.", "The stock market fell sharply today.",
    "Café, naïve façade; the über-déjà-vu résumé.", "Пример предложения на русском языке.", "a",
    "the quick brown fox jumps over the lazy dog " * 60,  # past the maximum length: truncation must agree
]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def reference(minilm_export) -> np.ndarray:
    """Our PyTorch model's vectors for TEXTS."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode

    return _unit(encode(load(minilm_export[0]), TEXTS, batch_size=4))


@pytest.fixture(scope="module")
def staged(minilm_export, tmp_path_factory):
    """The repository ``push`` would upload (model folder + export), and the facts its card was made from."""
    from espresso_export import push
    from espresso_export.publishing.staging import prepare

    shrunk, out, _ = minilm_export
    folder = tmp_path_factory.mktemp("staged") / "repo"
    push(shrunk, REPO, onnx=out, dry_run=folder)
    return folder, prepare(shrunk, onnx=out).facts


def _snippet(runtime: str, staged, file: str, folder: Path | None = None) -> str:
    from espresso_export.publishing.runtimes import snippet
    from espresso_export.publishing.usage import EXAMPLE_TEXTS

    repo, facts = staged
    return localise(snippet(runtime, facts, REPO, file), REPO, folder or repo, TEXTS, EXAMPLE_TEXTS)


@pytest.fixture(scope="module")
def python_consumers(staged, minilm_export, tmp_path_factory) -> dict[str, np.ndarray]:
    """The card's sentence-transformers, optimum and fastembed snippets, fp32 and int8, in one consumer process;
    plus sentence-transformers on the export folder itself."""
    python = require_consumer("sentence_transformers", "optimum.onnxruntime", "fastembed")
    snippets = {f"{runtime}:{file}": _snippet(runtime, staged, file)
                for runtime in ("sentence-transformers", "optimum", "fastembed") for file in (FP32, INT8)}
    snippets["sentence-transformers:export folder"] = _snippet("sentence-transformers", staged, FP32,
                                                               folder=minilm_export[1])
    return run_snippets(python, snippets, tmp_path_factory.mktemp("consumers"))


def _min_cosine(label: str, got: np.ndarray, want: np.ndarray) -> float:
    """The smallest row cosine, printed (``pytest -s`` shows every runtime's number)."""
    value = float(cosine_rows(got, want).min())
    print(f"{label}: min cosine {value:.6f} over {len(got)} texts")
    return value


def _graph_io(path: Path) -> tuple[list[str], list[str]]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [i.name for i in graph.input], [o.name for o in graph.output]


def test_layout_holds_what_each_runtime_reads(minilm_export):
    from transformers import AutoTokenizer

    _, out, result = minilm_export
    info = json.loads((out / "export.json").read_text())
    produced = list(AutoTokenizer.from_pretrained(str(out))(["a text"]).keys())
    for file in (FP32, INT8):
        inputs, outputs = _graph_io(out / file)
        assert outputs == [EMBEDDING_OUTPUT, TOKEN_OUTPUT] == info["outputs"]  # fastembed: first; optimum: by name
        assert sorted(inputs) == sorted(produced)  # exactly the tokenizer's outputs
    assert (out / "tokenizer.json").is_file()
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == tokenizer_config.get("max_length", 256) == info["max_seq_length"]
    config = json.loads((out / "config.json").read_text())  # TEI reads these two
    assert config["hidden_size"] == 384 and config["num_hidden_layers"] == 3
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Normalize", "Dense", "Normalize"]
    assert (out / "1_Pooling" / "config.json").is_file() and result.default_file == INT8


def test_tei_finds_its_files_and_output(staged):
    """TEI cannot run here: check what its ONNX backend opens (onnx/model.onnx, fp32), config.json's sizes and
    the sentence_embedding output it uses when present."""
    import onnx

    repo, _ = staged
    graph = onnx.load(str(repo / FP32), load_external_data=False).graph
    assert EMBEDDING_OUTPUT in [o.name for o in graph.output]
    assert not any(n.op_type in ("MatMulInteger", "DynamicQuantizeLinear") for n in graph.node)  # the fp32 file
    assert {"hidden_size", "num_hidden_layers", "max_position_embeddings"} <= set(json.loads((repo / "config.json")
                                                                                          .read_text()))
    assert (repo / "tokenizer.json").is_file() and (repo / "1_Pooling" / "config.json").is_file()


def test_card_shows_each_runtime_and_the_code_the_tests_run(staged):
    from espresso_export.publishing.runtimes import RUNTIMES, snippet

    repo, facts = staged
    card = (repo / "README.md").read_text()
    section = card.split("## Load it with", 1)[1]
    for key, runtime in RUNTIMES.items():
        assert f"### {runtime.name}" in section and snippet(key, facts, REPO) in section
    assert "| text-embeddings-inference" in section and "TEI was not run" in section
    for file in (FP32, INT8, "export.json", "model.safetensors", "modules.json", "tokenizer_config.json"):
        assert (repo / file).is_file(), file  # the repository is the layout, at its root


@pytest.mark.parametrize("file", [FP32, INT8])
def test_sentence_transformers_onnx_backend(python_consumers, reference, file):
    got = python_consumers[f"sentence-transformers:{file}"]
    assert got.shape == (len(TEXTS), 128)  # the head applied
    assert _min_cosine(f"sentence-transformers {file} vs PyTorch", got, reference) >= MIN_COSINE[file]
    if file == FP32:
        folder = python_consumers["sentence-transformers:export folder"]
        assert _min_cosine("sentence-transformers on the export folder vs PyTorch", folder, reference) >= 0.9999


@pytest.mark.parametrize("file", [FP32, INT8])
def test_optimum_pools_last_hidden_state_into_the_vector(python_consumers, reference, minilm_export, file):
    got = python_consumers[f"optimum:{file}"]
    graph_vector = OnnxEncoder(minilm_export[1], file).encode(TEXTS)  # the graph's own sentence_embedding
    assert got.shape == (len(TEXTS), 128)
    assert _min_cosine(f"optimum {file} vs the graph's sentence_embedding", got, graph_vector) >= 0.99999
    assert _min_cosine(f"optimum {file} vs PyTorch", got, reference) >= MIN_COSINE[file]


@pytest.mark.parametrize("file", [FP32, INT8])
def test_fastembed_custom_model_offline(python_consumers, reference, minilm_export, file):
    got = python_consumers[f"fastembed:{file}"]
    same = OnnxEncoder(minilm_export[1], file).encode(TEXTS)
    assert got.shape == (len(TEXTS), 128)
    assert _min_cosine(f"fastembed {file} vs OnnxEncoder", got, same) >= 0.99999  # the same vectors
    assert _min_cosine(f"fastembed {file} vs PyTorch", got, reference) >= MIN_COSINE[file]


@pytest.mark.parametrize("file", [FP32, INT8])
def test_transformers_js_in_node(staged, reference, tmp_path, file):
    repo, _ = staged
    code = _snippet("transformers.js", staged, file, folder=Path(repo.name))  # a model id under localModelPath
    code = ('import { env } from "@huggingface/transformers";\n'
            f"env.allowRemoteModels = false;\nenv.localModelPath = {json.dumps(str(repo.parent) + '/')};\n" + code)
    got = np.array(json.loads(run_node(code, tmp_path).strip().splitlines()[-1]), dtype=np.float32)
    assert got.shape == (len(TEXTS), 128)
    assert _min_cosine(f"transformers.js (Node) {file} vs PyTorch", got, reference) >= JS_COSINE[file]


@pytest.mark.parametrize("dtype,file", [("fp32", FP32), ("q8", INT8)])
def test_browser_page_embeds_and_ranks_like_python(minilm_export, tmp_path, dtype, file):
    python = require_consumer("playwright")
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium: apt-get install chromium (.ci/run does it)")
    if not (NODE_MODULES / "@huggingface" / "transformers").is_dir():
        pytest.skip("transformers.js is not installed: npm ci --prefix examples/browser (.ci/run does it)")
    site = tmp_path / "site"
    (site / "models").mkdir(parents=True)
    for name in ("index.html", "app.js", "node_modules"):
        (site / name).symlink_to(BROWSER_EXAMPLE / name)
    (site / "models" / "minilm").symlink_to(minilm_export[1])
    five, query = TEXTS[:5], "someone is making music"
    shot = Path(os.environ.get("ESPRESSO_BROWSER_SCREENSHOT", tmp_path / "page.png"))
    with serve(site) as url:
        out = run_python(python, browser_script(f"{url}index.html?model=minilm&dtype={dtype}", five, query, shot,
                                                browser), tmp_path)
    page = json.loads(out.strip().splitlines()[-1])
    encoder = OnnxEncoder(minilm_export[1], file)
    got = np.array(page["vectors"], dtype=np.float32)
    assert got.shape == (5, 128)
    assert _min_cosine(f"browser page {file} vs OnnxEncoder", got, encoder.encode(five)) >= JS_COSINE[file]
    sentences = page["sentences"]
    assert len(sentences) >= 24 and sorted(page["ranking"]) == sorted(sentences)
    python_scores = dict(zip(sentences, encoder.encode(sentences) @ encoder.encode(query)))
    shown = [python_scores[s] for s in page["ranking"]]
    tie = TIE
    worst = max((b - a for a, b in itertools.pairwise(shown)), default=0.0)
    print(f"browser page {file}: largest score inversion in its ranking {worst:.2e} (allowed {tie:g})")
    assert worst <= tie, "the page ranks differently from Python"
    assert shot.stat().st_size > 10_000
    shutil.copy(shot, tmp_path / f"page-{dtype}.png")
