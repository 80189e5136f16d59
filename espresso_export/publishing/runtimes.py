"""The card's "Load it with" section: one snippet per runtime for the layout every runtime loads.

Each snippet is generated here, from the staged repository's facts, and the tests run each one (with the
repository id replaced by the staged folder) in an environment that has that runtime and not espresso-export:
what the card says is what was run. A snippet binds ``embeddings`` (one row per text of
:data:`~espresso_export.publishing.usage.EXAMPLE_TEXTS`) so the tests can compare it with PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass

from espresso_export.exporting.openvino import FP32_FILE as OPENVINO_FP32_FILE
from espresso_export.exporting.openvino import INT8_FILE as OPENVINO_INT8_FILE
from espresso_export.publishing.facts import ModelFacts
from espresso_export.publishing.usage import EXAMPLE_TEXTS, TORCH_FREE_INSTALL, transformers_snippet
from espresso_export.runtime import EMBEDDING_OUTPUT, TOKEN_OUTPUT

FP32_FILE = "onnx/model.onnx"
INT8_FILE = "onnx/model_quantized.onnx"
_DTYPE = {FP32_FILE: "fp32", INT8_FILE: "q8", "onnx/model_fp16.onnx": "fp16"}  # transformers.js names
OPENVINO = "sentence-transformers-openvino"  # a runtime of the card only when the export has OpenVINO files


@dataclass(frozen=True)
class Runtime:
    name: str
    output: str  # which graph output it reads
    language: str
    install: str


RUNTIMES = {
    "sentence-transformers": Runtime("sentence-transformers (`backend=\"onnx\"`)", f"`{TOKEN_OUTPUT}`, pooled and "
                                     "projected by the repository's own Pooling/Dense/Normalize modules", "python",
                                     'pip install "sentence-transformers[onnx]"'),
    "optimum": Runtime("optimum `ORTModelForFeatureExtraction`", f"`{TOKEN_OUTPUT}`, pooled and projected as "
                       "written out in the snippet", "python", "pip install optimum-onnx"),
    "fastembed": Runtime("fastembed (`add_custom_model`)", f"the first output, `{EMBEDDING_OUTPUT}` (pooling off)",
                         "python", "pip install fastembed"),
    "transformers.js": Runtime("transformers.js (browser, Node)", f"`{EMBEDDING_OUTPUT}` (call the model; the "
                               "feature-extraction pipeline would pool `last_hidden_state` without the head)",
                               "js", "npm install @huggingface/transformers"),
    "espresso-export": Runtime("espresso-export `OnnxEncoder` (no torch)", f"`{EMBEDDING_OUTPUT}`", "python",
                               # the package's own dependencies bring torch; the runtime needs none of them
                               TORCH_FREE_INSTALL),
}


_OPENVINO_NAME = "sentence-transformers (`backend=\"openvino\"`)"


def onnx_files(facts: ModelFacts) -> list[str]:
    return facts.onnx.repo_paths if facts.onnx else []


def cpu_file(facts: ModelFacts, runtime: str | None = None) -> str:
    """The graph a CPU user should load: the one the export recommends (the fastest that passed validation, timed
    on the export's machine: `export.json` `default_file`), else our int8 when the export has it, else fp32.
    transformers.js picks a graph by dtype, so it gets one of the names it knows (:data:`_DTYPE`)."""
    files = onnx_files(facts)
    recommended = facts.onnx.repo_path(facts.onnx.manifest.get("default_file") or "") if facts.onnx else ""
    if recommended in files and (runtime != "transformers.js" or recommended in _DTYPE):
        return recommended
    return INT8_FILE if INT8_FILE in files else FP32_FILE


def openvino_file(facts: ModelFacts) -> str | None:
    """The OpenVINO file a CPU user should load (``export --format onnx,openvino``): int8 when there, else fp32."""
    files = [name for name, _ in facts.onnx.openvino] if facts.onnx else []
    return next((f for f in (OPENVINO_INT8_FILE, OPENVINO_FP32_FILE) if f in files), None)


def snippet(runtime: str, facts: ModelFacts, repo_id: str, file: str | None = None) -> str:
    """The code that loads ``repo_id`` with ``runtime`` on graph ``file`` (default: :func:`cpu_file`, or
    :func:`openvino_file` for :data:`OPENVINO`)."""
    file = file or (openvino_file(facts) if runtime == OPENVINO else cpu_file(facts, runtime))
    return _SNIPPETS[runtime](facts, repo_id, file)


def _sentence_transformers(facts: ModelFacts, repo_id: str, file: str) -> str:
    kwargs = "" if file == FP32_FILE else f', model_kwargs={{"file_name": "{file}"}}'
    return "\n".join([
        "from sentence_transformers import SentenceTransformer", "",
        f'model = SentenceTransformer("{repo_id}", backend="onnx"{kwargs})',
        f"embeddings = model.encode({EXAMPLE_TEXTS})",
        f"print(embeddings.shape)  # (2, {facts.output_dim})"])


def _sentence_transformers_openvino(facts: ModelFacts, repo_id: str, file: str) -> str:
    return "\n".join([
        "from sentence_transformers import SentenceTransformer", "",
        "# f32: on CPUs with bf16, OpenVINO otherwise computes in bf16, not what the file was validated in",
        f'model = SentenceTransformer("{repo_id}", backend="openvino",',
        f'                            model_kwargs={{"file_name": "{file}",',
        '                                          "ov_config": {"INFERENCE_PRECISION_HINT": "f32"}})',
        f"embeddings = model.encode({EXAMPLE_TEXTS})",
        f"print(embeddings.shape)  # (2, {facts.output_dim})"])


def _fastembed(facts: ModelFacts, repo_id: str, file: str) -> str:
    name = f"{repo_id}:{file.rsplit('/', 1)[-1]}"  # one registered name per graph
    return "\n".join([
        "import numpy as np",
        "from fastembed import TextEmbedding",
        "from fastembed.common.model_description import ModelSource, PoolingType",
        "from huggingface_hub import snapshot_download", "",
        "# the graph pools, projects and normalises itself: fastembed takes its first output as it is",
        f'TextEmbedding.add_custom_model(model="{name}", pooling=PoolingType.DISABLED, normalization=False,',
        (f'                               sources=ModelSource(hf="{repo_id}"), dim={facts.output_dim}, '
        f'model_file="{file}")'),
        f'model = TextEmbedding(model_name="{name}", specific_model_path=snapshot_download("{repo_id}"))',
        f"embeddings = np.array(list(model.embed({EXAMPLE_TEXTS})))",
        "print(embeddings.shape)"])


def _transformers_js(facts: ModelFacts, repo_id: str, file: str) -> str:
    return "\n".join([
        'import { AutoModel, AutoTokenizer } from "@huggingface/transformers";', "",
        f'const tokenizer = await AutoTokenizer.from_pretrained("{repo_id}");',
        (f'const model = await AutoModel.from_pretrained("{repo_id}", {{ dtype: "{_DTYPE.get(file, "fp32")}" }});'
        f"  // {file}"),
        f"const inputs = tokenizer({EXAMPLE_TEXTS}, {{ padding: true, truncation: true }});",
        f"const {{ {EMBEDDING_OUTPUT} }} = await model(inputs);",
        f"const embeddings = {EMBEDDING_OUTPUT}.tolist();  // unit vectors, {facts.output_dim}-d",
        "console.log(JSON.stringify(embeddings));"])


def _espresso(facts: ModelFacts, repo_id: str, file: str) -> str:
    return "\n".join([
        "from huggingface_hub import snapshot_download",
        "from espresso_export.runtime import OnnxEncoder", "",
        f'encoder = OnnxEncoder(snapshot_download("{repo_id}"), "{file}")',
        "# many texts on a multi-core CPU: OnnxEncoder(..., threads=2, streams=2) encodes batches side by side",
        f"embeddings = encoder.encode({EXAMPLE_TEXTS})",
        f"print(embeddings.shape)  # (2, {facts.output_dim})"])


_SNIPPETS = {
    "sentence-transformers": _sentence_transformers,
    OPENVINO: _sentence_transformers_openvino,
    "optimum": lambda facts, repo_id, file: transformers_snippet(facts, repo_id, onnx_file=file),
    "fastembed": _fastembed,
    "transformers.js": _transformers_js,
    "espresso-export": _espresso,
}


def _table(facts: ModelFacts) -> list[str]:
    rows = ["| runtime | file (any `onnx/model*.onnx` loads) | output |", "|---|---|---|"]
    rows += [f"| {r.name} | `{cpu_file(facts, key)}` | {r.output} |" for key, r in RUNTIMES.items()]
    rows.append(f"| text-embeddings-inference (ONNX backend) | `{FP32_FILE}` | `{EMBEDDING_OUTPUT}` |")
    if ov_file := openvino_file(facts):
        rows.append(f"| {_OPENVINO_NAME} | `{ov_file}` | `{TOKEN_OUTPUT}`, pooled and projected by the repository's "
                    "own modules |")
    return rows


def load_it_with_section(facts: ModelFacts, repo_id: str) -> list[str]:
    """Markdown: which file and output each runtime uses, and the code (each snippet is run by a test)."""
    lines = ["## Load it with", "",
             (f"The repository holds the ONNX graphs under `onnx/` ({', '.join(f'`{f}`' for f in onnx_files(facts))}; "
             f"`{INT8_FILE}` is espresso-export's int8, validated against PyTorch, for CPUs). Each graph outputs "
             f"`{EMBEDDING_OUTPUT}` (the finished {facts.output_dim}-d unit vector) first and `{TOKEN_OUTPUT}` "
             "second, and takes exactly the tokenizer's outputs, so these runtimes load the repository as it is:"), ""]
    lines += _table(facts) + [""]
    for key, runtime in RUNTIMES.items():
        lines += [f"### {runtime.name}", "", f"`{runtime.install}`", "", f"```{runtime.language}",
                  snippet(key, facts, repo_id), "```", ""]
    if ov_file := openvino_file(facts):
        lines += [f"### {_OPENVINO_NAME}", "", '`pip install "sentence-transformers[openvino]"`', "",
                  (f"`openvino/` holds the same model as OpenVINO IR ({', '.join(f'`{f}`' for f, _ in facts.onnx.openvino)},"
                   " each with its `.bin`), validated like the ONNX graphs. The int8 file's weights are int8 and "
                   "OpenVINO quantises the activations per token at run time, in the group size written into the "
                   "file."), "", "```python", snippet(OPENVINO, facts, repo_id, ov_file), "```", "",
                  ("optimum-intel (1.27) may log \"Could not infer whether the model was already converted or not to "
                   "the OpenVINO IR, keeping `export=False`\": the IR is loaded as it is, which is what is wanted."),
                  ""]
    lines += ["### text-embeddings-inference", "",
              (f"TEI's ONNX backend (its CPU images) opens `{FP32_FILE}`, reads `config.json` and uses the "
              f"`{EMBEDDING_OUTPUT}` output: `text-embeddings-router --model-id {repo_id}`. "
              "(Checked by file and output names only: TEI was not run.)"), ""]
    return lines
