"""The card's Usage section: sentence-transformers, plain transformers (written out by hand) and ONNX; for a static
model, model2vec, sentence-transformers and the torch-free ``OnnxEncoder`` (:func:`static_usage_section`).

The transformers snippet is generated from the folder's modules (pooling, Dense, Normalize), so a
reader without sentence-transformers reproduces exactly the embedding the model card describes.
"""

from __future__ import annotations

from espresso_export.core.types import Pooling
from espresso_export.publishing.facts import ACTIVATION_CODE, DenseInfo, ModelFacts, NormalizeInfo

# The package's own dependencies bring torch and transformers; OnnxEncoder needs none of them (a wheel installed
# without its dependencies imports and encodes: checked in a fresh venv, torch and transformers never imported).
TORCH_FREE_INSTALL = "pip install --no-deps espresso-export && pip install onnxruntime tokenizers numpy"

EXAMPLE_TEXTS = '["A man is playing a guitar.", "Someone plays an instrument."]'
_POOLING_CODE = {
    Pooling.MEAN: ["    x = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # mean pooling"],
    Pooling.CLS: ["    x = hidden[:, 0]  # CLS pooling"],
    Pooling.MAX: ["    x = hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).max(1).values  # max pooling"],
    Pooling.LAST_TOKEN: ['    positions = torch.arange(hidden.shape[1]).expand_as(batch["attention_mask"])',
                         '    last = (positions * batch["attention_mask"]).argmax(1)  # last real token, any padding side',
                         "    x = hidden[torch.arange(hidden.shape[0]), last]"],
}


def _snippet_setup(facts: ModelFacts, repo_id: str, dense: list[DenseInfo], onnx_file: str | None) -> list[str]:
    """Imports, download, tokenizer, backbone (transformers, or optimum's ONNX model) and the Dense weights."""
    sub = f' + "/{facts.transformer_dir}"' if facts.transformer_dir and not onnx_file else ""
    code = ["import torch", "import torch.nn.functional as F", "from huggingface_hub import snapshot_download"]
    if dense:
        code.append("from safetensors.torch import load_file")
    if onnx_file:
        folder, name = onnx_file.rsplit("/", 1)
        code += ["from optimum.onnxruntime import ORTModelForFeatureExtraction",
                 "from transformers import AutoTokenizer", "",
                 f'path = snapshot_download("{repo_id}")',
                 "tokenizer = AutoTokenizer.from_pretrained(path)",
                 f'model = ORTModelForFeatureExtraction.from_pretrained(path, subfolder="{folder}", file_name="{name}")']
    else:
        code += ["from transformers import AutoModel, AutoTokenizer", "",
                 f'path = snapshot_download("{repo_id}")',
                 f"tokenizer = AutoTokenizer.from_pretrained(path{sub})",
                 f"model = AutoModel.from_pretrained(path{sub}).eval()"]
    if facts.decoder:
        code.append("tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token or tokenizer.unk_token")
    for n, m in enumerate(dense):
        code.append(f'dense{n} = load_file(f"{{path}}/{m.path}/model.safetensors")  # {m.in_features} -> {m.out_features}')
    return code


def _snippet_post(facts: ModelFacts) -> list[str]:
    """The post modules in order: each Dense (with its activation) and Normalize."""
    code, n = [], 0
    for m in facts.post:
        if isinstance(m, NormalizeInfo):
            code.append("    x = F.normalize(x, dim=-1)")
            continue
        bias = f', dense{n}["linear.bias"]' if m.bias else ""
        code.append(f'    x = F.linear(x, dense{n}["linear.weight"]{bias})  # {m.path}')
        if ACTIVATION_CODE[m.activation]:
            code.append(f"    x = {ACTIVATION_CODE[m.activation]}")
        n += 1
    return code


def transformers_snippet(facts: ModelFacts, repo_id: str, onnx_file: str | None = None) -> str:
    """Python that computes the embedding with transformers alone, or (``onnx_file``) with optimum's
    ``ORTModelForFeatureExtraction`` on that graph's ``last_hidden_state``: the same pooling and head."""
    code = _snippet_setup(facts, repo_id, [m for m in facts.post if isinstance(m, DenseInfo)], onnx_file)
    code += ["", "", "def embed(texts):"]
    if facts.do_lower_case:
        code.append("    texts = [t.lower() for t in texts]")
    max_len = f", max_length={facts.max_seq_length}" if facts.max_seq_length else ""
    code += [f'    batch = tokenizer(texts, padding=True, truncation=True{max_len}, return_tensors="pt")',
             "    with torch.no_grad():",
             "        hidden = model(**batch).last_hidden_state" if onnx_file else
             '        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state']
    if facts.pooling in (Pooling.MEAN, Pooling.MAX):
        code.append('    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)')
    code += _POOLING_CODE[facts.pooling]
    code += _snippet_post(facts)
    code += ["    return x", "", "",
             f"embeddings = embed({EXAMPLE_TEXTS})",
             "print(embeddings.shape, (embeddings[0] @ embeddings[1]).item())"]
    return "\n".join(code)


def _pipeline_words(facts: ModelFacts) -> str:
    words = [f"{facts.pooling.value} pooling"]
    for m in facts.post:
        words.append("L2 normalisation" if isinstance(m, NormalizeInfo)
                     else f"the Dense layer `{m.path}` ({m.in_features} -> {m.out_features}"
                          + (f", {m.activation}" if m.activation != "Identity" else "") + ")")
    return ", ".join(words)


def _onnx_usage(facts: ModelFacts, repo_id: str) -> list[str]:
    graph = facts.onnx.graphs[0][0]
    return ["### ONNX runtime, no torch", "",
            f"`onnx/` holds the ONNX export made by `espresso-export export` "
            f"({', '.join(f'`{g}`' for g, _ in facts.onnx.graphs)}, `export.json` and the files beside them). "
            "espresso-export's runtime encodes with it without importing torch:", "", "```python",
            "from huggingface_hub import snapshot_download",
            f"# {TORCH_FREE_INSTALL}  (no torch: the runtime needs none of the package's own dependencies)",
            "from espresso_export.runtime import OnnxEncoder", "",
            f'folder = snapshot_download("{repo_id}", allow_patterns=["onnx/*"])',
            'encoder = OnnxEncoder(f"{folder}/onnx")',
            f"embeddings = encoder.encode({EXAMPLE_TEXTS})",
            f"print(embeddings.shape)  # (2, {facts.output_dim})", "```", "",
            f"`{graph}` is a standard ONNX graph, so other ONNX runtimes can load it too.", ""]


def _static_onnx_usage(facts: ModelFacts, repo_id: str) -> list[str]:
    """The static export: ``OnnxEncoder`` on the graph the export recommends (it tokenises as model2vec does)."""
    manifest = facts.onnx.manifest
    default = facts.onnx.repo_path(manifest.get("default_file") or "onnx/model.onnx")
    folder = "path" if facts.onnx.runtimes_layout else 'f"{path}/onnx"'
    rel = default if facts.onnx.runtimes_layout else default.split("/", 1)[1]
    limit = (manifest.get("tokenizer") or {}).get("char_limit")
    return ["### ONNX runtime, no torch", "", f"`{TORCH_FREE_INSTALL}`", "",
            (f"The export ({', '.join(f'`{g}`' for g, _ in facts.onnx.graphs)}) is one small graph: `input_ids` and "
             "`attention_mask` in, the unit vector `sentence_embedding` out. espresso-export's runtime reads a text "
             "as model2vec does (no special tokens"
             + (f", the text cut to {limit:,} characters first" if limit else "") + ", as `export.json` records it):"),
            "", "```python",
            "from huggingface_hub import snapshot_download",
            "from espresso_export.runtime import OnnxEncoder", "",
            f'path = snapshot_download("{repo_id}")',
            f'encoder = OnnxEncoder({folder}, "{rel}")',
            f"embeddings = encoder.encode({EXAMPLE_TEXTS})",
            f"print(embeddings.shape)  # (2, {facts.output_dim})", "```", ""]


def static_usage_section(facts: ModelFacts, repo_id: str) -> list[str]:
    """A static model: model2vec, sentence-transformers (its ``StaticEmbedding`` module reads the folder) and, with
    an export, the torch-free ``OnnxEncoder``."""
    lines = ["## Usage", "", "### model2vec", "", "`pip install model2vec`", "", "```python",
             "from model2vec import StaticModel", "",
             f'model = StaticModel.from_pretrained("{repo_id}")',
             f"embeddings = model.encode({EXAMPLE_TEXTS})",
             f"print(embeddings.shape)  # (2, {facts.output_dim})", "```", "",
             "### sentence-transformers", "",
             "sentence-transformers loads the folder as a `StaticEmbedding` module followed by `Normalize`:", "",
             "```python", "from sentence_transformers import SentenceTransformer", "",
             f'model = SentenceTransformer("{repo_id}")',
             f"embeddings = model.encode({EXAMPLE_TEXTS})",
             f"print(embeddings.shape)  # (2, {facts.output_dim})",
             "print(model.similarity(embeddings, embeddings))", "```", ""]
    if facts.onnx is not None:
        lines += _static_onnx_usage(facts, repo_id)
    return lines


def usage_section(facts: ModelFacts, repo_id: str) -> list[str]:
    if facts.static is not None:
        return static_usage_section(facts, repo_id)
    lines = ["## Usage", "", "### sentence-transformers", "", "```python",
             "from sentence_transformers import SentenceTransformer", "",
             f'model = SentenceTransformer("{repo_id}")',
             f"embeddings = model.encode({EXAMPLE_TEXTS})",
             f"print(embeddings.shape)  # (2, {facts.output_dim})",
             "print(model.similarity(embeddings, embeddings))"]
    dims = facts.matryoshka_dims
    if dims and len(dims) > 1:
        lines += ["", f"# a smaller vector: the first {dims[1]} dims (see Matryoshka dimensions below)",
                  f'small = SentenceTransformer("{repo_id}", truncate_dim={dims[1]})']
    lines += ["```", "", "### transformers", "",
              "Without sentence-transformers, reproduce the embedding by hand: the backbone, then "
              + _pipeline_words(facts) + ".", "", "```python", transformers_snippet(facts, repo_id), "```", ""]
    if facts.onnx is not None and facts.onnx.runtimes_layout:
        from espresso_export.publishing.runtimes import load_it_with_section

        lines += load_it_with_section(facts, repo_id)
    elif facts.onnx is not None:
        lines += _onnx_usage(facts, repo_id)
    return lines
