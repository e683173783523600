"""Named initialisation schemes for ``W_qk``, applied after a model's own init to every attention layer.

Each scheme rewrites the query (and for ``directional`` and ``mimetic-qk`` the key) third of the fused ``qkv`` weight,
rows blocked ``(3, H, d_h)``, and the matching bias third, then rescales the rewritten weight third so
that its standard deviation equals the baseline's (the model's own init) exactly. An arm therefore
differs from the baseline by structure only, never by scale (docs/theory.md section 6: the reference code's
symmetric arm re-drew Q/K/V with another scale and left the biases untied). A tied query bias takes
the same factor as the query weight (``(W_q, b_q) = c (W_k, b_k)``, an exact tie), so its standard
deviation equals the baseline's exactly when the biases start at zero (ViT, MAE, DiT inits) and in
distribution otherwise (``b_q`` and ``b_k`` are drawn alike). Schemes, in order:

- ``default``: the model's own init, untouched.
- ``symmetric``: ``W_q^h := c W_k^h`` per head, ``b_q := c b_k``, so ``M_h = c W_k^h W_k^h^T`` is
  symmetric positive semidefinite (``s = 1``, ``delta = 0``); the logit is a symmetric form in ``[x; 1]``.
- ``symmetric-indefinite``: ``W_q^h := c W_k^h S_h``, ``b_q^h := c S_h b_k^h`` with ``S_h`` a diagonal
  of balanced random signs (half ``+1``, half ``-1``): still exactly symmetric (``s = 1``) but with
  eigenvalues of both signs, so a token no longer prefers itself. It separates "symmetric" from
  "positive semidefinite" (self-similarity), which the tied ``W_q = W_k`` scheme confounds.
- ``self-similar``: self-similar but not symmetric, the converse separation. ``W_q^h := c W_k^h (I + A_h)``,
  ``b_q^h := c (I + A_h)^T b_k^h`` with ``A_h`` a random ``d_h x d_h`` skew-symmetric matrix, so
  ``M_h = c (W_k^h W_k^h^T + W_k^h A_h W_k^h^T) = c (P_h + K_h)``: ``P_h`` positive semidefinite (the symmetric
  arm's form), ``K_h`` skew, within the rank budget ``d_h``. ``A_h`` is scaled so that ``K_h`` carries a share
  ``skew_share`` of ``||M_h||^2`` (default ``1/2``: ``||K_h||_F = ||P_h||_F``), so ``s = 1 - 2 skew_share`` (``0``
  by default), while every token still prefers itself: ``x^T M_h x = c x^T P_h x >= 0``
  (:mod:`wqk.theory.self_similarity`). The same holds for the affine logit in ``[x; 1]`` (the bias takes the same
  ``c`` and ``A_h``). ``W_k``, ``W_v`` and the other biases are untouched.
- ``directional``: a few dominant key directions. A random set of ``n_directions`` input coordinates
  receives a share ``strength`` of the key weight's squared norm (the columns of the ``k`` third), the
  other coordinates the rest, so ``||M_h[:, b]||`` is large for those ``b``: column dominance,
  ``delta < 0``, the decoder signature. ``W_q``, the biases and ``W_v`` are untouched.
- ``mimetic-qk``: the query-key part of ``mimetic`` (below) alone, at the baseline's scale: per head
  ``W_q^h W_k^h^T`` is (up to a positive factor) the best rank-``d_h`` approximation of ``alpha_qk Z_h + beta_qk I``,
  identity plus non-symmetric noise; then the ``q`` third and the ``k`` third are each rescaled to its own
  baseline std. Each factor is one positive number for the whole third, so every head's form is scaled by the same
  ``c_q c_k > 0`` and keeps its structure (``s``, self-similarity). ``W_v``, the output projection and the
  biases stay the model's: this arm isolates mimetic's ``W_qk`` from its value-output part and its scale. It
  makes (and discards) mimetic's value draw, so that with the same generator both arms' forms differ by a positive
  factor per layer only (a paired comparison).

Two published schemes a user would pick instead define their own scale, so they are *not* at the baseline's
per-parameter scale (:data:`OWN_SCALE`; :func:`init_scales` measures the ratios, which the study reports;
:func:`init_structure` reports each arm's ``s`` and self-similarity at init):

- ``mimetic`` (Trockman & Kolter, ICML 2023, "Mimetic initialization of self-attention layers"): per head
  ``W_q^h W_k^h^T`` is the best rank-``d_h`` approximation of ``alpha_qk Z_h + beta_qk I`` (``Z_h`` with i.i.d.
  ``N(0, 1/d)`` entries; ``W_q^h = U S^1/2``, ``W_k^h = V S^1/2`` from its top ``d_h`` singular triples), and
  per layer the value-output map ``W_v W_o = alpha_vo Z + beta_vo (-I)`` exactly (``W_v = U S^1/2``,
  ``W_o = S^1/2 V^T``, rows = tokens), with the published ``alpha_qk = beta_qk = 0.7``, ``alpha_vo = beta_vo = 0.4``.
  (The authors' released code draws ``Z`` uniform of the same variance and assigns the value factors to the
  ``nn.Linear`` weights directly, which gives ``S^1/2 V^T U S^1/2`` instead: the same ``-beta_vo I`` part.)
  Biases are left as the model's init has them (zero in ViT, MAE and DiT).
- ``conditioned`` ("Conditioned initialization for attention", ICLR 2026 submission, openreview cKNOCYPo2W):
  semi-orthogonal ``W_q`` and ``W_k`` (``d x H d_h`` with orthonormal columns, Haar-distributed, drawn
  independently; every head's block then has orthonormal columns too) and the rectangular identity
  ``W_v = [I; 0]``, all of condition number 1. The output projection and the biases are untouched.

A scheme name may end in ``+gates-open`` (:data:`GATES_OPEN`), for adaLN-Zero DiTs: the scheme, then every
block's attention gate opened (:func:`open_attention_gates`). adaLN-Zero starts each gate at zero, so at init no
attention output reaches the residual stream and ``W_qk`` receives no gradient until the gates grow: an init of
``W_qk`` can only act from step 0 with the gates open.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from wqk.theory.self_similarity import self_similarity
from wqk.vision.models.attention import Attention, attention_forms


@dataclass(frozen=True)
class Thirds:
    """Views of the ``q``, ``k``, ``v`` row blocks of a fused ``qkv`` weight ``(3 d, d)`` and bias ``(3 d,)``."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bq: torch.Tensor | None
    bk: torch.Tensor | None
    bv: torch.Tensor | None


def thirds(attn: Attention) -> Thirds:
    """Views (not copies) of the three blocks: writing into them writes the module's parameters."""
    w, b = attn.qkv.weight.data, attn.qkv.bias
    q, k, v = w.chunk(3, dim=0)
    bq, bk, bv = b.data.chunk(3) if b is not None else (None, None, None)
    return Thirds(q, k, v, bq, bk, bv)


def _std_factor(new: torch.Tensor, reference_std: torch.Tensor, what: str) -> torch.Tensor:
    """The positive factor that gives ``new`` the standard deviation ``reference_std``."""
    std = new.double().std()
    if std == 0:
        raise ValueError(
            f"cannot give the {what} the baseline's scale {float(reference_std):.3g}: the rewritten block is constant"
        )
    return reference_std / std


def _head_signs(n_heads: int, d_head: int, generator: torch.Generator) -> torch.Tensor:
    """``(H * d_h,)`` signs, per head a random arrangement of ``d_h // 2`` minus signs and the rest plus."""
    base = torch.ones(d_head)
    base[: d_head // 2] = -1
    perms = torch.stack([torch.randperm(d_head, generator=generator) for _ in range(n_heads)])
    return base[perms].reshape(-1)


def _tie_queries(attn: Attention, generator: torch.Generator, indefinite: bool) -> None:
    """``(W_q^h, b_q^h) := c (W_k^h S_h, S_h b_k^h)`` with one factor ``c`` for weight and bias (an exact tie)."""
    t = thirds(attn)
    d_head = t.q.shape[0] // attn.n_heads
    signs = _head_signs(attn.n_heads, d_head, generator) if indefinite else torch.ones(t.q.shape[0])
    signs = signs.to(t.q.device, torch.float64)
    tied = signs[:, None] * t.k.double()  # row h*d_h + j of q = s_hj * that of k
    c = _std_factor(tied, t.q.double().std(), "query weight")
    t.q.copy_(c * tied)
    if t.bq is not None:
        t.bq.copy_(c * signs * t.bk.double())


def symmetric(attn: Attention, generator: torch.Generator) -> None:
    """``W_q^h := c W_k^h``, ``b_q := c b_k``: a positive semidefinite symmetric form per head."""
    _tie_queries(attn, generator, indefinite=False)


def symmetric_indefinite(attn: Attention, generator: torch.Generator) -> None:
    """``W_q^h := c W_k^h S_h`` with balanced random signs ``S_h``: symmetric, indefinite."""
    _tie_queries(attn, generator, indefinite=True)


def directional(
    attn: Attention, generator: torch.Generator, n_directions: int | None = None, strength: float = 0.5
) -> None:
    """Put a share ``strength`` of the key weight's squared norm on ``n_directions`` input coordinates."""
    t = thirds(attn)
    d = t.k.shape[1]
    n_dir = n_directions or max(1, d // 16)
    if not 0 < n_dir < d or not 0 < strength < 1:
        raise ValueError(
            f"directional init needs 0 < n_directions < d = {d} and 0 < strength < 1; got {n_dir}, {strength}"
        )
    chosen = torch.randperm(d, generator=generator)[:n_dir].to(t.k.device)
    col_sq = t.k.double().pow(2).sum(0)  # squared norm of each input coordinate's key column
    inside = torch.zeros(d, dtype=torch.bool, device=t.k.device)
    inside[chosen] = True
    share = torch.where(inside, strength / col_sq[inside].sum(), (1 - strength) / col_sq[~inside].sum())
    shaped = t.k.double() * share.sqrt()[None, :]
    t.k.copy_(_std_factor(shaped, t.k.double().std(), "key weight") * shaped)


def _low_rank_factors(target: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A, B)`` of shape ``(d, rank)`` with ``A B^T`` the best rank-``rank`` approximation of ``target``."""
    u, s, vh = torch.linalg.svd(target)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, vh[:rank].T * root


def _mimetic_queries_keys(
    t: Thirds, n_heads: int, generator: torch.Generator, alpha: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """mimetic's ``q`` and ``k`` thirds (float64): per head the balanced factors of the best rank-``d_h``
    approximation of ``alpha Z_h + beta I``, one ``Z_h`` drawn per head in head order."""
    d_out, d = t.q.shape
    d_head = d_out // n_heads
    eye = torch.eye(d, dtype=torch.float64)
    q, k = [], []
    for _ in range(n_heads):
        wq, wk = _low_rank_factors(alpha * _noise(d, generator) + beta * eye, d_head)  # (d, d_h) each
        q.append(wq.T)  # rows of the q third are the columns of W_q^h
        k.append(wk.T)
    return torch.cat(q), torch.cat(k)


def _noise(d: int, generator: torch.Generator) -> torch.Tensor:
    """A ``d x d`` matrix of i.i.d. ``N(0, 1/d)`` entries (mimetic's ``Z``), float64."""
    return torch.randn(d, d, generator=generator, dtype=torch.float64) / d**0.5


def mimetic(
    attn: Attention,
    generator: torch.Generator,
    alpha_qk: float = 0.7,
    beta_qk: float = 0.7,
    alpha_vo: float = 0.4,
    beta_vo: float = 0.4,
) -> None:
    """``W_q^h W_k^h^T ~ alpha_qk Z + beta_qk I`` per head, ``W_v W_o = alpha_vo Z' - beta_vo I`` (mimetic)."""
    t = thirds(attn)
    d = t.q.shape[1]
    if t.v.shape != (d, d) or attn.proj.weight.shape != (d, d):
        raise ValueError(f"mimetic init needs square value and output maps of width {d}; got {tuple(t.v.shape)}")
    q, k = _mimetic_queries_keys(t, attn.n_heads, generator, alpha_qk, beta_qk)
    t.q.copy_(q)
    t.k.copy_(k)
    eye = torch.eye(d, dtype=torch.float64)
    w_v, w_o_t = _low_rank_factors(alpha_vo * _noise(d, generator) - beta_vo * eye, d)  # W_v = U S^1/2, W_o^T = V S^1/2
    t.v.copy_(w_v.T)  # nn.Linear computes x weight^T, so weight = W_v^T ...
    attn.proj.weight.data.copy_(w_o_t)  # ... and weight = W_o^T: x W_v W_o = x (alpha_vo Z' - beta_vo I)


def mimetic_qk(attn: Attention, generator: torch.Generator, alpha_qk: float = 0.7, beta_qk: float = 0.7) -> None:
    """mimetic's query-key part alone (``W_q^h W_k^h^T ~ alpha_qk Z + beta_qk I``), the ``q`` and the ``k`` third each
    rescaled to its own baseline std; values, output projection and biases stay the model's."""
    t = thirds(attn)
    q, k = _mimetic_queries_keys(t, attn.n_heads, generator, alpha_qk, beta_qk)
    _noise(t.q.shape[1], generator)  # mimetic's value draw, unused: the generator then stays in step with mimetic's
    for third, new, what in ((t.q, q, "query weight"), (t.k, k, "key weight")):
        third.copy_(_std_factor(new, third.double().std(), what) * new)


def self_similar(attn: Attention, generator: torch.Generator, skew_share: float = 0.5) -> None:
    """``W_q^h := c W_k^h (I + A_h)``, ``b_q^h := c (I + A_h)^T b_k^h`` with ``A_h`` skew: ``M_h = c (P_h + K_h)``,
    ``P_h = W_k^h W_k^h^T`` positive semidefinite, ``K_h = W_k^h A_h W_k^h^T`` skew with a share ``skew_share`` of
    ``||M_h||^2``."""
    if not 0 <= skew_share < 1:
        raise ValueError(
            f"self-similar init needs 0 <= skew_share < 1 (the skew part's share of ||M||^2); got {skew_share}"
        )
    t = thirds(attn)
    n_heads = attn.n_heads
    d_head = t.q.shape[0] // n_heads
    if d_head < 2:
        raise ValueError(f"self-similar init needs heads of size d_h >= 2 (a 1 x 1 skew matrix is zero); got {d_head}")
    keys = t.k.double().reshape(n_heads, d_head, -1)  # [H, d_h, d]: head h's block is W_k^h^T
    gram = keys @ keys.transpose(-1, -2)  # W_k^h^T W_k^h, [H, d_h, d_h]
    draw = torch.randn(n_heads, d_head, d_head, generator=generator, dtype=torch.float64).to(gram.device)
    skew = draw - draw.transpose(-1, -2)
    # ||P||^2 = tr(G G), ||W_k A W_k^T||^2 = tr(A G A^T G): A scaled so ||K||^2 = share / (1 - share) ||P||^2
    energy_p = (gram * gram).sum((-2, -1))
    energy_k = (skew @ gram @ skew.transpose(-1, -2) * gram).sum((-2, -1))
    skew = skew * (skew_share / (1 - skew_share) * energy_p / energy_k).sqrt()[:, None, None]
    mix = torch.eye(d_head, dtype=torch.float64, device=gram.device) - skew  # (I + A)^T
    queries = (mix @ keys).reshape_as(t.q)  # head h's block: W_q^h^T = (I + A)^T W_k^h^T
    c = _std_factor(queries, t.q.double().std(), "query weight")
    t.q.copy_(c * queries)
    if t.bq is not None:
        t.bq.copy_(c * (mix @ t.bk.double().reshape(n_heads, d_head, 1)).reshape(-1))


def _semi_orthogonal(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """A Haar-random ``rows x cols`` matrix with orthonormal columns (``rows >= cols``): QR with the sign fix."""
    q, r = torch.linalg.qr(torch.randn(rows, cols, generator=generator, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def conditioned(attn: Attention, generator: torch.Generator) -> None:
    """Semi-orthogonal ``W_q``, ``W_k`` (orthonormal columns) and the rectangular identity ``W_v = [I; 0]``."""
    t = thirds(attn)
    d_out, d = t.q.shape
    if d_out > d:
        raise ValueError(f"semi-orthogonal W_q of shape {d} x {d_out} needs H d_h <= d")
    t.q.copy_(_semi_orthogonal(d, d_out, generator).T)
    t.k.copy_(_semi_orthogonal(d, d_out, generator).T)
    t.v.copy_(torch.eye(*t.v.shape, dtype=torch.float64))  # weight (d_v, d) = W_v^T: W_v = [I; 0]


def default(attn: Attention, generator: torch.Generator) -> None:
    """The model's own init."""


#: The suffix of a scheme whose adaLN-Zero attention gates start open (``symmetric+gates-open``).
GATES_OPEN = "+gates-open"


def open_attention_gates(model: nn.Module, value: float = 1.0) -> int:
    """Start every adaLN-Zero block's attention gate at ``value`` for every conditioning (the ``gate_msa`` third of
    its modulation: weight rows zero, bias ``value``); returns the number of blocks. A model without adaLN-Zero
    blocks is an error (nothing to open)."""
    blocks = [m for m in model.modules() if hasattr(m, "adaLN_modulation") and hasattr(m, "attn")]
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no adaLN-Zero attention gates to open (a DiT has)")
    for block in blocks:
        last = block.adaLN_modulation[-1]
        d = last.out_features // 6  # (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp)
        last.weight.data[2 * d : 3 * d].zero_()
        last.bias.data[2 * d : 3 * d].fill_(value)
    return len(blocks)


def is_scheme(name: str) -> bool:
    """A known scheme, with or without :data:`GATES_OPEN`."""
    return name.removesuffix(GATES_OPEN) in SCHEMES


#: The schemes, in the order they are listed and studied.
SCHEMES: dict[str, Callable[..., None]] = {
    "default": default,
    "symmetric": symmetric,
    "symmetric-indefinite": symmetric_indefinite,
    "self-similar": self_similar,
    "directional": directional,
    "mimetic": mimetic,
    "mimetic-qk": mimetic_qk,
    "conditioned": conditioned,
}
#: Schemes that keep the baseline's per-parameter scale exactly (every rewritten weight third's std).
MATCHED_SCALE = ("symmetric", "symmetric-indefinite", "self-similar", "directional", "mimetic-qk")
#: Schemes whose definition fixes their own scale (see the module docstring).
OWN_SCALE = ("mimetic", "conditioned")


def init_scales(model: nn.Module) -> dict[str, float]:
    """Standard deviations of the ``q``, ``k``, ``v`` thirds and the output projection, pooled over attention layers
    (root mean of the per-layer variances): what a scheme does to the per-parameter scale."""
    parts: dict[str, list[float]] = {"q": [], "k": [], "v": [], "proj": []}
    for _, attn in attention_modules(model):
        t = thirds(attn)
        for name, weight in (("q", t.q), ("k", t.k), ("v", t.v), ("proj", attn.proj.weight.detach())):
            parts[name].append(float(weight.double().var()))
    return {f"{name}_std": (sum(v) / len(v)) ** 0.5 for name, v in parts.items() if v}


def init_structure(model: nn.Module) -> dict[str, float]:
    """The structure of the heads' forms ``M_h`` at init, each the mean over layers and heads: the symmetry ``s``
    (:mod:`wqk.theory.scores`) and the self-similarity scores ``trace_share`` and ``positive_share``
    (:mod:`wqk.theory.self_similarity`). A study reports them per arm beside its results."""
    forms = attention_forms(model)
    means = {"symmetry": float(forms.scores("head").symmetry.mean())}
    return means | {name: float(v.mean()) for name, v in self_similarity(*forms.factors("head")).items()}


def attention_modules(model: nn.Module) -> list[tuple[str, Attention]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Attention)]


@torch.no_grad()
def apply_init(model: nn.Module, scheme: str, generator: torch.Generator, **params) -> list[str]:
    """Apply ``scheme`` to every Attention layer of ``model`` (in module order); return their names.

    ``params`` go to the scheme (``n_directions``, ``strength`` for ``directional``). Call it after
    the model's own init and before wrapping the model (DDP, compile) or building an optimizer.
    """
    if not is_scheme(scheme):
        raise ValueError(f"unknown init scheme {scheme!r}; choose from {list(SCHEMES)} (each may end in {GATES_OPEN})")
    if scheme.endswith(GATES_OPEN):
        names = apply_init(model, scheme.removesuffix(GATES_OPEN), generator, **params)
        open_attention_gates(model)
        return names
    accepted = list(inspect.signature(SCHEMES[scheme]).parameters)[2:]
    unknown = set(params) - set(accepted)
    if unknown:
        raise ValueError(f"init scheme {scheme!r} takes {accepted or 'no parameters'}, not {sorted(unknown)}")
    layers = attention_modules(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no wqk.vision.models.attention.Attention layers to initialise")
    for _, attn in layers:
        SCHEMES[scheme](attn, generator, **params)
    return [name for name, _ in layers]
