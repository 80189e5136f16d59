"""verify: a shrunk MiniLM against its source through the real CLI; STS file parsing; the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import EspressoError, NotFoundError, UnsupportedModelError, ValidationError
from espresso_export.verification.embedders import open_embedder
from espresso_export.verification.sts import load_sts, parse_columns

FAST = ["--threads", "1", "--batch-sizes", "1,8", "--latency-texts", "16", "--latency-rounds", "1", "--latency-budget", "0"]


@pytest.fixture(scope="module")
def shrunk(minilm_path, calibration_file, tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 cut to 3 layers and a 128-d PCA head (default shrink settings otherwise)."""
    from espresso_export import shrink

    out = tmp_path_factory.mktemp("verify") / "minilm-L3-d128"
    shrink(str(minilm_path), out, layers=3, dim=128, calibration=calibration_file)
    return out


@pytest.fixture(scope="module")
def full_report(shrunk, minilm_path, shared_data, tmp_path_factory) -> tuple[int, dict, str]:
    """One CLI run on a slice of STS-B test and the builtin set, with retrieval, JSON and Markdown."""
    out = tmp_path_factory.mktemp("report")
    code = main(["verify", str(shrunk), "--against", str(minilm_path),
                 "--sts", str(shared_data / "stsb" / "sts-test.csv"), "--sts", "builtin", "--sts-limit", "60",
                 "--retrieval", "builtin", "--min-sts-retention", "0.5", "--max-latency-ratio", "5",
                 "--json", str(out / "r.json"), "--markdown", str(out / "r.md"), *FAST])
    return code, json.loads((out / "r.json").read_text()), (out / "r.md").read_text()


def test_report_has_every_field(full_report):
    code, report, _ = full_report
    assert code == 0
    for role, dim in (("candidate", 128), ("source", 384)):
        model = report[role]
        assert model["dim"] == dim and model["bytes_per_vector"] == 4 * dim
        assert model["n_params"] > 0 and model["disk_bytes"] > 0 and model["load_seconds"] > 0
        assert model["kind"] == "pytorch"
    assert report["candidate"]["n_params"] < report["source"]["n_params"]
    assert report["size_ratios"]["bytes_per_vector"] == pytest.approx(128 / 384, abs=1e-4)
    assert report["size_ratios"]["n_params"] < 1 and report["size_ratios"]["disk_bytes"] < 1

    sets = report["sts"]["sets"]
    assert [s["name"] for s in sets] == ["sts-test.csv", "builtin (smoke set)"]
    assert [s["smoke_set"] for s in sets] == [False, True]
    for s in sets:
        assert s["pairs"] == 60
        assert s["retention"] == pytest.approx(s["candidate_spearman"] / s["source_spearman"], abs=1e-3)
        assert 50 < s["source_spearman"] <= 100  # all-MiniLM-L6-v2 is a strong STS model
        low, high = s["retention_ci95"]  # over the 60 pairs: a real spread around the measured retention
        assert low < s["retention"] < high
    avg = report["sts"]["average"]
    assert avg["candidate_spearman"] == pytest.approx(sum(s["candidate_spearman"] for s in sets) / 2, abs=1e-3)

    lat = report["latency"]
    assert lat["threads"] == 1 and lat["texts"] == 16 and lat["rounds"] == 1
    assert [b["batch_size"] for b in lat["batches"]] == [1, 8]
    for b in lat["batches"]:
        for role in ("candidate", "source"):
            stats = b[role]
            assert 0 < stats["p50_ms"] <= stats["p95_ms"] and stats["sentences_per_s"] > 0
        assert b["p50_ratio"] == pytest.approx(
            b["candidate"]["p50_ms"] / b["source"]["p50_ms"], rel=1e-3)
        assert b["throughput_ratio"] > 0
        # the gate's latency ratio is the table's: 1 / the speed-up (it was the p50 of single batches, not shown)
        assert b["latency_ratio"] == pytest.approx(1 / b["throughput_ratio"], rel=1e-3)
    checks = {c["name"]: c["value"] for c in report["gate"]["checks"]}
    assert [checks[f"latency ratio at batch {b['batch_size']} (1 / speed-up)"] for b in lat["batches"]] == [
        b["latency_ratio"] for b in lat["batches"]]
    assert lat["batches"][0]["candidate"]["timed_batches"] == 16  # batch 1: every text once
    assert lat["batches"][1]["candidate"]["timed_batches"] == 2

    (ret,) = report["retrieval"]
    assert ret["index"] == "flat" and ret["queries"] > 10 and ret["docs"] > ret["queries"] // 2
    for role, dim in (("candidate", 128), ("source", 384)):
        r = ret[role]
        assert 0 < r["mrr_at_10"] <= 1 and 0 < r["recall_at_10"] <= 1
        assert 0 < r["ndcg_at_10"] <= 1 and r["recall_at_10"] <= r["recall_at_100"] <= 1
        assert r["index_bytes"] >= ret["docs"] * dim * 4 and r["query_ms_per_query"] > 0 and r["dim"] == dim
    assert ret["index_bytes_ratio"] == pytest.approx(1 / 3, abs=0.02)
    assert ret["ndcg_retention"] == pytest.approx(ret["candidate"]["ndcg_at_10"] / ret["source"]["ndcg_at_10"],
                                                  abs=1e-3)
    for key in ("ndcg_retention", "recall_at_100_retention"):  # each with its interval over the queries
        low, high = ret[f"{key}_ci95"]
        assert low <= ret[key] <= high  # [1, 1] when both models score alike on every query of this small set

    gate = report["gate"]
    assert gate["passed"] is True and gate["failed"] == []
    assert gate["thresholds"] == {"min_sts_retention": 0.5, "max_latency_ratio": 5.0, "min_retrieval_retention": None,
                                  "within_noise": "value", "min_agreement": None,
                                  "max_noise": 0.1, "min_judged_retention": None}
    assert len(gate["checks"]) == 4  # two STS sets + two batch sizes
    assert all(c["decided_by"] == "value" for c in gate["checks"])
    assert any("smoke set" in note and "NOT a benchmark" in note for note in report["notes"])


def test_markdown_report(full_report):
    _, report, markdown = full_report
    assert markdown.startswith("## Verification")
    for heading in ("### Models", "### STS", "### Latency", "### Retrieval", "### Gate"):
        assert heading in markdown
    assert f"| sts-test.csv | 60 | {report['sts']['sets'][0]['candidate_spearman']:.2f} |" in markdown
    assert "Gate: **passed**" in markdown and "NOT a benchmark" in markdown


def test_gate_fails_with_exit_3_naming_the_threshold(shrunk, minilm_path, tmp_path, capsys):
    out = tmp_path / "fail.json"
    code = main(["verify", str(shrunk), "--against", str(minilm_path), "--sts-limit", "40",
                 "--min-sts-retention", "0.999", "--json", str(out), *FAST])
    assert code == 3
    err = capsys.readouterr().err
    assert "quality gate failed" in err and "STS retention on builtin (smoke set)" in err and ">= 0.999" in err
    report = json.loads(out.read_text())  # the report is written before the gate fails
    assert report["gate"]["passed"] is False
    assert report["gate"]["failed"] == ["STS retention on builtin (smoke set)"]


def test_batch_sizes_none_is_a_quality_only_check(shrunk, minilm_path, tmp_path, capsys):
    """`--batch-sizes none` (as export's `--timing-batches none`): no latency; a latency gate then cannot hold."""
    out = tmp_path / "quality.json"
    code = main(["verify", str(shrunk), "--against", str(minilm_path), "--sts-limit", "40", "--batch-sizes", "none",
                 "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 0 and report["latency"]["batches"] == [] and report["sts"]["sets"][0]["pairs"] == 40
    shown = capsys.readouterr().out
    assert "STS: Spearman" in shown and "ms per batch" not in shown  # the tables, without the latency one
    code = main(["verify", str(shrunk), "--against", str(minilm_path), "--batch-sizes", "none",
                 "--max-latency-ratio", "0.5"])
    assert code == 2 and "the latency gate (--max-latency-ratio" in capsys.readouterr().err


def test_gate_passes_with_exit_0_when_it_can_hold(minilm_path, tmp_path, capsys):
    """All 6 layers, no head: the shrunk folder is the source model, so retention 0.999 holds."""
    from espresso_export import shrink

    same = tmp_path / "minilm-L6"
    shrink(str(minilm_path), same, layers=6)
    code = main(["verify", str(same), "--against", str(minilm_path), "--sts-limit", "40",
                 "--min-sts-retention", "0.999", "--json", "-", *FAST])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sts"]["sets"][0]["retention"] == pytest.approx(1.0, abs=1e-4)
    assert report["gate"]["passed"] is True


# --- STS inputs ------------------------------------------------------------------------------------

STSB_ROWS = (
    "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.\n"
    "main-forums\tanswer-answer\t2016\t0008\t3\tIt depends on the school.\tIt really depends.\tsource A\tsource B\n"
    "main-news\theadlines\t2015\t0012\t0.400\tStocks fell sharply.\tA cat sat down.\n"
)


def test_stsb_both_row_shapes(tmp_path):
    path = tmp_path / "sts-test.csv"
    path.write_text(STSB_ROWS)
    sts = load_sts(path)
    assert sts.kind == "file" and not sts.smoke
    assert sts.pairs.scores == [5.0, 3.0, 0.4]
    assert sts.pairs.sentence1[1] == "It depends on the school."
    assert sts.pairs.sentence2[1] == "It really depends."  # the 2 extra trailing columns are ignored


def test_real_stsb_file_parses(shared_data):
    sts = load_sts(shared_data / "stsb" / "sts-test.csv")
    assert len(sts.pairs) == 1379
    assert min(sts.pairs.scores) >= 0 and max(sts.pairs.scores) <= 5


@pytest.mark.parametrize("name, content, message", [
    ("short.csv", STSB_ROWS + "main\tx\t2012\t1\t2.0\n", r"short.csv:4: expected at least 7 tab-separated columns"),
    ("score.csv", STSB_ROWS.replace("0.400", "n/a"), r"score.csv:3: score 'n/a' is not a number"),
    ("empty.csv", STSB_ROWS.replace("A cat sat down.", " "), r"empty.csv:3: empty sentence"),
    ("pairs.jsonl", '{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "a"\n',
     r"pairs.jsonl:2: not valid JSON"),
    ("fields.jsonl", '{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "a", "score": 2}\n',
     r"fields.jsonl:2: missing field\(s\) sentence2"),
    ("header.csv", "first,second,label\na,b,1\n", r"header.csv:1: header must name the columns"),
], ids=["too-few-columns", "bad-score", "empty-sentence", "bad-json", "missing-field", "bad-header"])
def test_malformed_sts_files_name_file_line_and_problem(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValidationError, match=message):
        load_sts(path)


def test_malformed_sts_file_exits_2_before_loading_models(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text(STSB_ROWS.replace("5.000", "five"))
    code = main(["verify", "no-such-model-folder/", "--against", "minilm", "--sts", str(path)])
    assert code == 2
    assert f"{path}:1: score 'five' is not a number" in capsys.readouterr().err


def test_generic_files_with_named_columns(tmp_path):
    csv_path = tmp_path / "pairs.csv"
    csv_path.write_text('left,right,gold\n"Hello, world",Hi world,4.5\nA,B,1\n')
    sts = load_sts(csv_path, columns=parse_columns("left,right,gold"))
    assert sts.pairs.sentence1 == ["Hello, world", "A"] and sts.pairs.scores == [4.5, 1.0]
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"a": "x", "b": "y", "s": 2}\n{"a": "z", "b": "w", "s": 3}\n')
    assert load_sts(jsonl, columns=("a", "b", "s")).pairs.scores == [2.0, 3.0]
    with pytest.raises(ValidationError, match="three comma-separated names"):
        parse_columns("a,b")


def test_limit_spreads_over_the_file():
    full = load_sts("builtin")
    part = load_sts("builtin", limit=10)
    assert len(part.pairs) == 10
    assert part.pairs.sentence1[0] == full.pairs.sentence1[0]
    assert len(set(part.pairs.scores)) > 3  # the set is sorted by score: a head slice would be all 5.0


def test_unknown_sts_spec_and_hub_ids(tmp_path):
    with pytest.raises(NotFoundError, match="STS set not found"):
        load_sts(tmp_path / "missing.tsv")
    from espresso_export.verification.retrieval import load_retrieval

    with pytest.raises(NotFoundError, match="retrieval set not found: no folder or file .*a BEIR folder"):
        load_retrieval(tmp_path / "missing-beir")
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ValidationError, match=r"needs datasets, which is not installed: pip install \"espresso-export\[data\]\""):
            load_sts("mteb/stsbenchmark-sts:test")
    else:
        pytest.skip("datasets is installed: Hub loading needs the network, not tested offline")


def test_export_folder_dispatch(tmp_path):
    """A folder with export.json is an ONNX export: opened by the runtime, or refused with a clear reason."""
    folder = tmp_path / "exported"
    folder.mkdir()
    (folder / "export.json").write_text("{}")
    try:
        import espresso_export.runtime  # noqa: F401
    except ImportError:
        with pytest.raises(UnsupportedModelError, match="ONNX export folders need the export feature"):
            open_embedder(folder)
    else:
        with pytest.raises(EspressoError):  # an empty export folder is refused with one of our errors
            open_embedder(folder)


def test_second_run_reads_the_source_vectors_from_the_cache(tiny_bert, tmp_path, monkeypatch, capsys):
    """The source is encoded once; the next run with the same model, texts and settings reads its vectors."""
    import shutil

    monkeypatch.setenv("ESPRESSO_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "source"
    shutil.copytree(tiny_bert, source)
    argv = ["verify", str(tiny_bert), "--against", str(source), "--retrieval", "builtin", "--batch-sizes", "2",
            "--latency-texts", "4", "--latency-rounds", "1", "--latency-budget", "0", "--threads", "1", "--json", "-"]
    runs = []
    for extra in ([], [], ["--no-cache"]):
        assert main(argv + extra) == 0
        runs.append(json.loads(capsys.readouterr().out))
    first, second, uncached = (r["source_cache"] for r in runs)
    assert first["used"] and first["encoded_texts"] > 0 and first["reused_texts"] == 0
    assert second["used"] and second["encoded_texts"] == 0 and second["reused_texts"] == first["encoded_texts"]
    assert uncached == {"used": False, "folder": None, "reused_texts": 0, "encoded_texts": first["encoded_texts"]}
    for r in runs[1:]:  # the same numbers, read or encoded
        assert r["sts"] == runs[0]["sts"] and r["retrieval"][0]["source"]["mrr_at_10"] == \
            runs[0]["retrieval"][0]["source"]["mrr_at_10"]

    config = json.loads((source / "config.json").read_text())  # another model (a changed file): encoded again
    (source / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}))
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["source_cache"]["reused_texts"] == 0


@pytest.mark.parametrize("args, said", [
    (["--min-sts-retention", "95"], "--min-sts-retention is a ratio of the source's score (0.95 keeps 95%), between 0 and "
                                "1.5; got 95: did you mean 0.95?"),
    (["--retrieval", "builtin", "--min-retrieval-retention", "0"], "--min-retrieval-retention is a ratio"),
    (["--max-latency-ratio", "-1"], "--max-latency-ratio is candidate/source time (0.5: twice as fast), above 0"),
])
def test_a_gate_no_model_can_pass_is_refused_before_measuring(args, said, capsys):
    """``--min-sts-retention 95`` (a percent) ran the whole verify and failed as a quality gate (exit 3) in CI."""
    assert main(["verify", "no-such-model-is-loaded", "--against", "nor-this-one", *args]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_a_limited_sts_set_says_it_is_a_subset(tmp_path):
    """``--sts-limit 500`` of STS-B test went into the card's model-index as if it were the whole test set."""
    from espresso_export.verification.sts import load_sts

    whole, part = load_sts("builtin"), load_sts("builtin", limit=40)
    assert whole.subset_of is None and part.subset_of == len(whole.pairs) and len(part.pairs) == 40
