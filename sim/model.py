"""The minimal attention model, batched over seeds: every parameter has a leading seed axis ``S``.

One model object holds ``S`` independent models; all contractions are batched matmuls over the seed
axis, so seeds never mix and seed ``s`` trained in a batch equals seed ``s`` trained alone.
Layers: attention only by default (no residual, no MLP), so whatever the objective needs must
pass through ``W_qk``; ``W_qk`` is parameterised directly (``M``), as separate ``W_q, W_k``
(``factored``), or tied ``W_q = W_k``. Inputs are embedded by fixed or learned tables; the default
``onehot`` embedding puts every token, special token and position on its own coordinate, so that
directionality (which is basis dependent, docs/theory.md section 2) reads as token- and position-level
dominance.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from wqk.sim.config import ModelConfig
from wqk.theory.factored import FactoredForms

N_SPECIAL = 3  # special tokens after the data vocabulary: BOS, MASK, CLS
SPECIALS = ("bos", "mask", "cls")


def _table(kind: str, rows: int, d: int, offset: int, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """``rows`` embedding vectors in ``R^d``: coordinate vectors from ``offset`` (onehot), orthonormal, or Gaussian."""
    if kind == "onehot":
        return torch.eye(d, dtype=dtype)[offset : offset + rows]
    if kind == "orthogonal":  # rows offset.. of a random orthogonal matrix: orthogonal to every other table's rows
        q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
        return (q * r.diagonal().sign()).T[offset : offset + rows].to(dtype)
    return (torch.randn(rows, d, generator=generator, dtype=torch.float64) / math.sqrt(d)).to(dtype)


class SeedBatchedAttention(nn.Module):
    """``S`` independent attention models; inputs ``[S, B, N, ...]``, parameters ``[S, ...]``."""

    def __init__(
        self,
        cfg: ModelConfig,
        n_seeds: int,
        n_positions: int,
        d_out: int,
        vocab: int | None = None,
        channels: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        cfg.validate()
        if (vocab is None) == (channels is None):
            raise ValueError("give exactly one of vocab (token inputs) or channels (continuous inputs)")
        self.cfg, self.n_seeds, self.n_positions, self.d_out = cfg, n_seeds, n_positions, d_out
        self.vocab, self.channels, self.dtype = vocab, channels, dtype
        rows = vocab + N_SPECIAL if vocab is not None else channels
        used = rows + (n_positions if cfg.positions != "none" else 0)
        if used > cfg.d and ("onehot" in (cfg.embed, cfg.positions) or "orthogonal" in (cfg.embed, cfg.positions)):
            raise ValueError(
                f"{cfg.embed}/{cfg.positions} embeddings need one coordinate per input row and position: "
                f"{rows} + {n_positions} = {used} > d = {cfg.d}; raise d, or use gaussian embeddings"
            )
        s, L, H, d, dh = n_seeds, cfg.layers, cfg.heads, cfg.d, cfg.head_dim

        def param(*shape: int, trainable: bool = True) -> nn.Parameter:
            return nn.Parameter(torch.zeros(s, *shape, dtype=dtype), requires_grad=trainable)

        self.table = param(rows, d, trainable=cfg.learn_embed)  # token table or continuous input map
        self.pos = param(n_positions, d, trainable=cfg.learn_embed and cfg.positions != "none")
        if cfg.param == "factored":
            self.w_q, self.w_k = param(L, H, d, dh), param(L, H, d, dh)
        elif cfg.param == "tied":
            self.w_qk = param(L, H, d, dh)
        else:
            self.m = param(L, H, d, d)
        self.w_v, self.w_o = param(L, H, d, dh), param(L, H, dh, d)
        if cfg.mlp:
            self.w_1, self.w_2 = param(L, d, 4 * d), param(L, 4 * d, d)
        self.w_out, self.b_out = param(d, d_out), param(d_out)

    # ---- init --------------------------------------------------------------------------------
    @torch.no_grad()
    def initialize(self, generators: list[torch.Generator]) -> None:
        """Named, ordered init, one generator per seed: embeddings, then per layer q, k, v, o, mlp, then readout."""
        if len(generators) != self.n_seeds:
            raise ValueError(f"need one generator per seed: {self.n_seeds}, got {len(generators)}")
        cfg, d, dh = self.cfg, self.cfg.d, self.cfg.head_dim
        for s, gen in enumerate(generators):

            def normal(*shape: int, std: float, gen: torch.Generator = gen) -> torch.Tensor:
                return (torch.randn(*shape, generator=gen, dtype=torch.float64) * std).to(self.dtype)

            rows = self.table.shape[1]
            if cfg.embed == "orthogonal" and cfg.positions == "orthogonal":  # one basis: all rows orthonormal
                basis = _table("orthogonal", rows + self.n_positions, d, 0, gen, self.dtype)
                self.table[s], self.pos[s] = basis[:rows], basis[rows:]
            else:
                self.table[s] = _table(cfg.embed, rows, d, 0, gen, self.dtype)
                if cfg.positions != "none":
                    self.pos[s] = _table(cfg.positions, self.n_positions, d, rows, gen, self.dtype)
            for layer in range(cfg.layers):
                std = cfg.init_scale / math.sqrt(d)
                q = normal(cfg.heads, d, dh, std=std)
                k = q.clone() if cfg.init == "symmetric" else normal(cfg.heads, d, dh, std=std)
                if cfg.param == "factored":
                    self.w_q[s, layer], self.w_k[s, layer] = q, k
                elif cfg.param == "tied":
                    self.w_qk[s, layer] = q
                else:  # direct M starts from the same law as the factored product
                    self.m[s, layer] = q @ k.transpose(-2, -1)
                self.w_v[s, layer] = normal(cfg.heads, d, dh, std=1 / math.sqrt(d))
                self.w_o[s, layer] = normal(cfg.heads, dh, d, std=1 / math.sqrt(cfg.heads * dh))
                if cfg.mlp:
                    self.w_1[s, layer] = normal(d, 4 * d, std=1 / math.sqrt(d))
                    self.w_2[s, layer] = normal(4 * d, d, std=1 / math.sqrt(4 * d))
            self.w_out[s] = normal(d, self.d_out, std=1 / math.sqrt(d))
            self.b_out[s] = 0.0

    def seed_slice(self, seeds: slice) -> SeedBatchedAttention:
        """Seeds ``seeds`` as a model of their own: its parameters are views of these (an update of either shows
        in both) and leaves of their own, so that a loss of the slice puts its gradients on the slice alone."""
        part = copy.copy(self)  # the same config and sizes; the parameter table is replaced below
        part._parameters = {
            name: None if p is None else nn.Parameter(p.detach()[seeds], requires_grad=p.requires_grad)
            for name, p in self._parameters.items()
        }
        part.n_seeds = len(range(self.n_seeds)[seeds])
        return part

    # ---- embedding ---------------------------------------------------------------------------
    def embed_tokens(self, tokens: torch.Tensor) -> TableInputs:
        """Token ids ``[S, B, N]`` (data tokens, then BOS, MASK, CLS) -> inputs ``table[id] + pos``."""
        return TableInputs(tokens, None, self.table, self._positions(tokens.shape[-1]))

    def embed_continuous(self, z: torch.Tensor) -> TableInputs:
        """Continuous tokens ``[S, B, N, c]`` -> inputs ``z @ table + pos`` (the input map is the ``c``-row table)."""
        return TableInputs(None, z, self.table, self._positions(z.shape[-2]))

    def _positions(self, n: int) -> torch.Tensor | None:
        return None if self.cfg.positions == "none" else self.pos[:, :n]

    def special_vectors(self) -> dict[str, torch.Tensor]:
        """Input vectors ``[S, d]`` of the special tokens (BOS and CLS with position 0, MASK without position)."""
        if self.vocab is None:
            return {}
        out = {name: self.table[:, self.vocab + i] for i, name in enumerate(SPECIALS)}
        out["bos"] = out["bos"] + self.pos[:, 0]
        out["cls"] = out["cls"] + self.pos[:, 0]
        return out

    # ---- forward -----------------------------------------------------------------------------
    def qk_factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A, B)`` with ``M_lh = A B^T``: ``[S, L, H, d, r]`` (``r = d`` for the direct form, ``B = I``)."""
        if self.cfg.param == "factored":
            return self.w_q, self.w_k
        if self.cfg.param == "tied":
            return self.w_qk, self.w_qk
        eye = torch.eye(self.cfg.d, dtype=self.m.dtype).expand_as(self.m)
        return self.m, eye

    def logits(self, h: torch.Tensor | TableInputs, layer: int, capture: dict | None = None) -> torch.Tensor:
        """``a_ij = x_i^T M_h x_j / sqrt(d_h)``: ``[S, H, B, N, N]`` (heads before the batch, see :func:`project`).

        ``capture``, when given, receives ``capture[layer] = (self, cross)`` pair parts of ``dL/dM`` in the backward.
        """
        a, b = self.qk_factors()
        table = isinstance(h, TableInputs) and not h.requires_grad  # else the inputs need their own gradient
        dense = None if table else _dense(h)
        return _BilinearLogits.apply(
            a[:, layer], b[:, layer], dense, h if table else None, 1 / math.sqrt(self.cfg.head_dim), capture, layer
        )

    def attend(
        self,
        h: torch.Tensor | TableInputs,
        context: torch.Tensor,
        layer: int,
        capture: dict | None,
        readout: bool = False,
    ) -> torch.Tensor:
        """One attention layer ``[S, B, N, d]``; ``context [N, N]`` (shared by all sequences) is True where query ``i``
        may attend to key ``j``. With ``readout`` the output map is folded into the readout: ``[S, B, N, d_out]``
        (``w x W_v W_o w_out`` computed as ``w (x (W_v W_o w_out))`` when ``d_out <= d_h``, else as
        ``(w x W_v) (W_o w_out)``: the order with the fewer token-sized products, for a last layer with nothing after
        it)."""
        a = self.logits(h, layer, capture)  # (S, H, B, N, N)
        context = context if context.ndim == 2 else context[:, None]  # per sequence: (S, 1, B, N, N)
        full = bool(context.all())  # no masking pass when every key is visible (bidirectional, denoising, CLS)
        if self.cfg.attention == "softmax":
            w = (a if full else a.masked_fill(~context, float("-inf"))).softmax(-1)
        else:  # linear: logits averaged over the context
            w = (a if full else a.masked_fill(~context, 0.0)) / context.sum(-1, keepdim=True).clamp_min(1)
        w_v, w_o = self.w_v[:, layer], self.w_o[:, layer]  # (S, H, d, d_h), (S, H, d_h, d)
        if readout:
            w_o = w_o @ self.w_out[:, None]  # (S, H, d_h, d_out)
            if w_o.shape[-1] <= w_o.shape[-2]:  # values straight into the readout: one token-sized product fewer
                return (w @ project(h, w_v @ w_o)).sum(1)
        y = w @ project(h, w_v)  # (S, H, B, N, d_h)
        s, n_heads, b, n, e = y.shape
        return (y.reshape(s, n_heads, b * n, e) @ w_o).sum(1).view(s, b, n, -1)

    def forward(self, inputs: TableInputs, context: torch.Tensor, capture: dict | None = None) -> torch.Tensor:
        """Inputs of all seeds -> readout ``[S, B, N, d_out]``; ``capture`` collects the pair parts of ``dL/dM``."""
        h: torch.Tensor | TableInputs = inputs
        last, cfg = self.cfg.layers - 1, self.cfg
        for layer in range(cfg.layers):
            if layer == last and not cfg.residual and not cfg.mlp:
                return self.attend(h, context, layer, capture, readout=True) + self.b_out[:, None, None]
            y = self.attend(h, context, layer, capture)
            h = _dense(h) + y if cfg.residual else y
            if cfg.mlp:
                u = torch.relu(torch.einsum("sbnd,sde->sbne", h, self.w_1[:, layer]))
                h = h + torch.einsum("sbne,sed->sbnd", u, self.w_2[:, layer])
        return torch.einsum("sbnd,sdo->sbno", h, self.w_out) + self.b_out[:, None, None]  # h: dense after a layer

    # ---- the bilinear forms ------------------------------------------------------------------
    @torch.no_grad()
    def forms(self) -> FactoredForms:
        """All seeds' forms, with the leading axes seed and layer: ``[S, L, H, d, r]`` (float64)."""
        a, b = self.qk_factors()
        return FactoredForms(a.detach().double(), b.detach().double())

    @torch.no_grad()
    def matrices(self) -> torch.Tensor:
        """Dense ``M_lh`` per seed: ``[S, L, H, d, d]`` (float64)."""
        return self.forms().matrices()


@dataclass
class TableInputs:
    """First-layer inputs ``x = table[ids] + pos`` (tokens) or ``x = z @ table + pos`` (continuous).

    In the table's coordinates ``x_i = T^T c_i + p_i``, with coefficients ``c_i`` (the one-hot id, or ``z_i``):
    projections ``x W`` are computed as ``(T W)[ids] + P W`` (gathers instead of the largest matmuls), and
    the pair sums of ``dL/dM`` in ``(c, position)`` coordinates (:func:`pair_sums`). ``pos`` is None without
    position embeddings.
    """

    ids: torch.Tensor | None  # (S, B, N) long
    z: torch.Tensor | None  # (S, B, N, c)
    table: torch.Tensor  # (S, R, d)
    pos: torch.Tensor | None  # (S, N, d)
    _rows: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def requires_grad(self) -> bool:
        return self.table.requires_grad or (self.pos is not None and self.pos.requires_grad)

    def dense(self) -> torch.Tensor:
        """``x [S, B, N, d]``."""
        if self.ids is not None:
            seed = torch.arange(self.table.shape[0])[:, None, None]
            x = self.table[seed, self.ids]
        else:
            x = self.z @ self.table[:, None]
        return x if self.pos is None else x + self.pos[:, None]

    def coefficients(self) -> torch.Tensor:
        """``c [S, B, N, R]``: ``x_i = T^T c_i + p_i``."""
        if self.ids is None:
            return self.z
        return F.one_hot(self.ids, self.table.shape[1]).to(self.table.dtype)

    def coefficient_rows(self, j: int) -> torch.Tensor:
        """The coefficients repeated for ``j`` heads, ``[S, J, B N, R]`` contiguous: one copy shared by every matmul
        against per-head operands (a broadcast matmul would copy them each time)."""
        if j not in self._rows:
            c = self.coefficients()
            s, b, n, r = c.shape
            self._rows[j] = c.reshape(s, 1, b * n, r).expand(s, j, b * n, r).contiguous()
        return self._rows[j]

    def basis(self) -> torch.Tensor | None:
        """``V = [T; P]`` ``[S, R (+ N), d]`` (``x_i = V^T (c_i, e_i)``), or None where ``V`` is the identity (one-hot
        tables filling every coordinate: multiplying by it would change nothing)."""
        v = self.table if self.pos is None else torch.cat([self.table, self.pos], 1)
        if v.shape[-2] == v.shape[-1] and torch.equal(v, torch.eye(v.shape[-1], dtype=v.dtype).expand_as(v)):
            return None
        return v

    def project(self, w: torch.Tensor) -> torch.Tensor:
        """``x W_j`` for ``w [S, J, d, e]`` -> ``[S, J, B, N, e]``."""
        rows = self.table[:, None] @ w  # (S, J, R, e)
        s, j, r, e = rows.shape
        if self.ids is not None:
            offset = (torch.arange(s * j) * r).view(s, j, 1, 1)  # rows of (seed, j) start at (s J + j) R
            out = F.embedding(self.ids[:, None] + offset, rows.reshape(s * j * r, e))  # (S, J, B, N, e)
        else:
            out = (self.coefficient_rows(j) @ rows).view(s, j, *self.z.shape[1:3], e)
        if self.pos is None:
            return out
        pos = (self.pos[:, None] @ w)[:, :, None]
        # In place where autograd does not see it (an in-place add on a view costs autograd three copies of out)
        return out + pos if out.requires_grad or pos.requires_grad else out.add_(pos)


def _dense(h: torch.Tensor | TableInputs) -> torch.Tensor:
    return h.dense() if isinstance(h, TableInputs) else h


def project(h: torch.Tensor | TableInputs, w: torch.Tensor) -> torch.Tensor:
    """``h W_j`` for inputs ``[S, B, N, d]`` (or table inputs) and ``w [S, J, d, e]`` -> ``[S, J, B, N, e]``.

    Heads come before the batch so that every attention matmul is one contiguous batched GEMM.
    """
    if isinstance(h, TableInputs):
        return h.project(w)
    s, b, n, d = h.shape
    return (h.reshape(s, 1, b * n, d) @ w).view(s, w.shape[1], b, n, w.shape[-1])


def pair_sums(beta: torch.Tensor, x: torch.Tensor | TableInputs, self_pairs: bool) -> tuple[torch.Tensor, ...]:
    """``sum_b sum_ij beta_ij x_i x_j^T`` per seed and head ``[S, H, d, d]``, and (``self_pairs``) its ``j = i`` part.

    ``beta [S, H, B, N, N]``. For table inputs ``x_i = V^T (c_i, e_i)`` (:class:`TableInputs`), so the sums are
    taken over the ``R + N`` coefficients, with the position blocks read off ``beta`` directly
    (``sum_b beta`` is the position-position block), and mapped to ``d`` by ``V^T (.) V`` at the end.
    """
    s, h, b, n, _ = beta.shape
    if isinstance(x, TableInputs):
        c, basis, positions = x.coefficient_rows(h), x.basis(), x.pos is not None
    else:
        c, basis, positions = x.reshape(s, 1, b * n, -1).expand(s, h, b * n, x.shape[-1]).contiguous(), None, False
    r = c.shape[-1]
    ct = c.transpose(-2, -1)  # (S, H, R, B N)
    bc = beta @ c.view(s, h, b, n, r)  # (S, H, B, N, R): sum_j beta_ij c_j
    flat = beta.view(s, h, b * n, n)
    out = [_blocks(ct @ bc.view(s, h, b * n, r), ct @ flat, bc.sum(2), beta.sum(2), positions)]
    if self_pairs:
        w = beta.diagonal(0, -2, -1)  # (S, H, B, N): beta_ii
        wc = c * w.reshape(s, h, b * n, 1)  # (S, H, B N, R)
        side = wc.view(s, h, b, n, r).sum(2)  # (S, H, N, R): row i = sum_b beta_ii c_i
        diag = torch.diag_embed(w.sum(2))
        out.append(_blocks(ct @ wc, side.transpose(-2, -1), side, diag, positions))
    if basis is not None:
        out = [basis.transpose(-2, -1)[:, None] @ g @ basis[:, None] for g in out]
    return tuple(out)


def _blocks(cc: torch.Tensor, cp: torch.Tensor, pc: torch.Tensor, pp: torch.Tensor, positions: bool) -> torch.Tensor:
    """``[[cc, cp], [pc, pp]]`` (coefficient and position blocks), or ``cc`` alone without positions."""
    if not positions:
        return cc
    return torch.cat([torch.cat([cc, cp], -1), torch.cat([pc, pp], -1)], -2)


class _BilinearLogits(torch.autograd.Function):
    """Logits ``(x_i^T A)(x_j^T B)^T scale`` whose backward goes through ``G = dL/dM = scale sum beta_ij x_i x_j^T``.

    ``dL/dA = G B`` and ``dL/dB = G^T A`` (the chain rule through ``M = A B^T``) come from the pair sums the
    recording needs anyway (:func:`pair_sums`), instead of ``beta K`` and ``beta^T Q`` projected back: one
    pass over ``beta`` gives the factor gradients and the self/cross split. Inputs that need a gradient
    (later layers, learned embeddings) come ``dense`` and get ``dX`` from ``beta K`` and ``beta^T Q``.
    """

    @staticmethod
    def forward(ctx, a, b, dense, table, scale, capture, layer):
        x = table if dense is None else dense
        q, k = project(x, a * scale), project(x, b)  # (S, H, B, N, r)
        needs_x = dense is not None and ctx.needs_input_grad[2]
        ctx.save_for_backward(a, b, dense, *((q, k) if needs_x else ()))
        ctx.table, ctx.scale, ctx.capture, ctx.layer = table, scale, capture, layer
        return q @ k.transpose(-2, -1)

    @staticmethod
    def backward(ctx, beta):
        a, b, dense, *qk = ctx.saved_tensors
        x = ctx.table if dense is None else dense
        sums = pair_sums(beta, x, self_pairs=ctx.capture is not None)
        g = sums[0] * ctx.scale  # dL/dM (S, H, d, d)
        if ctx.capture is not None:
            full, self_pair = sums[0].double() * ctx.scale, sums[1].double() * ctx.scale
            ctx.capture[ctx.layer] = (self_pair, full - self_pair)
        grad_a = g @ b if ctx.needs_input_grad[0] else None
        grad_b = g.transpose(-2, -1) @ a if ctx.needs_input_grad[1] else None
        grad_x = None
        if qk:
            q, k = qk
            s, h, n_b, n, r = q.shape
            dq, dk = (beta @ k).reshape(s, h, n_b * n, r), (beta.transpose(-2, -1) @ q).reshape(s, h, n_b * n, r)
            grad_x = (dq @ (a * ctx.scale).transpose(-2, -1) + dk @ b.transpose(-2, -1)).sum(1).view(dense.shape)
        return grad_a, grad_b, grad_x, None, None, None, None


def pair_split(capture: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``dL/dM`` of each layer and head split into self pairs (``j = i``) and cross pairs (``j != i``).

    From ``dL/dM_h = sum_b sum_ij beta_ij x_i x_j^T / sqrt(d_h)`` with ``beta = dL/da`` (docs/theory.md
    section 3), as filled into ``capture`` by the backward pass. Returns ``(self, cross)``, each
    ``[S, L, H, d, d]`` (float64).
    """
    layers = sorted(capture)
    return tuple(torch.stack([capture[layer][part] for layer in layers], 1) for part in (0, 1))
