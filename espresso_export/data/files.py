"""Opening text inputs: plain or gzipped files, their format, the csv/tsv delimiter, jsonl lines.

Every reader in :mod:`espresso_export.data` goes through these, so a file is
opened, decoded and split the same way whatever it is read for. Malformed
input raises :class:`~espresso_export.core.errors.ValidationError` naming the
file, the line and what is wrong.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from importlib import resources
from pathlib import Path

from espresso_export.core.errors import NotFoundError, ValidationError

BUILTIN = "builtin"


def spec_key(spec: str | Path | None) -> str | None:
    """A data spec as one string to compare: a local file or folder by its absolute path, else as written
    (``builtin``, a Hub id). What a checkpoint was selected on is recorded this way, and compared this way with
    what verify reports on."""
    if spec is None:
        return None
    path = Path(str(spec)).expanduser()
    return str(path.resolve()) if path.exists() else str(spec)


def test_split_warning(flag: str, spec: str | Path | None, why: str) -> str | None:
    """A warning when a data spec's file name reads like a test split (``sts-test.csv``), for the options that
    train or choose on their data; None otherwise."""
    name = Path(str(spec)).name if spec is not None else ""
    return f"warning: {flag} {name} reads like a test split: {why}" if "test" in name.lower() else None


def selected_on(provenance: dict | None) -> set[str]:
    """The data specs (:func:`spec_key`) that chose the kept checkpoint of any training step in a provenance
    chain (``best_eval``: distill's or train's ``--eval-sts`` / ``--eval-retrieval``)."""
    found: set[str] = set()
    while provenance:
        best = provenance.get("best_eval") or {}
        found |= {k for k in (spec_key(best.get("sts")), spec_key(best.get("retrieval"))) if k}
        provenance = provenance.get("parent")
    return found


def builtin_resource(name: str) -> Path:
    """A file shipped in ``espresso_export/resources`` (the calibration corpus, the STS smoke set)."""
    return Path(str(resources.files("espresso_export") / "resources" / name))


def open_text(path: Path) -> str:
    """The UTF-8 text of a file, gunzipped when it ends in ``.gz``, without a leading byte order mark (Excel
    writes one in front of a CSV's header)."""
    if not path.exists():
        raise NotFoundError(f"file not found: {path}")
    if path.is_dir():
        raise ValidationError(f"{path} is a folder, expected a file")
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8-sig")
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise ValidationError(f"cannot read {path}: {e}") from e
    except UnicodeDecodeError as e:
        raise ValidationError(f"{path} is not UTF-8 text (byte {e.start})") from e


def text_lines(text: str) -> list[str]:
    """The lines of a text file: split at ``\n`` (a ``\r`` before it dropped) and nowhere else.

    ``str.splitlines`` also splits at U+0085, U+2028, U+2029, U+000B/C and U+001C-1E, which JSON strings and
    sentences hold as ordinary characters."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


def base_suffix(path: Path) -> str:
    """The format suffix, lower-cased, ignoring a trailing ``.gz``: ``x.TSV.gz`` -> ``.tsv``."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def sniff_delimiter(path: Path, text: str) -> str:
    """The delimiter of a csv/tsv text: a tab for ``.tsv`` files or when the first line has one, else a comma."""
    first = text.split("\n", 1)[0]
    return "\t" if (base_suffix(path) == ".tsv" or "\t" in first) else ","


def table_rows(text: str, delim: str, *, header: bool = False):
    """A csv/tsv text as rows (lists, or dicts keyed by the first row when ``header``).

    Tab-separated files are read without quoting: STS-B and NLI dumps hold bare quote characters.
    """
    quoting = csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE
    reader = csv.DictReader if header else csv.reader
    return reader(io.StringIO(text), delimiter=delim, quoting=quoting)


def jsonl_objects(path: Path, text: str):
    """``(where, object)`` for every non-blank line of a jsonl text; a line that is not a JSON object is an error."""
    for lineno, line in enumerate(text_lines(text), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValidationError(f"{where}: not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict):
            raise ValidationError(f"{where}: expected a JSON object")
        yield where, obj


def _shown(value) -> str:
    """A non-string JSON value as a user wrote it: ``NaN``, ``the number 12``, ``true``, ``a list``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return {list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def text_value(value, where: str, name: str) -> str:
    """A record's text field as a string: a string as it is, ``null`` as an empty text (skipped and counted as
    empty where texts are read); anything else (a number, NaN, true, a list, an object) is refused naming
    ``where`` (the file and line), never turned into the text "nan" or "[1, 2]"."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise ValidationError(f"{where}: the {name!r} field holds {_shown(value)}, not a string (write the text in "
                          "quotes; null reads as an empty text)")


def titled(obj: dict, text: str, where: str = "a record") -> str:
    """``text`` of a jsonl record with its ``title`` in front (BEIR's corpus.jsonl), as retrieval embeds a document:
    healing on a collection then sees the documents as verify and search encode them. A title that is not a
    string is refused (:func:`text_value`)."""
    text = text.strip()
    title = text_value(obj.get("title"), where, "title").strip()
    return f"{title} {text}".strip() if title else text


def parse_score(value: str, where: str) -> float:
    """A similarity or relevance score; not a number (or NaN) is an error naming ``where``."""
    try:
        score = float(value)
    except ValueError as e:
        raise ValidationError(f"{where}: score {value!r} is not a number") from e
    if score != score:  # NaN
        raise ValidationError(f"{where}: score is NaN")
    return score
