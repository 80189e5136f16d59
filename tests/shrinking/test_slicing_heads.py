"""Layer selection, PCA and truncation heads: pure functions, checked against independent numpy."""

from __future__ import annotations

import numpy as np
import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.shrinking.heads import fit_pca, truncation
from espresso_export.shrinking.slicing import parse_layers, select_layers, spread
from espresso_export.core.types import Select


@pytest.mark.parametrize(("depth", "count", "expected"), [
    (6, 3, [1, 3, 5]), (12, 4, [2, 5, 8, 11]), (6, 6, [0, 1, 2, 3, 4, 5]), (6, 1, [5]), (12, 1, [11]),
])
def test_spread_keeps_the_last_layer_and_spaces_evenly(depth, count, expected):
    assert spread(depth, count) == expected


def test_select_layers_modes():
    assert select_layers(6, 3, Select.FIRST) == [0, 1, 2]
    assert select_layers(6, 3, Select.SPREAD) == [1, 3, 5]
    assert select_layers(6, 3, Select.AUTO) == [1, 3, 5]  # not ESE-trained: spread
    assert select_layers(6, 3, Select.AUTO, ese_trained=True) == [0, 1, 2]
    assert select_layers(6, [4, 0, 2]) == [0, 2, 4]


@pytest.mark.parametrize(("layers", "message"), [
    (0, "the model has 6 layers"), (7, "the model has 6 layers"), ([1, 1], "duplicates"), ([0, 6], "out of range"),
    ([], "empty"), ([-1], "out of range"), (-1, "the model has 6 layers"),
])
def test_select_layers_rejects_bad_requests(layers, message):
    with pytest.raises(ValidationError, match=message):
        select_layers(6, layers)


def test_parse_layers():
    assert parse_layers("4") == 4
    assert parse_layers("0,2, 4") == [0, 2, 4]
    assert parse_layers("3,") == [3]
    with pytest.raises(ValidationError, match="comma-separated"):
        parse_layers("four")


def _numpy_pca(x: np.ndarray, k: int):
    """An independent PCA: eigen-decomposition of the covariance matrix."""
    mean = x.mean(0)
    cov = np.cov(x - mean, rowvar=False, bias=True)
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1][:k]
    comps = vecs[:, order].T
    comps *= np.sign(comps[np.arange(k), np.abs(comps).argmax(1)])[:, None]
    return mean, comps, vals[order] / vals.sum()


def test_fit_pca_matches_numpy_eigendecomposition():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 12)) @ rng.normal(size=(12, 12)) + 3.0
    fit = fit_pca(x, 5)
    mean, comps, ratio = _numpy_pca(x, 5)
    np.testing.assert_allclose(fit.mean, mean, atol=1e-10)
    np.testing.assert_allclose(fit.components, comps, atol=1e-8)
    np.testing.assert_allclose(fit.explained_variance_ratio, ratio, atol=1e-10)
    # the Dense form (mean folded into the bias) computes the same projection
    dense = fit.as_dense()
    y = x.astype(np.float32) @ dense.weight.numpy().T + dense.bias.numpy()
    np.testing.assert_allclose(y, (x - mean) @ comps.T, atol=1e-3)
    # rows of the components are orthonormal, and the sign convention is deterministic
    np.testing.assert_allclose(fit.components @ fit.components.T, np.eye(5), atol=1e-10)
    assert np.array_equal(fit_pca(x, 5).components, fit.components)
    assert np.all(fit.components[np.arange(5), np.abs(fit.components).argmax(1)] > 0)


def test_fit_pca_rejects_impossible_requests():
    x = np.ones((10, 4))
    with pytest.raises(ValidationError, match="between 1 and 4"):
        fit_pca(x, 5)
    with pytest.raises(ValidationError, match="at least 3"):
        fit_pca(np.random.default_rng(0).normal(size=(2, 4)), 3)
    bad = np.random.default_rng(0).normal(size=(10, 4))
    bad[0, 0] = np.nan
    with pytest.raises(ValidationError, match="NaN"):
        fit_pca(bad, 2)


def test_truncation_dense_selects_the_first_k_dims():
    dense = truncation(6, 3)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(x @ dense.weight.numpy().T + dense.bias.numpy(), x[:, :3])
    with pytest.raises(ValidationError):
        truncation(6, 7)
