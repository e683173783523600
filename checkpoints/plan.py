"""A plan: what ``analyze`` will read and score (units, one attention of one block each), what it leaves
out and why; the dry run of ``cli.py analyze --describe``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from wqk.checkpoints.layout import Layout
from wqk.checkpoints.loading import HeadCounts

#: Order of the stacks in a plan (and in the rows).
STACK_ORDER = (
    "self",
    "encoder",
    "decoder",
    "cross",
    "vision",
    "image",
    "text",
    "image-text",
    "image-attn2",
    "joint",
    "window",
    "shifted-window",
    "windowed",
    "global",
    "reduced-keys",
)


@dataclass(frozen=True)
class Stack:
    """Blocks of one layout under one key prefix: ``found[(stage, block)]`` (or ``[(layer,)]``) is a first key."""

    layout: Layout
    prefix: str
    found: dict[tuple[int, ...], str] = field(default_factory=dict)

    @property
    def layers(self) -> dict[int, str]:
        """First key of each block, numbered through the stages in depth order."""
        return {i: self.found[index] for i, index in enumerate(sorted(self.found))}

    def position(self, layer: int) -> tuple[int, int]:
        """``(stage, block within the stage)`` of running layer ``layer``."""
        index = sorted(self.found)[layer]
        return (index[0], index[1]) if len(index) == 2 else (0, index[0])


@dataclass(frozen=True)
class Unit:
    """One attention of one block: the keys read, the layout that reads them, and the labels of its rows."""

    stack: str
    layer: int
    keys: tuple[str, ...]
    layout: Layout
    heads: HeadCounts
    d_model: int
    d_head: int
    cross: bool  # queries and keys act on different spaces: symmetry not defined
    layer_rank: int  # rank of the per-layer form's factors: H_kv d_h, or the layout's own (latent attention)
    keys_of: int | None = None  # the layer whose W_k the queries meet, where not this one's (keys shared across layers)

    def rank(self, per: str) -> int:
        """Rank of the per-head (``d_h``) or per-layer form, as :meth:`FactoredForms.rank` gives it."""
        return self.d_head if per == "head" else self.layer_rank


@dataclass(frozen=True)
class Plan:
    """What ``analyze`` will read and score, and what it leaves out and why."""

    model: str
    family: str
    model_type: str
    units: tuple[Unit, ...]
    prefix: str
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    skipped: tuple[tuple[str, int, str], ...]  # (key pattern with * for numbers, number of keys, reason)

    # The first unit's layout, heads and widths: those of the whole plan for a model with one stack.
    @property
    def layout(self) -> Layout:
        return self.units[0].layout

    @property
    def heads(self) -> HeadCounts:
        return self.units[0].heads

    @property
    def d_model(self) -> int:
        return self.units[0].d_model

    @property
    def d_head(self) -> int:
        return self.units[0].d_head

    @property
    def n_layers(self) -> int:
        """Number of attentions scored (the layers of a model with one stack)."""
        return len(self.units)

    @property
    def layer_keys(self) -> tuple[tuple[str, ...], ...]:
        return tuple(u.keys for u in self.units)

    @property
    def stacks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u.stack for u in self.units))

    def lines(self) -> list[str]:
        """What will be read and how, in a few lines for the dry run."""
        kind = f" ({self.model_type})" if self.model_type else ""
        layouts = list(dict.fromkeys(u.layout.name for u in self.units))
        out = [
            f"model {self.model}{kind}, family {self.family}, layout{'s' * (len(layouts) > 1)} {', '.join(layouts)}"
            + (f", prefix '{self.prefix}'" if self.prefix else "")
        ]
        groups: dict[tuple, list[Unit]] = {}
        for u in self.units:
            key = (u.stack, u.layout.name, u.heads, u.d_model, u.d_head, u.cross, u.layer_rank)
            groups.setdefault(key, []).append(u)
        several = len(self.stacks) > 1
        shapes_per_stack = Counter(key[0] for key in groups)
        for (stack, layout, h, d, dh, cross, rank), units in groups.items():
            kv = f", {h.n_kv_heads} key/value heads (grouped-query)" if h.n_kv_heads != h.n_heads else ""
            what = f"stack {stack} ({layout}): " if several else ""
            if shapes_per_stack[stack] > 1:  # the stack's layers differ in shape: say which these are
                numbers = [str(u.layer) for u in units]
                what += f"layers {', '.join(numbers[:8])}{', ...' if len(numbers) > 8 else ''}: "
            note = "; symmetry not defined (queries and keys on different spaces)" if cross else ""
            own = f", per-layer rank {rank}" if rank != h.n_kv_heads * dh else ""
            out.append(
                f"{what}{len(units)} layers x {h.n_heads} heads{kv}; d = {d}, d_h = {dh}{own} (heads from {h.source})"
                f"{note}"
            )
        first = self.units[0]
        out.append(
            f"reads per layer: {', '.join(k.replace(self.prefix, '', 1) for k in first.keys)} "
            f"(layer 0 of {first.stack}; {sum(len(u.keys) for u in self.units)} tensors in all)"
        )
        out += [
            f"layout {name}: {einops}" for name, einops in {u.layout.name: u.layout.einops for u in self.units}.items()
        ]
        return out


def describe_stack(stack: Stack) -> str:
    return f"'{stack.prefix}' ({stack.layout.name}, {len(stack.found)} layers)"


def stack_order(item: tuple[Stack, str]) -> tuple[int, str]:
    label = item[1]
    return (STACK_ORDER.index(label) if label in STACK_ORDER else len(STACK_ORDER), label)
