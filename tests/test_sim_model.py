"""The seed-batched model: seeds independent, fast projections exact, pair split = autograd = the closed form."""

from __future__ import annotations

import math

import pytest
import torch
from tolerance import kernel_tolerance

from wqk.sim.analysis import bos_dominance
from wqk.sim.compare import attention_batch, loss_normaliser, make_head
from wqk.sim.config import ModelConfig, default_config
from wqk.sim.coordinates import input_coordinates
from wqk.sim.model import SeedBatchedAttention, TableInputs, pair_split
from wqk.sim.record import SeedScoreRow
from wqk.sim.tasks import stack
from wqk.sim.train import Simulation
from wqk.testing import oracles
from wqk.theory.montecarlo import monte_carlo_update
from wqk.theory.report import score_rows
from wqk.theory.scores import dense_scores

OBJECTIVES = ("bidirectional", "autoregressive", "classification", "denoising", "mae")


def small(objective: str, **kw):
    """A tiny float64 config of ``objective`` (defaults of wqk.sim.config, shrunk)."""
    base = {
        "n": 10,
        "seeds": 3,
        "steps": 4,
        "batch": 4,
        "dtype": "float64",
        "record_every": 2,
        "checkpoint_every": 2,
        "model__d": 24,
        "model__heads": 2,
        "model__d_head": 6,
        "data__vocab": 8,
        "data__channels": 8,
        "data__lag": 2,
    }
    base.update(kw)
    return default_config(objective, **base)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("param", ["factored", "direct", "tied"])
def test_seed_in_a_batch_equals_seed_alone(objective: str, param: str) -> None:
    batched = Simulation(small(objective, model__param=param))
    alone = Simulation(small(objective, model__param=param, seeds=1, first_seed=1))
    for _ in range(3):
        batched.train_step()
        alone.train_step()
    for (name, pb), pa in zip(batched.model.named_parameters(), alone.model.parameters(), strict=True):
        diff = float((pb[1] - pa[0]).detach().abs().max())
        assert diff <= 1e-12, f"{name}: seed 1 differs by {diff:.3e} between the batch and alone"
    assert float((batched.grad_cross[1] - alone.grad_cross[0]).abs().max()) <= 1e-12


@pytest.mark.parametrize("kind", ["tokens", "continuous"])
def test_table_projection_equals_dense_projection(kind: str) -> None:
    g = torch.Generator().manual_seed(0)
    s, b, n, r, d, h, e = 2, 3, 5, 7, 9, 2, 4
    table, pos = (
        torch.randn(s, r, d, generator=g, dtype=torch.float64),
        torch.randn(s, n, d, generator=g, dtype=torch.float64),
    )
    w = torch.randn(s, h, d, e, generator=g, dtype=torch.float64)
    if kind == "tokens":
        inputs = TableInputs(torch.randint(r, (s, b, n), generator=g), None, table, pos)
    else:
        inputs = TableInputs(None, torch.randn(s, b, n, r, generator=g, dtype=torch.float64), table, pos)
    dense = torch.einsum("sbnd,shde->shbne", inputs.dense(), w)
    assert torch.allclose(inputs.project(w), dense, atol=1e-12), (
        f"max diff {(inputs.project(w) - dense).abs().max():.3e}"
    )


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_pair_split_sums_to_the_autograd_gradient_of_m(objective: str) -> None:
    """For the direct parameterisation ``dL/dM`` is the parameter gradient itself."""
    sim = Simulation(small(objective, model__param="direct"))
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    capture: dict = {}
    sim.task.loss(sim.model, raw, capture).sum().backward()
    self_part, cross_part = pair_split(capture)
    total = self_part + cross_part
    diff = float((total - sim.model.m.grad).abs().max())
    assert diff <= 1e-10 * float(sim.model.m.grad.abs().max()), f"||split - autograd||_max = {diff:.3e}"
    assert torch.allclose(self_part, self_part.transpose(-2, -1), atol=1e-12), "self-pair terms are symmetric"


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_autograd_gradient_equals_the_theory_closed_form(objective: str) -> None:
    """One head, at the model's own M: the simulator's dL/dM (autograd) equals wqk.theory.gradients' closed form."""
    sim = Simulation(small(objective, model__heads=1, model__d_head=8))
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    capture: dict = {}
    sim.task.loss(sim.model, raw, capture).sum().backward()
    self_part, cross_part = pair_split(capture)
    scale = loss_normaliser(sim, raw)
    for s in range(sim.cfg.seeds):
        batch = attention_batch(sim, s, {k: v[s : s + 1] for k, v in raw.items()})
        form = (sim.model.w_q[s, 0, 0].detach(), sim.model.w_k[s, 0, 0].detach())
        expected = monte_carlo_update(
            lambda b, g, batch=batch: batch, make_head(sim, s), 1, sim.cfg.batch, torch.Generator(), d_h=8, form=form
        )
        measured = (self_part[s, 0, 0] + cross_part[s, 0, 0]) * scale[s] / sim.cfg.batch
        err = float((measured - expected.mean).norm() / expected.mean.norm())
        assert err < 1e-10, f"seed {s}: relative difference {err:.3e} (||E|| = {float(expected.mean.norm()):.3e})"
        err_self = float((self_part[s, 0, 0] * scale[s] / sim.cfg.batch - expected.self_pair).norm())
        assert err_self <= 1e-10 * float(expected.mean.norm())


def test_forms_score_like_the_dense_matrices() -> None:
    sim = Simulation(small("bidirectional"))
    forms = sim.model.forms()
    head = forms.scores("head")
    dense = dense_scores(sim.model.matrices())
    assert head.symmetry.shape == (sim.cfg.seeds, sim.cfg.model.layers, sim.cfg.model.heads)
    assert torch.allclose(head.symmetry, dense.symmetry, atol=1e-10)
    assert torch.allclose(head.directionality, dense.directionality, atol=1e-10)


def test_rows_of_the_seed_stack_are_each_seeds_own_rows() -> None:
    """The seed axis leads the forms: the rows of the stack are, seed by seed, the rows of that seed's forms alone."""
    sim = Simulation(small("autoregressive", model__layers=2))
    forms = sim.model.forms()
    assert forms.leading_shape == (sim.cfg.seeds, 2)
    stacked = score_rows(forms, null_samples=16, row=SeedScoreRow)
    alone = [{"seed": s, **row} for s in range(sim.cfg.seeds) for row in score_rows(forms[s], null_samples=16)]
    assert stacked == alone
    with pytest.raises(ValueError, match="name each leading axis"):
        score_rows(forms, null_samples=16)


def test_tied_model_attends_and_learns_through_one_shared_factor() -> None:
    """Tied ``W_q = W_k = W``: the model's logits are ``x_i^T W W^T x_j / sqrt(d_h)`` written out by hand, and a
    causal step (whose ``G = dL/dM`` is not symmetric) gives ``W`` the chain-rule gradient ``(G + G^T) W`` of
    ``M = W W^T``, through both sides; ``G`` comes from the logits' own gradient (:func:`pair_split`). (The model
    takes its factor gradients from ``G``, so the chain rule is also checked against a plain autograd forward in
    :func:`test_parameter_gradients_equal_plain_autograd`.)"""
    sim = Simulation(small("autoregressive", model__param="tied"))
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    capture: dict = {}
    sim.task.loss(sim.model, raw, capture).sum().backward()
    inputs = sim.model.embed_tokens(sim.task.inputs(raw)[0])
    x, logits = inputs.dense(), sim.model.logits(inputs, 0).transpose(1, 2)  # (S, B, N, d), (S, B, H, N, N)
    w = sim.model.w_qk[:, 0].detach()  # (S, H, d, d_h)
    d_h = sim.cfg.model.head_dim
    wrong = []
    for s in range(sim.cfg.seeds):
        for h in range(sim.cfg.model.heads):
            want = oracles.bilinear_logits(x[s, :2].detach(), w[s, h], w[s, h], d_h)  # two sequences suffice
            diff = float((logits[s, :2, h].detach() - want).abs().max())
            if diff > 1e-12:
                wrong.append(f"seed {s} head {h}: max |logit - x_i^T W W^T x_j / sqrt(d_h)| = {diff:.3e}")
    oracles.assert_no_mismatches(wrong, "the tied model's logits")
    self_part, cross_part = pair_split(capture)
    g = (self_part + cross_part)[:, 0]  # (S, H, d, d)
    assert float((g - g.transpose(-2, -1)).norm() / g.norm()) > 0.1, "a causal dL/dM should not be symmetric"
    chain = (g + g.transpose(-2, -1)) @ w.double()
    grad = sim.model.w_qk.grad[:, 0].double()
    err = float((grad - chain).norm() / chain.norm())
    assert err <= 1e-10, f"||dL/dW - (G + G^T) W|| / ||(G + G^T) W|| = {err:.3e}"


def test_onehot_embedding_needs_room() -> None:
    with pytest.raises(ValueError, match="one coordinate per input row"):
        SeedBatchedAttention(ModelConfig(d=16), 1, n_positions=10, d_out=4, vocab=8)


def test_onehot_inputs_use_their_own_coordinates() -> None:
    model = SeedBatchedAttention(ModelConfig(d=24), 1, n_positions=10, d_out=4, vocab=8, dtype=torch.float64)
    model.initialize([torch.Generator().manual_seed(0)])
    x = model.embed_tokens(torch.tensor([[[0, 3, 9]]])).dense()[0, 0]  # token 9 = MASK
    expected = torch.zeros(3, 24, dtype=torch.float64)
    for i, (tok, p) in enumerate(((0, 0), (3, 1), (9, 2))):
        expected[i, tok] = expected[i, 11 + p] = 1.0
    assert torch.equal(x, expected)
    assert math.isclose(float(model.special_vectors()["bos"][0].norm()), math.sqrt(2))


def test_bos_dominance_is_the_bos_key_norm_over_the_typical_data_key_norm() -> None:
    sim = Simulation(small("autoregressive", model__layers=2))
    m = sim.model.matrices()[:, 0].sum(1)  # (S, d, d): layer 0, summed over heads; rows = query side
    table, pos = sim.model.table[:, : sim.task.vocab].double(), sim.model.pos[:, 1:].double()
    data = (table[:, :, None] + pos[:, None]).flatten(1, 2)  # every data token at every position after BOS
    typical = (data @ m.transpose(-2, -1)).norm(dim=-1).mean(-1)  # mean ||M x||
    bos = (m @ sim.specials()["bos"].double()[..., None]).norm(dim=(-2, -1))
    assert torch.allclose(torch.tensor(bos_dominance(sim), dtype=torch.float64), bos / typical, rtol=1e-10, atol=0)


def _reference_forward(model: SeedBatchedAttention, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    """The model written out with plain autograd ops (no custom backward, no folded readout): ``[S, B, N, d_out]``."""
    cfg = model.cfg
    a_all, b_all = model.qk_factors()
    h = x
    for layer in range(cfg.layers):
        q = torch.einsum("sbnd,shde->sbhne", h, a_all[:, layer])
        k = torch.einsum("sbnd,shde->sbhne", h, b_all[:, layer])
        logits = q @ k.transpose(-2, -1) / math.sqrt(cfg.head_dim)
        if cfg.attention == "softmax":
            w = logits.masked_fill(~context, float("-inf")).softmax(-1)
        else:
            w = logits.masked_fill(~context, 0.0) / context.sum(-1, keepdim=True)
        v = torch.einsum("sbnd,shde->sbhne", h, model.w_v[:, layer])
        y = torch.einsum("sbhne,shed->sbnd", w @ v, model.w_o[:, layer])
        h = h + y if cfg.residual else y
        if cfg.mlp:
            h = h + torch.einsum(
                "sbne,sed->sbnd",
                torch.relu(torch.einsum("sbnd,sde->sbne", h, model.w_1[:, layer])),
                model.w_2[:, layer],
            )
    return torch.einsum("sbnd,sdo->sbno", h, model.w_out) + model.b_out[:, None, None]


@pytest.mark.parametrize(
    "objective, overrides",
    [
        ("autoregressive", {}),
        ("autoregressive", {"model__param": "direct"}),
        ("autoregressive", {"model__param": "tied", "model__layers": 2}),
        ("bidirectional", {"model__layers": 2, "model__residual": True, "model__mlp": True}),
        ("bidirectional", {"model__learn_embed": True, "model__embed": "gaussian", "model__positions": "gaussian"}),
        ("denoising", {"model__positions": "none", "model__attention": "linear"}),
        ("denoising", {"model__embed": "orthogonal", "model__positions": "orthogonal"}),
        ("classification", {"model__layers": 2}),
        ("denoising", {"model__d_head": 8}),  # d_out = d_h: values straight into the readout, continuous inputs
        ("autoregressive", {"model__d_head": 12}),  # the same for token inputs (d_out <= d_h)
    ],
)
def test_parameter_gradients_equal_plain_autograd(objective: str, overrides: dict) -> None:
    """The factor gradients taken from the pair sums (G W_k, G^T W_q) equal autograd through a plain forward."""
    sim = Simulation(small(objective, **overrides))
    raw = stack([sim.task.draw(g, sim.cfg.batch) for g in sim.data_gens])
    first, *_, context = sim.task.inputs(raw)
    inputs = sim.model.embed_continuous(first) if objective == "denoising" else sim.model.embed_tokens(first)
    weights = torch.randn(
        sim.model(inputs, context).shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    params = {k: p for k, p in sim.model.named_parameters() if p.requires_grad}
    ours = torch.autograd.grad((sim.model(inputs, context, {}) * weights).sum(), list(params.values()))
    ref = torch.autograd.grad(
        (_reference_forward(sim.model, inputs.dense(), context) * weights).sum(), list(params.values())
    )
    for name, g, r in zip(params, ours, ref, strict=True):
        err = float((g - r).abs().max() / r.abs().max().clamp_min(1e-300))
        assert err <= 1e-10, f"{name}: relative gradient difference {err:.3e}"


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_the_gradient_lives_on_the_evaluated_entries(objective: str) -> None:
    """In input coordinates dL/dM is zero outside the entries marked evaluated (and non-zero on most of them)."""
    sim = Simulation(small(objective, model__param="direct", batch=64))
    for _ in range(2):
        sim.train_step()
    coords = input_coordinates(sim)
    grad = coords.of((sim.grad_self + sim.grad_cross)[:, 0].sum(1))  # (S, D, D)
    touched = (grad.abs() > 0).any(0)
    assert not (touched & ~coords.evaluated).any(), "gradient outside the evaluated entries"
    assert touched[coords.evaluated].double().mean() > 0.8


def test_causal_evaluated_entries() -> None:
    sim = Simulation(small("autoregressive"))
    coords, v = input_coordinates(sim), sim.task.vocab
    pos = torch.tensor([i for i, label in enumerate(coords.labels) if label == "position"])
    block = coords.evaluated[pos[:, None], pos]
    assert torch.equal(block, torch.ones_like(block).tril())  # a key later than its query never enters a logit
    assert not coords.evaluated[v + 1].any() and not coords.evaluated[:, v + 2].any()  # MASK, CLS never appear
    assert coords.evaluated[v, pos[0]] and not coords.evaluated[v, :v].any()  # BOS queries only see position 0
    assert coords.sequence.tolist() == list(range(1, sim.cfg.n))  # position 0 holds BOS


def _assert_same_to_rounding(got: torch.Tensor, want: torch.Tensor, steps: int, terms: int, what: str) -> None:
    """Equal up to the rounding of ``steps`` training steps whose products sum ``terms`` values: a group's products
    run over fewer seeds than one group's, which a CPU's batched kernels may block otherwise (tests/tolerance.py)."""
    if not want.is_floating_point():
        assert torch.equal(got, want), what
        return
    tol = kernel_tolerance(want.dtype, float(want.abs().max()), depth=4 * steps, terms=terms)
    diff = float((got - want).abs().max())
    assert diff <= tol, f"{what}: max |difference| {diff:.3g} > {tol:.3g}"


@pytest.mark.parametrize(
    ("objective", "param", "threads"),
    [(objective, "factored", 2) for objective in OBJECTIVES] + [("bidirectional", "direct", 3), ("mae", "tied", 5)],
)
def test_seed_groups_on_threads_train_as_one_group(objective: str, param: str, threads: int) -> None:
    """Seeds trained in groups on their own threads give what one group gives (to float64 rounding: the groups'
    products are batched over fewer seeds): parameters, optimiser moments, pair-split accumulators, losses, on fresh
    draws and on given ones (compare-theory's path)."""
    cfg = small(objective, model__param=param, seeds=5)
    one, grouped = Simulation(cfg), Simulation(cfg, threads=threads)
    sizes = [g.seeds.stop - g.seeds.start for g in grouped.groups]
    assert grouped.groups[0].seeds.start == 0 and all(
        a.seeds.stop == b.seeds.start for a, b in zip(grouped.groups, grouped.groups[1:], strict=False)
    ), "contiguous groups"
    assert len(sizes) == min(threads, cfg.seeds) and sum(sizes) == cfg.seeds and max(sizes) - min(sizes) <= 1, sizes
    terms = cfg.batch * cfg.n * cfg.model.d  # the widest sum of a step: a gradient over the batch's tokens
    for step in range(4):
        if step % 2:
            raw = stack([one.task.draw(g, cfg.batch) for g in one.data_gens])
            stack([grouped.task.draw(g, cfg.batch) for g in grouped.data_gens])  # the same draws, in step
            pair = one.train_step_on(raw), grouped.train_step_on(raw)
        else:
            pair = one.train_step(), grouped.train_step()
        _assert_same_to_rounding(pair[1], pair[0], step + 1, terms, f"step {step}: losses")
    theirs = grouped.tensors()
    for name, t in one.tensors().items():
        _assert_same_to_rounding(theirs[name], t, 4, terms, f"{name}, one group vs {threads} threads")
    assert [p.grad for p in grouped.groups[0].model.parameters()] == [None] * len(list(grouped.model.parameters()))


def test_seed_slice_shares_parameters_not_gradients() -> None:
    model = Simulation(small("denoising", seeds=4)).model
    part = model.seed_slice(slice(1, 3))
    assert part.n_seeds == 2 and part.w_q.shape[0] == 2
    with torch.no_grad():
        model.w_q.add_(1.0)  # an update of the whole model shows in the slice
    assert torch.equal(part.w_q, model.w_q[1:3])
    part.w_q.sum().backward()
    assert model.w_q.grad is None and part.w_q.grad is not None
