"""The simulator's input coordinates: their labels, the basis of the first layer's inputs, the entries the loss sees.

The first layer's input at position ``i`` is ``x_i = V^T (c_i, e_i)``: coefficients ``c_i`` on the table rows
(data tokens, then BOS / MASK / CLS; or channels) and the position indicator ``e_i``, with the basis
``V = [table; pos]`` (:class:`wqk.sim.model.TableInputs`). The form in these coordinates is ``K = V M V^T``
(``K = M`` for the default one-hot tables, which fill every coordinate), and its blocks carry the labels
``token`` / ``special`` / ``position`` (``channel`` / ``position`` for continuous inputs): what
:mod:`wqk.theory.blocks` scores. An entry ``K_ab`` can reach the loss only if some loss-carrying query has
``a`` in its input and some key it attends to has ``b``: ``evaluated = O_q P O_k^T > 0`` with the occupancies
``O_q``, ``O_k`` (which coordinate can be non-zero at which position, in a loss-carrying query and in a key: a
masked query holds [MASK]) and the possible pairs ``P`` (query ``i`` carries loss, key ``j`` in its context).
With several layers every query's output feeds the next layer, so there any input is a query and ``P`` is the
context alone; blocks are scored for layer 0, whose inputs are in these coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wqk.sim.model import N_SPECIAL


@dataclass(frozen=True)
class InputCoordinates:
    labels: tuple[str, ...]  # one per coordinate, D in all
    basis: torch.Tensor  # (S, D, d) float64: row a is the input direction of coordinate a
    evaluated: torch.Tensor  # (D, D) bool
    positions: torch.Tensor  # (N_used,) long: the coordinates of the positions that hold data, in order
    sequence: torch.Tensor  # (N_used,) long: those positions' indices in the sequence

    def of(self, m: torch.Tensor) -> torch.Tensor:
        """Forms ``M [S, ..., d, d]`` in these coordinates: ``V M V^T`` ``[S, ..., D, D]``."""
        v = self.basis.reshape(self.basis.shape[0], *([1] * (m.ndim - 3)), *self.basis.shape[1:])
        return v @ m @ v.transpose(-2, -1)


def input_coordinates(sim) -> InputCoordinates:
    """Labels, basis, evaluated entries and data-position coordinates of a :class:`wqk.sim.train.Simulation`."""
    model, task, cfg = sim.model, sim.task, sim.cfg
    queries, keys, loss = task.support()  # (R, N), (R, N), (N,)
    if cfg.model.layers > 1:  # every query's output feeds the next layer
        queries, loss = queries | keys, torch.ones_like(loss)
    rows = keys.shape[0]
    labels = ["token"] * model.vocab + ["special"] * N_SPECIAL if model.vocab is not None else ["channel"] * rows
    basis = model.table.detach().double()
    n = cfg.n
    if cfg.model.positions != "none":
        labels += ["position"] * n
        basis = torch.cat([basis, model.pos.detach().double()[:, :n]], 1)
        queries, keys = (torch.cat([o, torch.eye(n, dtype=torch.bool)]) for o in (queries, keys))
    pairs = loss[:, None] & task.context  # (N, N): query i carries loss, key j in its context
    evaluated = (queries.double() @ pairs.double() @ keys.double().T) > 0
    first = 0 if model.vocab is None or keys[: model.vocab, 0].any() else 1  # BOS / CLS at position 0
    sequence = torch.arange(first, n) if cfg.model.positions != "none" else torch.zeros(0, dtype=torch.long)
    return InputCoordinates(tuple(labels), basis, evaluated, rows + sequence, sequence)
