"""Hub datasets: the one parser of a dataset spec and the one place that downloads one.

Both spellings name the same thing and are accepted wherever a data spec is:
``hf://owner/name[:split]`` and, when no local file has that name,
``owner/name[:split]``. A whole dataset (no split) is read from its data files
(txt/jsonl/csv/tsv/parquet, downloaded with ``huggingface_hub``, a dependency);
one split is read with the optional ``datasets`` package, which knows each
dataset's split layout. Both need the network.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from espresso_export.core.errors import NotFoundError, OfflineError, ValidationError
from espresso_export.core.extras import require
from espresso_export.core.parsing import under_local_folder
from espresso_export.data.files import base_suffix

HUB_PREFIX = "hf://"
CORPUS_SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv", ".parquet")
_DATA_PATTERNS = ["*.txt", "*.txt.gz", "*.jsonl", "*.jsonl.gz", "*.csv", "*.csv.gz", "*.tsv", "*.tsv.gz",
                  "*.parquet", "**/*.txt", "**/*.txt.gz", "**/*.jsonl", "**/*.jsonl.gz", "**/*.csv",
                  "**/*.csv.gz", "**/*.tsv", "**/*.tsv.gz", "**/*.parquet"]
_FILE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".txt", ".gz")  # a bare spec ending so is a (missing) file, not an id


@dataclass(frozen=True)
class HubDataset:
    """A dataset on the Hugging Face Hub and, optionally, one of its splits."""

    name: str
    split: str | None = None

    def __str__(self) -> str:
        return f"{self.name}:{self.split}" if self.split else self.name

    def with_default_split(self, split: str) -> HubDataset:
        return self if self.split else replace(self, split=split)


def _looks_like_hub_id(spec: str) -> bool:
    name = spec.split(":", 1)[0]
    return (
        name.count("/") == 1
        and not name.startswith((".", "/", "~"))
        and not name.lower().endswith(_FILE_SUFFIXES)
        and all(part for part in name.split("/"))
        and not under_local_folder(name)
    )


def hub_dataset(spec: str | Path) -> HubDataset | None:
    """The dataset a spec names (``hf://owner/name[:split]``, or ``owner/name[:split]`` that is no local
    file), else None."""
    text = str(spec)
    if text.startswith(HUB_PREFIX):
        text = text[len(HUB_PREFIX):]
    elif not _looks_like_hub_id(text) or Path(text).expanduser().exists():
        return None
    name, _, split = text.partition(":")
    return HubDataset(name, split or None)


def hub_files(dataset: HubDataset) -> list[Path]:
    """The data files of a whole dataset, downloaded (or from the cache), sorted."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    name = dataset.name
    try:
        folder = Path(snapshot_download(name, repo_type="dataset", allow_patterns=_DATA_PATTERNS))
    except (HFValidationError, RepositoryNotFoundError) as e:
        raise NotFoundError(f"dataset not found on the Hub: {name!r}") from e
    except LocalEntryNotFoundError as e:
        raise OfflineError(f"cannot download the dataset {name!r}: the Hugging Face Hub is unreachable "
                           "(offline?); pass local corpus files instead") from e
    except OSError as e:
        raise OfflineError(f"cannot download the dataset {name!r}: {e.__class__.__name__}") from e
    files = sorted(p for p in folder.rglob("*") if p.is_file() and base_suffix(p) in CORPUS_SUFFIXES)
    if not files:
        raise ValidationError(f"dataset {name!r} has no txt/jsonl/csv/tsv/parquet files")
    return files


def input_extras(specs, *, split: bool = False) -> list[str]:
    """The optional features (:mod:`espresso_export.core.extras`) reading these data specs needs: a Hub split
    needs ``datasets`` (``split=True``: the reader picks a default split, as STS sets do), parquet ``pyarrow``."""
    out = []
    for spec in specs:
        if spec is None:
            continue
        dataset = hub_dataset(spec)
        if dataset is not None:
            out += ["hub-datasets"] if (dataset.split or split) else []
        elif str(spec).lower().endswith(".parquet"):
            out.append("parquet")
    return out


def hub_split(dataset: HubDataset):
    """``(column names, rows)`` of one split (``dataset.split`` must be set); rows are dicts."""
    require("hub-datasets")
    import datasets

    try:
        ds = datasets.load_dataset(dataset.name, split=dataset.split)
    except ConnectionError as e:
        raise OfflineError(f"cannot download the Hub dataset {dataset.name!r}: the Hub is unreachable (offline?)") from e
    except (FileNotFoundError, ValueError, OSError) as e:
        raise NotFoundError(f"cannot load the Hub dataset {dataset.name!r} (split {dataset.split!r}): "
                            f"{str(e).splitlines()[0]}") from e
    return list(ds.column_names), ds
