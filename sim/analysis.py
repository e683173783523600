"""End-of-run measurements that need the model itself, not only its forms: attention mass and key dominance.

- :func:`attention_to`: the mean attention weight that layer-0 queries put on one position (position 0 holds BOS
  or CLS; position 1 the topic token of a topic document), over fresh batches drawn from a stream of their own.
- :func:`bos_dominance`: ``||M x_BOS||`` over the mean ``||M x||`` of the data inputs (docs/theory.md claim 7).
"""

from __future__ import annotations

import math

import torch

from wqk.common.seeding import generator
from wqk.sim.tasks import stack

ANALYSIS_STREAM = 3  # after INIT, DATA, COMPARE (wqk.sim.train): never shifts a training draw


@torch.no_grad()
def attention_to(sim, position: int, n_batches: int = 4) -> list[float]:
    """Per seed: layer 0's softmax weight on key ``position``, averaged over heads, sequences and the queries
    after it that may attend to it (NaN for linear attention or a position no later query sees)."""
    if sim.cfg.model.attention != "softmax" or position >= sim.cfg.n - 1:
        return [math.nan] * sim.cfg.seeds
    gens = [generator(s, ANALYSIS_STREAM) for s in sim.cfg.seed_list]
    total, count = torch.zeros(sim.cfg.seeds, dtype=torch.float64), torch.zeros(sim.cfg.seeds, dtype=torch.float64)
    for _ in range(n_batches):
        raw = stack([sim.task.draw(g, sim.cfg.batch) for g in gens])
        first, *_, context = sim.task.inputs(raw)
        model = sim.model
        inputs = model.embed_continuous(first) if sim.task.continuous else model.embed_tokens(first)
        ctx = context if context.ndim == 2 else context[:, None]  # (N, N) or (S, 1, B, N, N)
        logits = model.logits(inputs, 0)  # (S, H, B, N, N)
        weights = logits.masked_fill(~ctx, float("-inf")).softmax(-1).nan_to_num()
        seen = ctx[..., position + 1 :, position].expand((*weights.shape[:3], weights.shape[3] - position - 1))
        on = weights[..., position + 1 :, position]  # (S, H, B, queries after the position)
        total += (on * seen).sum((1, 2, 3)).double()
        count += seen.sum((1, 2, 3)).double()
    return (total / count.clamp_min(1)).tolist()


def dominance_inputs(sim) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(x_BOS [S, d], data inputs [S, V (N - 1), d])``: every data token at every position > 0 (None without BOS)."""
    vecs = sim.specials()
    if "bos" not in vecs:
        return None
    vocab = sim.task.vocab
    table, pos = sim.model.table[:, :vocab].double(), sim.model.pos[:, 1 : sim.cfg.n].double()
    return vecs["bos"].double(), (table[:, :, None] + pos[:, None]).flatten(1, 2)


def bos_dominance(sim) -> list[float]:
    """Per seed, at the end of training: ``||M x_BOS||`` over the mean ``||M x||`` of data inputs (every data token
    at every position > 0), for the per-layer form of layer 0. Above 1: the BOS input is a dominant key direction."""
    inputs = dominance_inputs(sim)
    if inputs is None:
        return [math.nan] * sim.cfg.seeds
    layer0 = sim.model.forms()[:, 0]  # [S, H, d, r]: the seeds' layer 0, the seed axis leading
    typical = layer0.token_norms(inputs[1])["key_layer"]  # mean ||M x|| over the data inputs
    bos = layer0.token_norms(inputs[0][:, None])["key_layer"]
    return (bos / typical).tolist()
