"""The minimal attention model, batched over seeds: every parameter has a leading seed axis ``S``.

One model object holds ``S`` independent models; all contractions are batched einsums over the seed
axis, so seeds never mix and seed ``s`` trained in a batch equals seed ``s`` trained alone.
Layers: attention only by default (no residual, no MLP), so whatever the objective needs must
pass through ``W_qk``; ``W_qk`` is parameterised directly (``M``), as separate ``W_q, W_k``
(``factored``), or tied ``W_q = W_k``. Inputs are embedded by fixed or learned tables; the default
``onehot`` embedding puts every token, special token and position on its own coordinate, so that
directionality (which is basis dependent, docs/theory.md section 2) reads as token- and position-level
dominance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sim.config import ModelConfig
from theory.factored import FactoredForms

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

    # ---- embedding ---------------------------------------------------------------------------
    def embed_tokens(self, tokens: torch.Tensor) -> TableInputs:
        """Token ids ``[S, B, N]`` (data tokens, then BOS, MASK, CLS) -> inputs ``table[id] + pos``."""
        return TableInputs(tokens, None, self.table, self.pos[:, : tokens.shape[-1]])

    def embed_continuous(self, z: torch.Tensor) -> TableInputs:
        """Continuous tokens ``[S, B, N, c]`` -> inputs ``z @ table + pos`` (the input map is the ``c``-row table)."""
        return TableInputs(None, z, self.table, self.pos[:, : z.shape[-2]])

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

    def logits(self, h: torch.Tensor | TableInputs, layer: int) -> torch.Tensor:
        """``a_ij = x_i^T M_h x_j / sqrt(d_h)``: ``[S, B, H, N, N]``."""
        scale = 1 / math.sqrt(self.cfg.head_dim)
        if self.cfg.param == "direct":
            xm = _project(h, self.m[:, layer])  # (S, B, H, N, d)
            return torch.einsum("sbhne,sbme->sbhnm", xm, _dense(h)) * scale
        a, b = self.qk_factors()
        q = _project(h, a[:, layer] * scale)  # (S, B, H, N, d_h), the 1/sqrt(d_h) folded into the smaller factor
        k = _project(h, b[:, layer])
        return q @ k.transpose(-2, -1)

    def attend(
        self, h: torch.Tensor | TableInputs, context: torch.Tensor, layer: int, capture: list | None
    ) -> torch.Tensor:
        """One attention layer; ``context [N, N]`` (shared by all sequences) is True where query ``i`` may attend
        to key ``j``."""
        a = self.logits(h, layer)  # (S, B, H, N, N)
        if capture is not None:
            a.retain_grad()
            capture.append((_dense(h), a))
        full = bool(context.all())  # no masking pass when every key is visible (bidirectional, denoising, CLS)
        if self.cfg.attention == "softmax":
            w = (a if full else a.masked_fill(~context, float("-inf"))).softmax(-1)
        else:  # linear: logits averaged over the context
            w = (a if full else a.masked_fill(~context, 0.0)) / context.sum(-1, keepdim=True).clamp_min(1)
        y = w @ _project(h, self.w_v[:, layer])  # (S, B, H, N, d_h)
        return torch.einsum("sbhne,shed->sbnd", y, self.w_o[:, layer])  # (S, B, N, d)

    def forward(self, inputs: TableInputs, context: torch.Tensor, capture: list | None = None) -> torch.Tensor:
        """Inputs of all seeds -> readout ``[S, B, N, d_out]``; ``capture`` collects ``(layer input, logits)``."""
        h: torch.Tensor | TableInputs = inputs
        for layer in range(self.cfg.layers):
            y = self.attend(h, context, layer, capture)
            h = _dense(h) + y if self.cfg.residual else y
            if self.cfg.mlp:
                u = torch.relu(torch.einsum("sbnd,sde->sbne", h, self.w_1[:, layer]))
                h = h + torch.einsum("sbne,sed->sbnd", u, self.w_2[:, layer])
        return torch.einsum("sbnd,sdo->sbno", h, self.w_out) + self.b_out[:, None, None]  # h: dense after a layer

    # ---- the bilinear forms ------------------------------------------------------------------
    @torch.no_grad()
    def forms(self) -> FactoredForms:
        """All seeds' forms as one stack: layer axis = ``seed * L + layer`` (``[S L, H, d, r]``, float64)."""
        a, b = self.qk_factors()
        s, L = a.shape[:2]
        return FactoredForms(
            a.detach().double().reshape(s * L, *a.shape[2:]), b.detach().double().reshape(s * L, *b.shape[2:])
        )

    @torch.no_grad()
    def matrices(self) -> torch.Tensor:
        """Dense ``M_lh`` per seed: ``[S, L, H, d, d]`` (float64)."""
        return self.forms().matrices().unflatten(0, (self.n_seeds, self.cfg.layers))


@dataclass
class TableInputs:
    """First-layer inputs ``x = table[ids] + pos`` (tokens) or ``x = z @ table + pos`` (continuous).

    Projections ``x W`` are computed as ``(table W)[ids] + pos W``: the tables are small, so this
    replaces the largest matmuls of the model by gathers.
    """

    ids: torch.Tensor | None  # (S, B, N) long
    z: torch.Tensor | None  # (S, B, N, c)
    table: torch.Tensor  # (S, R, d)
    pos: torch.Tensor  # (S, N, d)

    def dense(self) -> torch.Tensor:
        """``x [S, B, N, d]``."""
        if self.ids is not None:
            seed = torch.arange(self.table.shape[0])[:, None, None]
            return self.table[seed, self.ids] + self.pos[:, None]
        return self.z @ self.table[:, None] + self.pos[:, None]

    def project(self, w: torch.Tensor) -> torch.Tensor:
        """``x W_h`` for per-head ``w [S, H, d, e]`` -> ``[S, B, H, N, e]``."""
        pos = torch.einsum("snd,shde->shne", self.pos, w)[:, None]  # (S, 1, H, N, e)
        rows = torch.einsum("srd,shde->srhe", self.table, w)  # (S, R, H, e)
        if self.ids is not None:
            s, r = rows.shape[:2]
            flat = self.ids + r * torch.arange(s)[:, None, None]  # row of seed s is s * R + id
            out = F.embedding(flat, rows.reshape(s * r, -1)).unflatten(-1, rows.shape[2:])  # (S, B, N, H, e)
            return out.transpose(2, 3) + pos
        return torch.einsum("sbnc,sche->sbhne", self.z, rows) + pos


def _dense(h: torch.Tensor | TableInputs) -> torch.Tensor:
    return h.dense() if isinstance(h, TableInputs) else h


def _project(h: torch.Tensor | TableInputs, w: torch.Tensor) -> torch.Tensor:
    if isinstance(h, TableInputs):
        return h.project(w)
    return torch.einsum("sbnd,shde->sbhne", h, w)


def pair_split(capture: list, d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``dL/dM`` of each layer and head split into self pairs (``j = i``) and cross pairs (``j != i``).

    From ``dL/dM_h = sum_b sum_ij beta_ij x_i x_j^T / sqrt(d_h)`` with ``beta = dL/da`` (docs/theory.md
    section 3), after ``backward``. Returns ``(self, cross)``, each ``[S, L, H, d, d]`` (float64).
    """
    selfs, crosses = [], []
    scale = 1 / math.sqrt(d_head)
    for x, a in capture:
        x = x.detach()  # (S, B, N, d)
        beta = a.grad  # (S, B, H, N, N)
        bx = beta @ x[:, :, None]  # (S, B, H, N, d): sum_j beta_ij x_j
        full = torch.einsum("sbnd,sbhne->shde", x, bx)
        bdx = beta.diagonal(0, -2, -1)[..., None] * x[:, :, None]  # (S, B, H, N, d): beta_ii x_i
        diag = torch.einsum("sbnd,sbhne->shde", x, bdx)
        selfs.append(diag.double() * scale)
        crosses.append((full.double() - diag.double()) * scale)
    return torch.stack(selfs, 1), torch.stack(crosses, 1)
