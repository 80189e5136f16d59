"""The export's parity gate never lets a NaN pass, and a model folder's modules are read only from inside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import GateFailedError
from espresso_export.core.metrics import cosine_rows, sts_spearman
from espresso_export.core.types import Quantize
from espresso_export.exporting.validate import Reference, compare


def _reference(rng: np.random.Generator) -> Reference:
    probe = [f"text {i}" for i in range(6)]
    probe_vectors = rng.normal(size=(6, 8))
    first, second = [f"a {i}" for i in range(5)], [f"b {i}" for i in range(5)]
    scores = [0.0, 1.0, 2.5, 4.0, 5.0]
    sts_vectors = rng.normal(size=(10, 8))
    return Reference(probe=probe, probe_vectors=probe_vectors, sts_name="tiny", sts_first=first, sts_second=second,
                     sts_scores=scores, sts_vectors=sts_vectors,
                     sts_spearman=sts_spearman(sts_vectors[:5], sts_vectors[5:], scores))


@pytest.mark.parametrize("precision", [Quantize.NONE, Quantize.INT8])
@pytest.mark.parametrize(("where", "value"), [
    ("probe", np.nan), ("probe", np.inf), ("sts", np.nan), ("reference", np.nan), ("reference", -np.inf),
])
def test_a_non_finite_vector_never_passes_the_parity_gate(where, value, precision):
    ref = _reference(np.random.default_rng(0))
    runs = {"batch 1": ref.probe_vectors.copy(), "ragged batch 7": ref.probe_vectors.copy()}
    sts = ref.sts_vectors.copy()
    assert compare(runs, sts, ref, precision)["passed"] is True  # the same vectors pass
    if where == "probe":
        runs["batch 1"][2, 0] = value
    elif where == "sts":
        sts[:] = value
    else:
        ref.probe_vectors[0, 0] = value
    result = compare(runs, sts, ref, precision, min_cosine=0.0)  # even the loosest gate
    assert result["passed"] is False and "not finite" in result["failures"][0]


def test_finite_vectors_far_from_pytorch_fail_on_their_min_cosine():
    ref = _reference(np.random.default_rng(1))
    far = {"batch 1": -ref.probe_vectors, "ragged batch 7": ref.probe_vectors}
    result = compare(far, ref.sts_vectors, ref, Quantize.INT8)
    assert result["passed"] is False and result["failures"][0].startswith("min cosine -1.00000 < 0.99")
    assert np.isclose(result["min_cosine"], float(cosine_rows(-ref.probe_vectors, ref.probe_vectors).min()))


@pytest.fixture(scope="module")
def headed(tiny_bert, calibration_file, tmp_path_factory) -> Path:
    """A 2-layer model with an 8-d PCA Dense head (read-only: copy it to modify)."""
    from espresso_export import shrink

    out = tmp_path_factory.mktemp("gate") / "small"
    shrink(tiny_bert, out, layers=2, dim=8, calibration=calibration_file)
    return out


def _nan_head(headed: Path, folder: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    shutil.copytree(headed, folder)
    weights = folder / "3_Dense" / "model.safetensors"
    tensors = load_file(weights)
    tensors["linear.weight"][0, 0] = np.nan
    save_file(tensors, weights)
    return folder


def test_export_of_a_nan_head_does_not_exit_0(headed, tmp_path, capsys):
    """The folder's weights hold a NaN: refused when loaded (exit 2) or by the parity gate (exit 3), never written
    with ``"passed": true``."""
    folder = _nan_head(headed, tmp_path / "nan")
    out = tmp_path / "out"
    code = main(["export", str(folder), "-o", str(out), "--timing-batches", "none"])
    err = capsys.readouterr().err
    assert code in (2, 3) and "Traceback" not in err and not out.exists()


def test_the_parity_gate_alone_fails_a_nan_head(headed, tmp_path):
    """A checkpoint whose head turns NaN after loading (past any load-time check) fails validation: exit 3,
    nothing written."""
    from espresso_export import export
    from espresso_export.model.checkpoint import DenseLayer, load

    ckpt = load(headed)
    dense = next(m for m in ckpt.post if isinstance(m, DenseLayer))
    dense.weight[0, 0] = float("nan")
    out = tmp_path / "out"
    with pytest.raises(GateFailedError, match="not finite") as failed:
        export(ckpt, out, timing_batches="none")
    assert failed.value.exit_code == 3 and not out.exists()


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_a_module_outside_the_model_folder_is_refused(headed, tmp_path, capsys, how):
    folder = tmp_path / "model"
    shutil.copytree(headed, folder)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(folder / "3_Dense", outside / "3_Dense")
    if how == "symlink":
        (folder / "3_Dense").symlink_to(outside / "3_Dense", target_is_directory=True)
    else:
        modules = json.loads((folder / "modules.json").read_text())
        for m in modules:
            if m["path"] == "3_Dense":
                m["path"] = "../elsewhere/3_Dense"
        (folder / "modules.json").write_text(json.dumps(modules))
    out = tmp_path / "out"
    code = main(["export", str(folder), "-o", str(out), "--timing-batches", "none"])
    err = capsys.readouterr().err
    assert code == 2 and "3_Dense" in err and "outside" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_settings_keyword_earlier_name_still_works(tiny_bert, tmp_path):
    from espresso_export import ExportSettings, export

    with pytest.warns(DeprecationWarning, match=r"export\(options=...\) is now export\(settings=...\)"):
        result = export(tiny_bert, tmp_path / "out", options=ExportSettings(validate=False, timing_batches=()))
    assert result.validated is False and (tmp_path / "out" / "onnx" / "model.onnx").is_file()
