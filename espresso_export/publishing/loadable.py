"""The staged repository checked the way sentence-transformers loads it, before anything is uploaded.

sentence-transformers reads ``modules.json``, then each module from its folder: the Transformer's config,
safetensors weights and tokenizer, the Pooling and Dense configs (and the Dense weights). A repository missing
any of them is refused by every user's first ``SentenceTransformer(repo_id)``, so ``push`` refuses it first.
The check reads files only: no torch, no sentence-transformers.
"""

from __future__ import annotations

from pathlib import Path

from espresso_export.core.errors import EspressoError, ValidationError
from espresso_export.publishing.facts import DenseInfo, ModelFacts, read_model

# a tokenizer transformers' AutoTokenizer can build: its fast file, or a vocabulary a slow tokenizer reads
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")


def has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def check_loadable(staged: Path, source: ModelFacts) -> None:
    """Refuse (exit 2) a staged repository sentence-transformers would not load, or one that reads as a different
    model than ``source`` (a module or weight file left out)."""
    tokenizer_dir = source.folder / source.transformer_dir
    if not has_tokenizer(tokenizer_dir):
        raise ValidationError(f"{tokenizer_dir} has no tokenizer (tokenizer.json, vocab.txt, ...): the repository "
                              "would not load; copy the source model's tokenizer files in")
    try:
        staged_facts = read_model(staged)
    except EspressoError as e:
        where = e.message.replace(str(staged), "the repository")
        raise ValidationError(f"the staged repository would not load: {where}") from None
    if not has_tokenizer(staged / staged_facts.transformer_dir):
        raise ValidationError(f"the staged repository has no tokenizer file of {source.folder}")
    missing = [path for path, _ in source.onnx.graphs if not (staged / path).is_file()] if source.onnx else []
    if missing:
        raise ValidationError(f"the staged repository lacks {missing[0]} of the ONNX export {source.onnx.folder}")
    seen = _shape(staged_facts)
    wanted = _shape(source)
    if seen != wanted:
        raise ValidationError(f"the staged repository reads as {seen}, not as {source.folder} ({wanted}): a module "
                              "or weight file of the folder was left out")


def _shape(facts: ModelFacts) -> str:
    """What a loader builds from a folder, in a line: pooling, head modules, output width and parameters."""
    post = [f"Dense({m.in_features}->{m.out_features})" if isinstance(m, DenseInfo) else "Normalize" for m in facts.post]
    return (f"{facts.pooling.value} pooling, {' + '.join(post) or 'no head'}, {facts.output_dim}-d, "
            f"{facts.params:,} parameters")
