"""Checkpoints that lie are refused at load with exit 2 naming the file and tensor: NaN in a head module, a
tensor whose shape is not the config's; weights of layers the config does not have are named in one warning;
a folder whose tokenizer cannot be built says why in full."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from espresso_export.cli.app import main

pytestmark = pytest.mark.usefixtures("one_thread")


def cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def shrunk(tiny_cut) -> Path:
    """A model with a Dense head (3_Dense), read-only."""
    return tiny_cut


def _edit_tensors(file: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(file))
    edit(tensors)
    save_file(tensors, str(file))


def test_a_nan_in_the_head_is_refused_by_every_command_that_loads_it(shrunk, tmp_path, capsys):
    bad = Path(shutil.copytree(shrunk, tmp_path / "nan-head"))
    _edit_tensors(bad / "3_Dense" / "model.safetensors", lambda t: t["linear.weight"].__setitem__((0, 0), float("nan")))
    for args in (["shrink", bad, "--layers", "1", "--head", "none", "-o", tmp_path / "s"],
                 ["export", bad, "-o", tmp_path / "e"],
                 ["verify", bad, "--against", shrunk, "--batch-sizes", "none", "--sts-limit", "10"]):
        code, _, err = cli(capsys, *args)
        assert code == 2, (args[0], err)
        assert "3_Dense/model.safetensors contain NaN or Inf (tensor linear.weight)" in err, err
    assert not (tmp_path / "s").exists() and not (tmp_path / "e").exists()


def test_a_tensor_whose_shape_is_not_the_configs_is_named_with_both_shapes(shrunk, tmp_path, capsys):
    bad = Path(shutil.copytree(shrunk, tmp_path / "bad-shape"))
    key = "encoder.layer.0.intermediate.dense.weight"
    _edit_tensors(bad / "model.safetensors", lambda t: t.__setitem__(key, t[key][:10].clone()))
    code, _, err = cli(capsys, "export", bad, "-o", tmp_path / "e")
    assert code == 2 and f"tensor {key} has shape [10, 32] where the config gives [64, 32]" in err, err
    assert "look at the above report" not in err


def test_weights_of_layers_the_config_does_not_have_are_named(shrunk, tmp_path, capsys):
    lying = Path(shutil.copytree(shrunk, tmp_path / "one-layer"))
    config = json.loads((lying / "config.json").read_text())
    config["num_hidden_layers"] = 1
    (lying / "config.json").write_text(json.dumps(config))
    code, _, err = cli(capsys, "shrink", lying, "--layers", "1", "--head", "none", "-o", tmp_path / "s")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:") and "config.json" in line]
    assert len(warnings) == 1 and "gives 1 layer but the weights hold more: encoder.layer.1.* are ignored" in err


def test_a_tokenizer_that_cannot_be_built_is_explained_in_full(shrunk, tmp_path, capsys):
    bad = Path(shutil.copytree(shrunk, tmp_path / "no-tokenizer"))
    (bad / "tokenizer.json").unlink()
    code, _, err = cli(capsys, "export", bad, "-o", tmp_path / "e")
    assert code == 2 and "has no usable tokenizer" in err, err
    message = err.strip().splitlines()[-1]
    assert not message.rstrip().endswith(":"), message  # the library's message, whole
