"""Every text input the package reads, in one stage (it imports only ``core``).

* :mod:`.files`: opening plain/gzipped files, the format suffix, the csv/tsv delimiter, jsonl lines;
* :mod:`.corpus`: sentences (distillation corpora, calibration sets, pruning corpora);
* :mod:`.sts_sets`: scored pairs (STS-B files, named-column files, Hub splits) and the STS-B layout test;
* :mod:`.pairs`: training pairs, triplets and NLI rows; distinct sentence pairs for pair distillation;
* :mod:`.retrieval_sets`: BEIR-style retrieval sets, or an STS set used as one;
* :mod:`.hub_datasets`: Hub dataset specs (``hf://owner/name[:split]`` or ``owner/name[:split]``) and downloads;
* :mod:`.augment`: offline text augmentation for distillation corpora.

Import from here (``from espresso_export.data import read_corpus``); the modules are the layout.
Malformed input raises :class:`~espresso_export.core.errors.ValidationError` naming the file, the line
and what is wrong.
"""

from __future__ import annotations

from espresso_export.data.corpus import (
    TEXT_FIELDS,
    Corpus,
    CorpusSource,
    corpus_texts,
    read_corpus,
    read_sentences,
    sentences_sha256,
)
from espresso_export.data.files import (
    BUILTIN,
    base_suffix,
    builtin_resource,
    jsonl_objects,
    open_text,
    parse_score,
    sniff_delimiter,
    text_lines,
)
from espresso_export.data.hub_datasets import (
    HUB_PREFIX,
    HubDataset,
    hub_dataset,
    input_extras,
)
from espresso_export.data.pairs import (
    TextPairs,
    is_scored,
    read_pairs,
    read_sentence_pairs,
    read_training_data,
)
from espresso_export.data.retrieval_sets import (
    RetrievalSet,
    read_retrieval,
    retrieval_from_sts,
)
from espresso_export.data.sts_sets import (
    DEFAULT_COLUMNS,
    StsPairs,
    check_scores,
    is_stsb,
    read_hub_sts,
    read_sts,
    spread_subset,
)

__all__ = [
    "BUILTIN", "DEFAULT_COLUMNS", "HUB_PREFIX", "TEXT_FIELDS", "Corpus", "CorpusSource", "HubDataset",
    "RetrievalSet", "StsPairs", "TextPairs", "base_suffix", "builtin_resource", "check_scores", "corpus_texts",
    "hub_dataset", "input_extras",
    "is_scored", "is_stsb", "jsonl_objects", "open_text", "parse_score", "read_corpus", "read_hub_sts",
    "read_pairs", "read_retrieval", "read_sentence_pairs", "read_sentences", "read_sts", "read_training_data",
    "retrieval_from_sts", "sentences_sha256", "sniff_delimiter", "spread_subset", "text_lines",
]
