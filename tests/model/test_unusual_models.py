"""Unusual but valid (or custom) checkpoints: custom code, short position tables, sentence-transformers folders
without ``max_seq_length``; and inputs the commands must refuse with a reason (layer lists, constant STS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import make_config, make_tokenizer

from espresso_export.cli.app import main

ALL_COMMANDS = ("shrink", "distill", "train", "export", "verify", "prune-vocab", "sweep")


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


def _edit_config(folder: Path, **changes) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _build_with(family: str, folder: Path, **config) -> Path:
    """A tiny random ``family`` model whose config gets ``config`` (position table size, pad id, ...)."""
    import torch
    from transformers import AutoModel

    tokenizer = make_tokenizer()
    cfg = make_config(family, len(tokenizer))
    for key, value in config.items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    AutoModel.from_config(cfg).save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def custom_models(tmp_path_factory, tiny_bert):
    """A Jina-style folder (stock ``model_type``, own code) and a NomicBERT-style one (own ``model_type``)."""
    root = tmp_path_factory.mktemp("custom")
    auto_map = {"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"}
    stock = _edit_config(_copy(tiny_bert, root / "stock-type"), auto_map=auto_map)
    nomic = _edit_config(_copy(tiny_bert, root / "nomic"), auto_map=auto_map, model_type="nomic_bert")
    return {"stock-type": stock, "nomic": nomic}


def _command_args(command: str, model: Path, out: Path) -> list:
    return {
        "shrink": ["shrink", model, "--layers", "2"],
        "distill": ["distill", "--teacher", model, "--student-layers", "2", "--dim", "8", "--corpus", "builtin"],
        "train": ["train", model, "--data", "builtin"],
        "export": ["export", model],
        "verify": ["verify", model, "--against", model],
        "prune-vocab": ["prune-vocab", model, "--corpus", "builtin"],
        "sweep": ["sweep", model, "--layers", "2", "--dims", "8"],
    }[command] + ([] if command == "verify" else ["-o", out])


@pytest.mark.parametrize("kind", ["stock-type", "nomic"])
@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_custom_code_is_refused_naming_the_flag(capsys, custom_models, tmp_path, command, kind):
    """Without --trust-remote-code: exit 2, the line names the flag; nothing is loaded as the stock class."""
    code, _, err = run(capsys, *_command_args(command, custom_models[kind], tmp_path / "o"))
    assert code == 2, err
    assert "--trust-remote-code" in err and "custom architecture" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("kind", ["stock-type", "nomic"])
@pytest.mark.parametrize("command", [c for c in ALL_COMMANDS if c != "sweep"])  # sweep has no flag
def test_custom_code_with_the_flag_says_not_supported(capsys, custom_models, tmp_path, command, kind):
    args = _command_args(command, custom_models[kind], tmp_path / "o") + ["--trust-remote-code"]
    code, _, err = run(capsys, *args)
    assert code == 2, err
    assert "custom architectures are not supported" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def short_roberta(tmp_path_factory) -> Path:
    """RoBERTa with 40 position rows and pad id 1: 38 usable positions, below the tokenizer's 64."""
    return _build_with("roberta", tmp_path_factory.mktemp("short") / "roberta", max_position_embeddings=40,
                       pad_token_id=1)


def _long_texts(n: int = 8) -> list[str]:
    return [" ".join(["the big dog runs to the river and eats food"] * 6)] * n


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta", "mpnet", "bert", "qwen2"])
def test_default_length_is_the_usable_positions(tmp_path, family):
    """max_seq_length = min(tokenizer limit, positions the model can take): pad_token_id + 1 rows are lost to
    RoBERTa-style numbering; BERT uses all; a rotary decoder has no table (sentence-transformers' cap)."""
    from espresso_export.model.checkpoint import load

    folder = _build_with(family, tmp_path / family, max_position_embeddings=40, pad_token_id=1)
    expected = {"roberta": 38, "xlm-roberta": 38, "mpnet": 38, "bert": 40, "qwen2": 40}[family]
    assert load(folder).max_seq_length == expected


def test_short_position_table_exports_and_shrinks(short_roberta, tmp_path, capsys):
    """Export of a long input used to index past the position table (IndexError); shrink wrote 40."""
    from espresso_export import export
    from espresso_export.model.checkpoint import load
    from espresso_export.runtime import OnnxEncoder

    code, _, err = run(capsys, "shrink", short_roberta, "--layers", "2", "-o", tmp_path / "s")
    assert code == 0, err
    st_cfg = json.loads((tmp_path / "s" / "sentence_bert_config.json").read_text())
    assert st_cfg["max_seq_length"] == 38
    result = export(short_roberta, tmp_path / "e")
    assert result.max_seq_length == 38 and result.validated
    enc = OnnxEncoder(tmp_path / "e")
    vectors = enc.encode(_long_texts(2))
    assert vectors.shape[0] == 2 and load(short_roberta).max_seq_length == 38


def test_st_folder_without_max_seq_length_follows_sentence_transformers(tmp_path):
    """No max_seq_length in sentence_bert_config.json: sentence-transformers takes min(tokenizer limit,
    max_position_embeddings) (here 600), and so does the export; export.json records it."""
    SentenceTransformer = pytest.importorskip(
        "sentence_transformers", reason="sentence-transformers (extra `st`) states the rule").SentenceTransformer
    from espresso_export import export
    from espresso_export.runtime import EXPORT_FILE

    folder = _build_with("bert", tmp_path / "plain", max_position_embeddings=600)
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    tok_cfg["model_max_length"] = 1024
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    st_folder = tmp_path / "st"
    SentenceTransformer(str(folder), device="cpu").save(str(st_folder))
    cfg_file = st_folder / "sentence_bert_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.pop("max_seq_length", None)
    cfg_file.write_text(json.dumps(cfg))
    st_length = SentenceTransformer(str(st_folder), device="cpu").max_seq_length
    assert st_length == 600
    export(st_folder, tmp_path / "e", validate=False)
    assert json.loads((tmp_path / "e" / EXPORT_FILE).read_text())["max_seq_length"] == st_length


@pytest.mark.parametrize("args", [
    ["shrink", "{m}", "--layers", "0"], ["shrink", "{m}", "--layers=-1"], ["shrink", "{m}", "--layers", "1,1"],
    ["shrink", "{m}", "--layers", "9"],
    ["distill", "--teacher", "{m}", "--student-layers", "0", "--dim", "8", "--corpus", "builtin"],
    ["sweep", "{m}", "--layers", "0", "--dims", "8"],
])
def test_bad_layer_requests_state_the_models_depth(capsys, tiny_bert, tmp_path, args):
    code, _, err = run(capsys, *[str(tiny_bert) if a == "{m}" else a for a in args], "-o", tmp_path / "o")
    assert code == 2 and "the model has 4 layers" in err, err
    assert not (tmp_path / "o").exists()


def test_sts_file_with_equal_scores_is_refused_as_input(capsys, tiny_bert, tmp_path):
    """Every score 3.0: Spearman is undefined, so the set is unusable input (exit 2), not a failed gate (3)."""
    sts = tmp_path / "flat.csv"
    sts.write_text("sentence1,sentence2,score\n" + "".join(
        f"the dog runs {i},a cat sleeps {i},3.0\n" for i in range(6)), encoding="utf-8")
    code, _, err = run(capsys, "verify", tiny_bert, "--against", tiny_bert, "--sts", sts)
    assert code == 2, err
    assert "flat.csv" in err and "every pair has the score 3" in err


def test_custom_tokenizer_code_needs_the_flag(capsys, tiny_bert, tmp_path):
    """A stock model whose tokenizer brings its own code: refused without --trust-remote-code, naming it."""
    folder = _copy(tiny_bert, tmp_path / "m")
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    tok_cfg["auto_map"] = {"AutoTokenizer": ["tokenization_x.XTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    code, _, err = run(capsys, "shrink", folder, "--layers", "2", "-o", tmp_path / "o")
    assert code == 2 and "custom tokenizer" in err and "--trust-remote-code" in err, err
