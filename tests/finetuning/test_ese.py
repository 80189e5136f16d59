"""ESE objective: every term against an independent numpy computation, gradients, and a few real steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from espresso_export.data import StsPairs, TextPairs, read_pairs, read_training_data
from espresso_export.core.errors import ValidationError
from espresso_export.finetuning.ese import (
    AngleWeights,
    EseBatch,
    EseObjectiveSettings,
    EseData,
    EseObjective,
    LayerWeighting,
    PairEmbeddings,
    SentenceLoss,
    align_loss,
    angle_pairs,
    check_loss_fits,
    compress_loss,
    cosent_loss,
    infonce_loss,
    log_layer_weights,
    pca_target,
    sentence_loss,
)

# --- numpy references (written from the formulas, not from the module) --------------------------------


def np_cos(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def np_angle(a, b):
    h = a.shape[1] // 2
    z = a[:, :h] + 1j * a[:, h:]
    w = b[:, :h] + 1j * b[:, h:]
    rho = (z * np.conj(w)).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.abs(rho.real + rho.imag)


def np_rank(sim, scores, scale=20.0):
    terms = [scale * (sim[j] - sim[i]) for i in range(len(sim)) for j in range(len(sim)) if scores[i] > scores[j]]
    return math.log(1.0 + sum(math.exp(t) for t in terms))


def np_infonce(anchor, cands, rows=None, exclude=None, scale=20.0):
    an = anchor / np.linalg.norm(anchor, axis=1, keepdims=True)
    cn = cands / np.linalg.norm(cands, axis=1, keepdims=True)
    logits = scale * an @ cn.T
    losses = []
    for i in range(len(anchor)):
        if rows is not None and not rows[i]:
            continue
        keep = [j for j in range(len(cands)) if exclude is None or not exclude[i][j]]
        lse = math.log(sum(math.exp(logits[i, j]) for j in keep))
        losses.append(lse - logits[i, i])
    return float(np.mean(losses))


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_pca_target(m, k):
    d = m.shape[1]
    dep = np_softmax(m.T @ m / math.sqrt(d), axis=-1)
    u, s, _ = np.linalg.svd(dep)
    t = m @ (u[:, :k] * s[:k])
    signs = np.where((t * m[:, :k]).sum(0) < 0, -1.0, 1.0)
    return t * signs


def np_align(x, t):
    mse = ((x - t) ** 2).mean()
    p, q = np_softmax(t), np_softmax(x)
    kl = (p * (np.log(p) - np.log(q))).sum(1).mean()
    return mse + kl


def rng_tensor(*shape, seed=0):
    return torch.tensor(np.random.default_rng(seed).normal(size=shape), dtype=torch.float32)


# --- layer weights ------------------------------------------------------------------------------------


def test_log_layer_weights_match_the_paper():
    assert log_layer_weights(4) == pytest.approx([1.0, 1 / (1 + math.log(2)), 1 / (1 + math.log(3)), 1.0])
    assert log_layer_weights(6, start=3) == pytest.approx([1 / (1 + math.log(i)) for i in (3, 4, 5)] + [1.0])
    assert log_layer_weights(1) == [1.0]  # a 1-layer model: only the (unweighted) last layer
    for bad in (0, 5):
        with pytest.raises(ValidationError, match="layers-from"):
            log_layer_weights(4, start=bad)


def test_uniform_and_learned_weights():
    uni = EseObjective(EseObjectiveSettings(layer_weights=LayerWeighting.UNIFORM, compression_dim=4), depth=4, hidden_size=8)
    assert {i: float(w) for i, w in uni.layer_weights().items()} == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    learned = EseObjective(EseObjectiveSettings(layer_weights="learned", compression_dim=4, layers_from=2), depth=4, hidden_size=8)
    assert [p.shape for p in learned.parameters()] == [torch.Size([2])]  # layers 2 and 3; the last is fixed
    with torch.no_grad():
        learned.logits.copy_(torch.tensor([0.0, math.log(3.0)]))
    w = {i: v.detach() for i, v in learned.layer_weights().items()}
    # 2 * softmax([0, ln 3]) = 2 * [1/4, 3/4]
    assert float(w[2]) == pytest.approx(0.5) and float(w[3]) == pytest.approx(1.5) and float(w[4]) == 1.0
    log = EseObjective(EseObjectiveSettings(compression_dim=4), depth=4, hidden_size=8)
    assert list(log.parameters()) == []
    assert [float(v) for v in log.layer_weights().values()] == pytest.approx(log_layer_weights(4))


# --- sentence losses ----------------------------------------------------------------------------------


def test_cosent_and_angle_terms_match_numpy():
    a, b = rng_tensor(5, 6, seed=1), rng_tensor(5, 6, seed=2)
    scores = torch.tensor([0.1, 4.0, 2.5, 2.5, 5.0])
    an, bn, sn = a.numpy(), b.numpy(), scores.numpy()
    assert float(cosent_loss(a, b, scores)) == pytest.approx(np_rank(np_cos(an, bn), sn), rel=1e-5)
    assert torch.allclose(angle_pairs(a, b), torch.tensor(np_angle(an, bn), dtype=torch.float32), atol=1e-6)
    assert angle_pairs(a, a) == pytest.approx(torch.ones(5), abs=1e-6)  # same vector: Re = 1, Im = 0
    w = AngleWeights(cosine=1.0, ibn=0.0, angle=0.5, angle_scale=3.0)
    got = sentence_loss(SentenceLoss.ANGLE, PairEmbeddings(a, b, scores=scores), w)
    want = np_rank(np_cos(an, bn), sn) + 0.5 * np_rank(np_angle(an, bn), sn, scale=3.0)
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_ranking_loss_is_zero_signal_for_ties_and_small_when_ordered():
    a = rng_tensor(3, 4, seed=3)
    # all scores equal: no ordered pair, log(1 + 0) = 0
    assert float(cosent_loss(a, a + 0.1, torch.tensor([1.0, 1.0, 1.0]))) == 0.0
    # a perfectly ordered batch scores far lower than the reversed order
    base = torch.eye(3, 4)
    right = torch.stack([base[0], 0.7 * base[1] + 0.3 * base[0], base[0] + base[2]])  # cos 1, .92, .71
    left = torch.stack([base[0], base[1], base[2]])
    good = cosent_loss(left, right, torch.tensor([5.0, 3.0, 1.0]))
    bad = cosent_loss(left, right, torch.tensor([1.0, 3.0, 5.0]))
    assert float(good) < 0.25 < 4.0 < float(bad)


def test_infonce_matches_numpy_with_hard_negatives_rows_and_duplicates():
    a, p, n = rng_tensor(4, 6, seed=4), rng_tensor(4, 6, seed=5), rng_tensor(4, 6, seed=6)
    cands = np.concatenate([p.numpy(), n.numpy()])
    assert float(infonce_loss(a, p, n)) == pytest.approx(np_infonce(a.numpy(), cands), rel=1e-5)
    rows = torch.tensor([True, False, True, True])
    exclude = torch.zeros(4, 8, dtype=torch.bool)
    exclude[0, 2] = True  # candidate 2 is a copy of row 0's positive
    got = infonce_loss(a, p, n, rows=rows, exclude=exclude, scale=5.0)
    want = np_infonce(a.numpy(), cands, rows.numpy(), exclude.numpy(), scale=5.0)
    assert float(got) == pytest.approx(want, rel=1e-5)
    none = infonce_loss(a, p, rows=torch.zeros(4, dtype=torch.bool))
    assert float(none) == 0.0


def test_angle_loss_on_triplets_and_pairs():
    a, p, n = rng_tensor(3, 4, seed=7), rng_tensor(3, 4, seed=8), rng_tensor(3, 4, seed=9)
    w = AngleWeights()
    got = sentence_loss("angle", PairEmbeddings(a, p, n), w)
    left = np.concatenate([a.numpy(), a.numpy()])
    right = np.concatenate([p.numpy(), n.numpy()])
    labels = np.array([1, 1, 1, 0, 0, 0])
    want = (np_rank(np_cos(left, right), labels) + np_infonce(a.numpy(), right)
            + np_rank(np_angle(left, right), labels))
    assert float(got) == pytest.approx(want, rel=1e-5)
    # plain positive pairs: only in-batch negatives carry signal
    assert float(sentence_loss("angle", PairEmbeddings(a, p), w)) == pytest.approx(np_infonce(a.numpy(), p.numpy()), rel=1e-5)
    with pytest.raises(ValidationError, match="cosent"):
        sentence_loss("cosent", PairEmbeddings(a, p), w)


# --- learn-to-compress --------------------------------------------------------------------------------


def test_pca_target_and_alignment_match_numpy():
    m = rng_tensor(10, 8, seed=10) * 2
    want = np_pca_target(m.numpy().astype(np.float64), 3)
    got = pca_target(m, 3, align_to=m)
    assert got.shape == (10, 3)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    x = rng_tensor(10, 3, seed=11)
    assert float(align_loss(x, got)) == pytest.approx(np_align(x.numpy(), got.numpy().astype(np.float64)), rel=1e-4)
    assert float(compress_loss(m, 3)) == pytest.approx(np_align(m.numpy()[:, :3], want), rel=1e-4)
    with pytest.raises(ValidationError, match="compression-dim"):
        pca_target(m, 9)


def test_no_gradient_through_the_pca_target():
    x = (rng_tensor(12, 8, seed=12) * 2).requires_grad_(True)
    compress_loss(x, 3).backward()
    # the target depends on all 8 dims; the slice only on the first 3: any gradient
    # in dims 3.. would have come through the target
    assert torch.count_nonzero(x.grad[:, 3:]) == 0
    assert torch.count_nonzero(x.grad[:, :3]) > 0
    # and the slice's gradient is the one of a constant target
    target = pca_target(x, 3, align_to=x)
    y = x.detach().clone().requires_grad_(True)
    align_loss(y[:, :3], target).backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-7)
    assert not pca_target(x, 3).requires_grad
    with pytest.raises(ValueError, match="detached"):
        align_loss(x[:, :3], x[:, 3:6])


# --- the objective ------------------------------------------------------------------------------------


def _scored_batch():
    return EseBatch(anchor=["a1", "a2", "a3", "a4"], positive=["b1", "b2", "b3", "b1"],
                    scores=[4.5, 1.0, 3.0, 4.2], is_positive=[True, False, False, True])


def test_objective_combines_the_terms_as_the_paper_writes():
    depth, d, k = 3, 8, 4
    batch = _scored_batch()
    pooled = {i: rng_tensor(8, d, seed=20 + i) for i in (1, 2, 3)}
    cfg = EseObjectiveSettings(loss="angle", compression_dim=k, alpha=0.7, beta=1.3)
    total, parts = EseObjective(cfg, depth, d).compute(pooled, batch)

    sc = np.array(batch.scores)
    rows = np.array(batch.is_positive)
    # candidate 3 ("b1") is a copy of row 0's positive, and candidate 0 of row 3's
    excl = np.zeros((4, 4), dtype=bool)
    excl[0, 3] = excl[3, 0] = True

    def angle(x):
        a, b = x[:4], x[4:]
        return np_rank(np_cos(a, b), sc) + np_infonce(a, b, rows, excl) + np_rank(np_angle(a, b), sc)

    xs = {i: pooled[i].numpy().astype(np.float64) for i in pooled}
    w = {1: 1.0, 2: 1 / (1 + math.log(2)), 3: 1.0}
    task = angle(xs[3])
    express = sum(w[i] * angle(xs[i][:, :k]) for i in (1, 2, 3))
    compress = sum(w[i] * np_align(xs[i][:, :k], np_pca_target(xs[i], k)) for i in (1, 2, 3))
    assert parts["task"] == pytest.approx(task, rel=1e-4)
    assert parts["express"] == pytest.approx(express, rel=1e-4)
    assert parts["compress"] == pytest.approx(compress, rel=1e-4)
    assert float(total) == pytest.approx(task + 0.7 * express + 1.3 * compress, rel=1e-4)
    assert set(parts) >= {"express/L1", "express/L2", "express/L3", "compress/L1", "compress/L3", "total"}


def test_control_and_layers_from():
    batch = _scored_batch()
    pooled = {i: rng_tensor(8, 8, seed=30 + i) for i in (1, 2, 3, 4)}
    control = EseObjective(EseObjectiveSettings(compression_dim=4, alpha=0, beta=0), depth=4, hidden_size=8)
    total, parts = control.compute({4: pooled[4]}, batch)
    assert control.uses_layers == [4]
    assert float(total) == parts["task"] == parts["total"] and "express" not in parts
    late = EseObjective(EseObjectiveSettings(loss="cosent", compression_dim=4, layers_from=3), depth=4, hidden_size=8)
    assert late.uses_layers == [3, 4]
    _, parts = late.compute(pooled, batch)
    assert sorted(p for p in parts if p.startswith("express/")) == ["express/L3", "express/L4"]
    with pytest.raises(ValidationError, match="compression-dim"):
        EseObjective(EseObjectiveSettings(compression_dim=16), depth=4, hidden_size=8)


# --- data ---------------------------------------------------------------------------------------------


def test_pair_readers(tmp_path):
    nli = tmp_path / "nli.tsv"
    nli.write_text("A man plays.\tA person plays.\tentailment\nA man plays.\tNobody plays.\tcontradiction\n"
                   "A man plays.\tHe is tall.\tneutral\nTwo dogs run.\tAnimals run.\tentailment\n"
                   "Two dogs run.\tCats sleep.\tcontradiction\n", encoding="utf-8")
    pairs = read_pairs(nli)
    assert pairs.anchor == ["A man plays.", "Two dogs run."]
    assert pairs.positive == ["A person plays.", "Animals run."]
    assert pairs.negative == ["Nobody plays.", "Cats sleep."] and pairs.dropped == 3
    jl = tmp_path / "pairs.jsonl"
    jl.write_text('{"anchor": "q1", "positive": "d1"}\n{"anchor": "q2", "positive": "d2"}\n', encoding="utf-8")
    assert read_pairs(jl).negative is None and len(read_pairs(jl)) == 2
    csv_file = tmp_path / "trip.csv"
    csv_file.write_text("anchor,positive,negative\nq1,d1,n1\nq2,d2,n2\n", encoding="utf-8")
    assert read_pairs(csv_file).negative == ["n1", "n2"]
    scored = tmp_path / "scored.jsonl"
    scored.write_text('{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "c", "sentence2": "d", "score": 0}\n')
    assert isinstance(read_training_data(scored), StsPairs)
    assert isinstance(read_training_data(nli), TextPairs)
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("premise\thypothesis\tlabel\na\tb\tmaybe\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="labelled.tsv:2: unknown NLI label 'maybe'"):
        read_pairs(labelled)


def test_snli_file_becomes_triplets(shared_data):
    pairs = read_pairs(shared_data / "nli" / "snli-dev-test.tsv.gz")
    assert len(pairs) > 6000 and pairs.negative is not None
    data = EseData(pairs)
    assert data.kind == "triplets"
    batch = data.collate([data[i] for i in range(3)])
    assert len(batch.texts) == 9 and batch.scores is None


def test_ese_data_from_scored_pairs_and_loss_checks():
    sts = StsPairs("s", ["a", "b", "c"], ["d", "e", "f"], [0.0, 5.0, 4.2])
    data = EseData(sts)
    assert data.positive_threshold == pytest.approx(4.0)
    batch = data.collate([data[0], data[1], data[2]])
    assert batch.is_positive == [False, True, True] and batch.scores == [0.0, 5.0, 4.2]
    check_loss_fits(EseObjectiveSettings(loss="cosent"), data)
    with pytest.raises(ValidationError, match="positive threshold"):
        check_loss_fits(EseObjectiveSettings(loss="infonce"), EseData(sts, positive_threshold=6.0))
    with pytest.raises(ValidationError, match="cosent"):
        check_loss_fits(EseObjectiveSettings(loss="cosent"), EseData(TextPairs("p", ["a", "b"], ["c", "d"])))


# --- a real (tiny) model --------------------------------------------------------------------------------


def _smoke_batch(n=8):
    from espresso_export.data import builtin_resource, read_sts

    sts = read_sts(builtin_resource("sts_smoke.tsv"))
    data = EseData(sts)
    return data.collate([data[i] for i in range(n)])


def test_gradients_reach_every_layer(tiny_bert):
    from espresso_export.model.checkpoint import load

    ckpt = load(tiny_bert)
    objective = EseObjective.from_checkpoint(ckpt, EseObjectiveSettings(compression_dim=16, layer_weights="learned"))
    total, parts = objective.loss(_smoke_batch())
    total.backward()
    for i, layer in enumerate(ckpt.model.encoder.layer):
        grads = [p.grad for p in layer.parameters() if p.requires_grad]
        assert grads and all(g is not None for g in grads), f"layer {i} got no gradient"
        assert sum(float(g.abs().sum()) for g in grads) > 0, f"layer {i} got a zero gradient"
    assert objective.logits.grad is not None and float(objective.logits.grad.abs().sum()) > 0
    assert parts["total"] == pytest.approx(float(total))


@pytest.mark.parametrize("loss", ["angle", "infonce"])  # cosent's ranking term is part of angle
def test_a_few_steps_lower_the_ese_loss(tiny_bert, loss):
    from espresso_export.model.checkpoint import load

    torch.manual_seed(0)
    ckpt = load(tiny_bert)
    objective = EseObjective.from_checkpoint(ckpt, EseObjectiveSettings(loss=loss, compression_dim=16))
    batch = _smoke_batch(12)
    opt = torch.optim.AdamW(list(ckpt.model.parameters()) + list(objective.parameters()), lr=2e-3)
    ckpt.model.eval()  # no dropout: the same batch gives the same loss
    with torch.no_grad():
        before, _ = objective.loss(batch)
    for _ in range(6):
        opt.zero_grad()
        total, _ = objective.loss(batch)
        total.backward()
        opt.step()
    with torch.no_grad():
        after, parts = objective.loss(batch)
    assert float(after) < 0.9 * float(before)
    assert parts["compress"] >= 0 and parts["express"] >= 0 and parts["task"] < float(before)


def test_train_and_shrink_help_list_the_new_options(capsys):
    from espresso_export.cli.app import main

    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--ese", "--compression-dim", "--layer-weights", "--layers-from", "--bidirectional", "--lora",
                   "--resume", "--eval-sts"):
        assert option in out
    assert main(["shrink", "--help"]) == 0
    assert "--bidirectional" in capsys.readouterr().out
