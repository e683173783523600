"""The central type: a stack of per-(layer, head) bilinear forms kept as factors.

Head ``h`` of layer ``l`` has ``M_lh = W_q^h (W_k^h)^T`` with ``W_q^h, W_k^h`` in ``R^{d x d_h}``
(input space to head space; docs/theory.md section 1). The per-layer form is ``sum_h M_lh``, itself a
factored form of rank ``H d_h``: concatenate the heads' factors along the rank axis. Where the model
gives the per-layer form a smaller factorisation (multi-head latent attention: every head's keys come
from one shared latent), the forms carry it, and it is the per-layer form's factors and rank.
Biases add linear terms to the logits and are not part of the bilinear form.

Stacks may carry further leading axes before the layer one (``[S, L, H, d, d_h]`` for ``S`` seeds): every
operation acts on each leading index alone, and scores come out with the same leading axes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from einops import rearrange

from wqk.theory.scores import DEFAULT_K, Precision, Scores, factored_scores

Per = Literal["head", "layer"]


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


def _as_stack(x: torch.Tensor, name: str) -> torch.Tensor:
    """Lift ``[d, d_h]`` or ``[H, d, d_h]`` factors to ``[1, H, d, d_h]``; ``[..., L, H, d, d_h]`` stay as they are."""
    x = torch.as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"{name} must be [d, d_h], [H, d, d_h] or [..., L, H, d, d_h]; got shape {tuple(x.shape)}")
    return x.reshape((1,) * max(0, 4 - x.ndim) + tuple(x.shape))


def _as_layers(weight: torch.Tensor, name: str) -> torch.Tensor:
    """Lift one ``nn.Linear`` weight ``(out, in)`` to a stack ``[L, out, in]``."""
    weight = torch.as_tensor(weight)
    if weight.ndim not in (2, 3):
        raise ValueError(
            f"{name} must be an nn.Linear weight (out, in) or a stack [L, out, in]; got {tuple(weight.shape)}"
        )
    return weight if weight.ndim == 3 else weight[None]


def split_heads(weight: torch.Tensor, n_heads: int, name: str = "weight") -> torch.Tensor:
    """``nn.Linear`` weight ``[L, (h dh), d]`` -> factors ``[L, h, d, dh]``, ``W^h = weight[h*dh:(h+1)*dh].T``."""
    weight = _as_layers(weight, name)
    if n_heads < 1 or weight.shape[1] % n_heads:
        raise ValueError(f"{name} has {weight.shape[1]} output rows, not divisible into {n_heads} heads")
    return rearrange(weight, "l (h dh) d -> l h d dh", h=n_heads)


def expand_kv_heads(k: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped-query attention: key factors ``[..., L, H_kv, d, dh]`` -> ``[..., L, H, d, dh]``.

    Query head ``h`` uses key head ``h // (H / H_kv)`` (``repeat_interleave`` on the head axis),
    not ``h mod H_kv`` as the paper's public code has it.
    """
    n_kv = k.shape[-3]
    if n_kv < 1 or n_heads % n_kv:
        raise ValueError(f"{n_heads} query heads cannot be grouped over {n_kv} key heads")
    return k if n_kv == n_heads else k.repeat_interleave(n_heads // n_kv, dim=-3)  # no copy without grouping


def _check_per(per: str) -> None:
    if per not in ("head", "layer"):
        raise ValueError(f"per must be 'head' or 'layer', got {per!r}")


@dataclass(frozen=True)
class FactoredForms:
    """Factors ``q = W_q^h`` and ``k = W_k^h`` of shape ``[..., L, H, d, d_h]`` (key heads already paired).

    ``n_kv_heads`` (default ``H``) records grouped-query attention: key heads are then repeated in
    groups of ``H / H_kv`` (:func:`expand_kv_heads`), and the per-layer form has rank ``H_kv d_h``.

    ``layer_q, layer_k`` (``[..., L, d, r]``, optional): factors of the per-layer form ``sum_h M_lh`` of a rank
    ``r`` below the heads' ``H_kv d_h``, where the model's structure gives one (DeepSeek's multi-head latent
    attention: ``r = kv_lora_rank + d_rope``, against ``H (d_nope + d_rope)``). They must multiply out to the
    sum of the heads' forms (the adapter that builds them is tested for it); every operation below keeps them
    where it can, and drops them (the heads' factors then give the per-layer form) where it cannot.
    """

    q: torch.Tensor
    k: torch.Tensor
    n_kv_heads: int | None = None
    layer_q: torch.Tensor | None = None
    layer_k: torch.Tensor | None = None

    def __post_init__(self) -> None:
        q, k = _as_stack(self.q, "q"), _as_stack(self.k, "k")
        if q.shape != k.shape:
            raise ValueError(
                f"q and k factors disagree: {tuple(q.shape)} vs {tuple(k.shape)} (expected [..., L, H, d, d_h] each)"
            )
        n_kv = q.shape[-3] if self.n_kv_heads is None else self.n_kv_heads
        if n_kv < 1 or q.shape[-3] % n_kv:
            raise ValueError(f"{q.shape[-3]} query heads cannot be grouped over {n_kv} key heads")
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "n_kv_heads", n_kv)
        if (self.layer_q is None) != (self.layer_k is None):
            raise ValueError("give both per-layer factors layer_q and layer_k, or neither")
        if self.layer_q is not None:
            lq, lk = torch.as_tensor(self.layer_q), torch.as_tensor(self.layer_k)
            want = (*q.shape[:-3], q.shape[-2])
            if lq.shape != lk.shape or lq.ndim != q.ndim - 1 or tuple(lq.shape[:-1]) != want:
                extra = f" after the leading axes {tuple(want[:-2])}" if len(want) > 2 else ""
                raise ValueError(
                    f"per-layer factors must be [L={want[-2]}, d={want[-1]}, r] each{extra}; "
                    f"got {tuple(lq.shape)} and {tuple(lk.shape)}"
                )
            object.__setattr__(self, "layer_q", lq)
            object.__setattr__(self, "layer_k", lk)

    # ---- constructors -------------------------------------------------------------------------
    @classmethod
    def from_linear(
        cls, q_weight: torch.Tensor, k_weight: torch.Tensor, n_heads: int, n_kv_heads: int | None = None
    ) -> FactoredForms:
        """From separate q/k ``nn.Linear`` weights ``(out, in)`` or ``[L, out, in]``; GQA if n_kv_heads < n_heads."""
        q = split_heads(q_weight, n_heads, "q weight")
        k = split_heads(k_weight, n_kv_heads or n_heads, "k weight")
        if q.shape[-1] != k.shape[-1]:
            raise ValueError(f"query head size {q.shape[-1]} != key head size {k.shape[-1]}; check the head counts")
        return cls(q, expand_kv_heads(k, n_heads), n_kv_heads=k.shape[1])

    @classmethod
    def from_fused_qkv(cls, qkv_weight: torch.Tensor, n_heads: int) -> FactoredForms:
        """From a fused ``qkv`` weight whose rows are blocked ``(3, H, d_h)`` (timm ViT, DiT)."""
        qkv = _as_layers(qkv_weight, "qkv weight")
        if qkv.shape[1] % 3:
            raise ValueError(f"a fused qkv weight needs 3 * H * d_h rows; got {qkv.shape[1]}")
        q, k, _ = rearrange(qkv, "l (three hdh) d -> three l hdh d", three=3)
        return cls.from_linear(q, k, n_heads)

    @classmethod
    def from_dense(cls, m: torch.Tensor) -> FactoredForms:
        """Dense forms ``[d, d]``, ``[H, d, d]`` or ``[..., L, H, d, d]`` as factors ``A = M``, ``B = I`` (float64).

        For forms that exist only densely (an accumulated gradient, an expected update), so that their
        scores and token norms go through the same code as factored ones.
        """
        m = torch.as_tensor(m)
        if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
            raise ValueError(f"dense forms must be [d, d], [H, d, d] or [..., L, H, d, d]; got shape {tuple(m.shape)}")
        m = _as_stack(m, "M").double()
        return cls(m, torch.eye(m.shape[-1], dtype=torch.float64, device=m.device).expand_as(m))

    @classmethod
    def stack(cls, forms: list[FactoredForms]) -> FactoredForms:
        """Concatenate the layers of several forms (all with the same leading axes, H, H_kv, d, d_h)."""
        n_kv = {f.n_kv_heads for f in forms}
        if len(n_kv) > 1:
            raise ValueError(f"cannot stack forms with different key-head counts {sorted(n_kv)}")
        ranks = {f.rank("layer") for f in forms}
        if len(ranks) > 1:
            raise ValueError(f"cannot stack forms whose per-layer forms differ in rank {sorted(ranks)}")
        layer = [f.factors("layer") for f in forms] if any(f.layer_q is not None for f in forms) else None
        return cls(
            torch.cat([f.q for f in forms], -4),
            torch.cat([f.k for f in forms], -4),
            n_kv.pop(),
            *((torch.cat([a for a, _ in layer], -3), torch.cat([b for _, b in layer], -3)) if layer else ()),
        )

    # ---- algebra (stays factored; each operation's factors multiply out to the dense result) ---
    def __add__(self, other: FactoredForms) -> FactoredForms:
        """``M + M'`` head by head: ``[A, A'] [B, B']^T`` (the ranks add)."""
        if not isinstance(other, FactoredForms):
            return NotImplemented
        if self.q.shape[:-1] != other.q.shape[:-1] or self.n_kv_heads != other.n_kv_heads:
            raise ValueError(
                f"cannot add forms of shapes [..., L, H, d] {tuple(self.q.shape[:-1])} and "
                f"{tuple(other.q.shape[:-1])} (key heads {self.n_kv_heads} and {other.n_kv_heads})"
            )
        dtype = torch.promote_types(self.q.dtype, other.q.dtype)
        cat = lambda a, b: torch.cat([a.to(dtype), b.to(dtype)], dim=-1)
        layer = ()
        if self.layer_q is not None or other.layer_q is not None:  # the per-layer sums add as the heads do
            (a, b), (a2, b2) = self.factors("layer"), other.factors("layer")
            layer = (cat(a, a2), cat(b, b2))
        return FactoredForms(cat(self.q, other.q), cat(self.k, other.k), self.n_kv_heads, *layer)

    def __neg__(self) -> FactoredForms:
        return self._sides(torch.neg, _same)

    def __sub__(self, other: FactoredForms) -> FactoredForms:
        """``M - M'``, e.g. the update ``M_t - M_0``: ``[A, -A'] [B, B']^T``."""
        return self + (-other)

    def __mul__(self, c: float) -> FactoredForms:
        """``c M`` (the scalar goes into the query factor)."""
        return self._sides(lambda x: x * c, _same)

    __rmul__ = __mul__

    def __matmul__(self, other: FactoredForms | torch.Tensor) -> FactoredForms:
        """``M X`` for dense ``X`` (``A (X^T B)^T``), or ``M M'`` head by head for factored ``M' = A' B'^T``.

        A dense ``X [..., d, d]`` broadcasts against the heads' ``[..., L, H, d, d]`` (``[d, d]``: one for all).
        ``M M' = (A (B^T A')) B'^T`` or ``A (B' (A'^T B))^T``, whichever has the smaller rank; the product of two
        heads' forms is no sum over heads, so explicit per-layer factors are not carried into it.
        """
        if isinstance(other, FactoredForms):
            return self._times_forms(other)
        operands = self._dense_operand(other)
        if operands is None:
            return NotImplemented
        x, forms = operands
        keys = x.transpose(-2, -1) @ forms.k
        queries = forms.q.expand(keys.shape)
        if not _shared_by_heads(x):  # each head's keys move differently: the grouping and per-layer factors go
            return FactoredForms(queries, keys)
        layer = ()
        if forms.layer_q is not None:
            layer_keys = _one_for_all(x).transpose(-2, -1) @ forms.layer_k
            layer = (forms.layer_q.expand(layer_keys.shape), layer_keys)
        return FactoredForms(queries, keys, self.n_kv_heads, *layer)

    def __rmatmul__(self, other: torch.Tensor) -> FactoredForms:
        """``X M`` for dense ``X [..., d, d]``: ``(X A) B^T`` (the key factors, so the grouping, stay)."""
        operands = self._dense_operand(other)
        if operands is None:
            return NotImplemented
        x, forms = operands
        queries = x @ forms.q
        keys = forms.k.expand(queries.shape)
        layer = ()
        if forms.layer_q is not None and _shared_by_heads(x):
            layer_queries = _one_for_all(x) @ forms.layer_q
            layer = (layer_queries, forms.layer_k.expand(layer_queries.shape))
        return FactoredForms(queries, keys, self.n_kv_heads, *layer)

    def _dense_operand(self, x: object) -> tuple[torch.Tensor, FactoredForms] | None:
        """``x`` as ``d x d`` matrices and these forms, both in the product's dtype (None where ``x`` is no tensor:
        not ours to multiply)."""
        if not isinstance(x, torch.Tensor):
            return None
        d = self.d_model
        if x.ndim < 2 or tuple(x.shape[-2:]) != (d, d):
            raise ValueError(f"a dense factor of the forms must be [..., d={d}, d={d}]; got {tuple(x.shape)}")
        dtype = torch.promote_types(x.dtype, self.q.dtype)
        return x.to(dtype), self.map(lambda t: t.to(dtype))

    def _times_forms(self, other: FactoredForms) -> FactoredForms:
        if self.q.shape[:-1] != other.q.shape[:-1]:
            raise ValueError(
                f"cannot multiply forms of shapes [..., L, H, d] {tuple(self.q.shape[:-1])} and "
                f"{tuple(other.q.shape[:-1])}"
            )
        dtype = torch.promote_types(self.q.dtype, other.q.dtype)
        a, b, a2, b2 = (x.to(dtype) for x in (self.q, self.k, other.q, other.k))
        middle = b.transpose(-2, -1) @ a2  # (..., r, r')
        if a2.shape[-1] <= a.shape[-1]:  # rank r': the other's keys, so its grouping, stay
            return FactoredForms(a @ middle, b2, other.n_kv_heads)
        return FactoredForms(a, b2 @ middle.transpose(-2, -1))

    def diag_scaled(self, left: torch.Tensor | None = None, right: torch.Tensor | None = None) -> FactoredForms:
        """``diag(l) M diag(r)``: rows of ``A`` times ``l``, rows of ``B`` times ``r``.

        ``left`` / ``right`` are ``[d]`` (every layer) or ``[..., L, d]`` (per layer, broadcast against the leading
        axes); ``None`` leaves that side alone. E.g. a DiT's adaLN-modulated form ``diag(1 + s) M diag(1 + s)``.
        """
        leading = self.q.shape[:-3]

        def rows(x: torch.Tensor, scale: torch.Tensor | None, side: str) -> torch.Tensor:
            if scale is None:
                return x
            scale = torch.as_tensor(scale).to(x.device)
            if not _broadcasts(scale, leading, self.d_model):
                raise ValueError(
                    f"{side} scale must be [d={self.d_model}] or [L={self.n_layers}, d] "
                    f"(broadcast against the leading axes {tuple(leading)}); got {tuple(scale.shape)}"
                )
            per_head = x.ndim == self.q.ndim  # head factors (..., H, d, r); per-layer factors (..., d, r)
            scale = scale[..., None, :, None] if per_head else scale[..., :, None]
            dtype = torch.promote_types(x.dtype, scale.dtype)
            return x.to(dtype) * scale.to(dtype)

        return self._sides(lambda x: rows(x, left, "left"), lambda x: rows(x, right, "right"))

    def transposed(self) -> FactoredForms:
        """``M^T = B A^T``: query and key factors swap (grouped-query heads are then no longer grouped)."""
        return FactoredForms(self.k, self.q, None, *(() if self.layer_q is None else (self.layer_k, self.layer_q)))

    @property
    def T(self) -> FactoredForms:
        """``M^T`` (:meth:`transposed`)."""
        return self.transposed()

    def summed_heads(self) -> FactoredForms:
        """The per-layer form ``sum_h M_h`` as a stack with one head: ``[..., L, 1, d, H_kv d_h]``."""
        a, b = self.factors("layer")
        return FactoredForms(a[..., None, :, :], b[..., None, :, :])

    def layers(self, index: slice | list[int] | torch.Tensor) -> FactoredForms:
        """The forms of the selected layers (the last leading axis), e.g. ``layers([0])``."""
        pick = lambda x: x[(..., index, *(slice(None),) * (x.ndim - self.q.ndim + 3))]  # the axis before H (or d)
        return self._sides(pick, pick)

    def __getitem__(self, index) -> FactoredForms:
        """The forms at ``index`` over the leading axes (``forms[s]``: seed ``s`` of ``[S, L, H]`` forms).

        Head, ``d`` and rank axes cannot be indexed; where the index leaves no leading axis, the result keeps a
        layer axis of length 1 (as the constructor lifts ``[H, d, d_h]`` factors).
        """
        index = index if isinstance(index, tuple) else (index,)
        used = sum(i.ndim if isinstance(i, torch.Tensor) and i.dtype == torch.bool else i is not None for i in index)
        if any(i is Ellipsis for i in index) or used > len(self.leading_shape):
            raise IndexError(
                f"forms index only their leading axes {tuple(self.leading_shape)} (no Ellipsis); got {index!r}"
            )
        if self.q[index].ndim < 4:
            index = (*index, None)
        return self._sides(lambda x: x[index], lambda x: x[index])

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> FactoredForms:
        """The same forms with ``fn`` applied to every factor (a cast, a move to another device)."""
        return self._sides(fn, fn)

    def _sides(self, on_q: Callable, on_k: Callable) -> FactoredForms:
        """``on_q`` applied to the query-side factors (per head and, where given, per layer), ``on_k`` to the keys'."""
        layer = () if self.layer_q is None else (on_q(self.layer_q), on_k(self.layer_k))
        return FactoredForms(on_q(self.q), on_k(self.k), self.n_kv_heads, *layer)

    # ---- shape --------------------------------------------------------------------------------
    @property
    def leading_shape(self) -> torch.Size:
        """The axes before the head axis, the layer axis last: ``[L]``, or ``[S, L]`` for a stack of seeds."""
        return self.q.shape[:-3]

    @property
    def n_layers(self) -> int:
        return self.q.shape[-4]

    @property
    def n_heads(self) -> int:
        return self.q.shape[-3]

    @property
    def d_model(self) -> int:
        return self.q.shape[-2]

    @property
    def d_head(self) -> int:
        return self.q.shape[-1]

    def rank(self, per: Per) -> int:
        """Number of columns of the factors of a per-head (``d_h``) or per-layer (``H_kv d_h``, or that of the
        explicit per-layer factors) form."""
        _check_per(per)
        if per == "head":
            return self.d_head
        return self.n_kv_heads * self.d_head if self.layer_q is None else self.layer_q.shape[-1]

    # ---- views --------------------------------------------------------------------------------
    def factors(self, per: Per = "head") -> tuple[torch.Tensor, torch.Tensor]:
        """``(A, B)`` with ``M = A B^T``: ``[..., L, H, d, d_h]`` per head, ``[..., L, d, H_kv d_h]`` per layer.

        Per layer, the query heads sharing a key head are summed first:
        ``sum_h W_q^h W_k^{g(h)T} = sum_g (sum_{h in g} W_q^h) W_k^{gT}``, so the factors have the true rank;
        explicit per-layer factors (``layer_q``, ``layer_k``) are returned as they are.
        """
        _check_per(per)
        if per == "head":
            return self.q, self.k
        if self.layer_q is not None:
            return self.layer_q, self.layer_k
        q, k = self.q, self.k
        if self.n_kv_heads != self.n_heads:  # sum each group's query heads (in float64)
            groups = rearrange(q.double(), "... (g r) d dh -> ... g r d dh", g=self.n_kv_heads)
            q = groups.sum(-3)  # (..., H_kv, d, d_h)
            k = k[..., :: self.n_heads // self.n_kv_heads, :, :]  # one copy of each repeated key head
        return rearrange(q, "... g d dh -> ... d (g dh)"), rearrange(k, "... g d dh -> ... d (g dh)")

    def matrices(self, per: Per = "head") -> torch.Tensor:
        """Materialise the ``d x d`` forms (float64): ``[..., L, H, d, d]`` or ``[..., L, d, d]``. Only when asked."""
        a, b = self.factors(per)
        return a.double() @ b.double().transpose(-2, -1)

    def svd(self, per: Per = "head") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(U, S, V)`` with ``M = U diag(S) V^T``, from the factors' QR, never the ``d x d`` product (float64).

        ``A = Q_A R_A``, ``B = Q_B R_B``, so ``M = Q_A (R_A R_B^T) Q_B^T`` and the SVD of the small ``R_A R_B^T``
        (``m x m``, ``m = min(d, r)``) gives ``U = Q_A U'``, ``V = Q_B V'``: ``[..., d, m]``, ``S [..., m]`` descending.
        """
        a, b = (x.double() for x in self.factors(per))
        (q_a, r_a), (q_b, r_b) = torch.linalg.qr(a), torch.linalg.qr(b)
        u, s, vh = torch.linalg.svd(r_a @ r_b.transpose(-2, -1))
        return q_a @ u, s, q_b @ vh.transpose(-2, -1)

    def token_norms(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Key-side ``||M x||`` and query-side ``||x^T M||`` of token inputs ``x [..., L, B, d]``, averaged over ``B``.

        docs/theory.md section 3: a token used as context grows ``M x_t``, a token that is predicted grows
        ``x_t^T M``; unlike directionality this does not depend on the basis. Returns ``key_head``,
        ``query_head`` ``[..., L, H]`` and ``key_layer``, ``query_layer`` ``[..., L]``, computed from the factors:
        ``M x = A (B^T x)``, ``x^T M = (x^T A) B^T``. ``x``'s leading axes are those of the forms.
        """
        a, b, x = self.q.double(), self.k.double(), torch.as_tensor(x).double().to(self.q.device)
        if x.ndim != self.q.ndim - 1 or x.shape[:-2] != self.leading_shape or x.shape[-1] != self.d_model:
            raise ValueError(
                f"token inputs must be [{', '.join(map(str, self.leading_shape))}, B, d={self.d_model}] "
                f"(the forms' leading axes, tokens, d); got {tuple(x.shape)}"
            )
        # two contractions each, through the d_h-sized middle: torch.einsum (without opt_einsum) would
        # otherwise contract A with B first and build every d x d form
        key = torch.einsum("...hde,...bhe->...bhd", a, torch.einsum("...hfe,...bf->...bhe", b, x))  # A (B^T x)
        query = torch.einsum("...bhe,...hfe->...bhf", torch.einsum("...bd,...hde->...bhe", x, a), b)  # (x^T A) B^T
        return {
            "key_head": key.norm(dim=-1).mean(-2),
            "query_head": query.norm(dim=-1).mean(-2),
            "key_layer": key.sum(-2).norm(dim=-1).mean(-1),
            "query_layer": query.sum(-2).norm(dim=-1).mean(-1),
        }

    def scores(self, per: Per = "head", outlier_k: float = DEFAULT_K, precision: Precision = "float64") -> Scores:
        """Symmetry and directionality per head ``[..., L, H]`` or per layer ``[..., L]``, without building ``d x d``.

        ``outlier_k``: a row or column norm is an outlier above ``mean + outlier_k std`` (:mod:`wqk.theory.scores`'s
        ``k``). ``precision="float32"``: products in float32, reductions in float64 (:mod:`wqk.theory.scores`)."""
        return factored_scores(*self.factors(per), k=outlier_k, precision=precision)


def _one_for_all(x: torch.Tensor) -> torch.Tensor:
    """A dense factor shared by the heads (:func:`_shared_by_heads`) without its head axis: ``[..., d, d]``."""
    return x if x.ndim < 3 else x.squeeze(-3)


def _shared_by_heads(x: torch.Tensor) -> bool:
    """Whether a dense factor ``[..., d, d]`` is one matrix for every head (no head axis, or one of length 1)."""
    return x.ndim < 3 or x.shape[-3] == 1


def _broadcasts(scale: torch.Tensor, leading: torch.Size, d: int) -> bool:
    """Whether a row scale ``[..., d]`` broadcasts against forms with the leading axes ``leading``."""
    if scale.ndim < 1 or scale.shape[-1] != d:
        return False
    try:
        return torch.broadcast_shapes(scale.shape[:-1], leading) == leading
    except RuntimeError:
        return False
