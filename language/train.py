"""Train one language model (masked language modelling or next-token prediction) from one init, and record its
held-out loss over training and its ``W_qk`` scores per layer at the end.

Inits (:data:`INITS`): ``default`` (N(0, 0.02), BERT's and GPT-2's), ``paper-symmetric`` (the paper's arm:
``W_k`` drawn again at torch's ``nn.Linear`` default scale, uniform in +-1/sqrt(d), about 2.6x the baseline's
std at d = 128, and ``W_q`` a copy of it: symmetric, with the scale confound) and ``symmetric`` (``W_q = c W_k``
at the baseline's std exactly, :func:`wqk.vision.init.symmetric`). Two arms take the scale confound apart, each at
the paper-symmetric arm's per-parameter scale (:func:`paper_std`; it changes only ``W_q`` and ``W_k``):
``default-at-paper-scale`` (the default's own independent ``W_q`` and ``W_k``, both multiplied by one factor: not
symmetric, ``W_qk`` a positive multiple of the default's) and ``indefinite-at-paper-scale`` (the paper's ``W_k``
with ``W_q^h = W_k^h S_h``, balanced random signs per head: symmetric, ``s = 1``, but indefinite, as
:func:`wqk.vision.init.symmetric_indefinite`). Every arm of a seed sees the same batches, masks and evaluation draws.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from wqk.language.model import INIT_STD, TextConfig, TextTransformer
from wqk.language.tasks import LANGUAGE_TASKS
from wqk.language.tokens import MASK, SPECIALS
from wqk.theory.objectives import objective_class
from wqk.theory.report import score_rows
from wqk.vision.init import apply_init, attention_modules, thirds
from wqk.vision.models.attention import attention_forms
from wqk.vision.optimization import update

_MODEL, _INIT, _DATA, _EVAL = range(4)


def paper_symmetric(model: torch.nn.Module, generator: torch.Generator) -> None:
    """``W_k`` redrawn uniform in +-1/sqrt(d) (torch's ``nn.Linear`` default), ``W_q := W_k``; biases untouched."""
    with torch.no_grad():
        for _, attn in attention_modules(model):
            t = thirds(attn)
            bound = 1 / math.sqrt(t.k.shape[1])
            t.k.copy_(torch.rand(t.k.shape, generator=generator, dtype=torch.float64).mul(2 * bound).sub(bound))
            t.q.copy_(t.k)


def paper_std(d: int) -> float:
    """The standard deviation of the paper's key draw, uniform in +-1/sqrt(d): ``1 / sqrt(3 d)``."""
    return 1 / math.sqrt(3 * d)


def default_at_paper_scale(model: torch.nn.Module, generator: torch.Generator) -> None:
    """The default's own ``W_q`` and ``W_k`` (independent draws of std :data:`INIT_STD`), each multiplied by
    ``paper_std(d) / INIT_STD``: the paper-symmetric arm's per-parameter scale without its symmetry."""
    with torch.no_grad():
        for _, attn in attention_modules(model):
            t = thirds(attn)
            factor = paper_std(t.k.shape[1]) / INIT_STD
            t.q.mul_(factor)
            t.k.mul_(factor)


def indefinite_at_paper_scale(model: torch.nn.Module, generator: torch.Generator) -> None:
    """The paper-symmetric arm's draw (the same ``W_k`` for the same generator), then ``W_q^h := W_k^h S_h`` with
    balanced random signs ``S_h`` per head (:func:`wqk.vision.init.symmetric_indefinite`, whose factor is 1 up to
    rounding here): symmetric and indefinite at the paper's scale."""
    paper_symmetric(model, generator)
    apply_init(model, "symmetric-indefinite", generator)


INITS = {
    "default": lambda model, generator: None,
    "paper-symmetric": paper_symmetric,
    "symmetric": lambda model, generator: apply_init(model, "symmetric", generator),
    "default-at-paper-scale": default_at_paper_scale,
    "indefinite-at-paper-scale": indefinite_at_paper_scale,
}


@dataclass(frozen=True)
class LMConfig:
    objective: str = "mlm"
    init: str = "default"
    seed: int = 0
    steps: int = 800
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.01
    log_every: int = 40
    eval_windows: int = 256
    mask_rate: float = 0.15
    dim: int = 128
    depth: int = 4
    heads: int = 4
    length: int = 64
    null_samples: int = 256

    def __post_init__(self) -> None:
        if self.objective not in LANGUAGE_TASKS:
            raise ValueError(f"objective must be one of {tuple(LANGUAGE_TASKS)}, got {self.objective!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {list(INITS)}, got {self.init!r}")
        if self.steps < 1 or self.log_every < 1 or not 0 < self.mask_rate < 1:
            raise ValueError(
                f"need steps, log_every >= 1 and 0 < mask_rate < 1; got {self.steps}, "
                f"{self.log_every}, {self.mask_rate}"
            )


def _generator(seed: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1000 + stream)


def windows(stream: np.ndarray, starts: torch.Tensor, length: int) -> torch.Tensor:
    """``(B, length)`` windows of the token stream starting at ``starts``."""
    ids = torch.as_tensor(stream)
    return ids[starts[:, None] + torch.arange(length)[None, :]]


def mask_tokens(ids: torch.Tensor, rate: float, vocab: int, generator: torch.Generator):
    """BERT's corruption: each position chosen with probability ``rate``; of those 80% become ``[MASK]``, 10% a
    random word, 10% stay. Returns ``(inputs, chosen)``."""
    draw = torch.rand(ids.shape, generator=generator)
    kind = torch.rand(ids.shape, generator=generator)
    random_words = torch.randint(len(SPECIALS), vocab, ids.shape, generator=generator)
    chosen = draw < rate
    inputs = torch.where(chosen & (kind < 0.8), torch.full_like(ids, MASK), ids)
    inputs = torch.where(chosen & (kind >= 0.8) & (kind < 0.9), random_words, inputs)
    return inputs, chosen


def is_causal(cfg: LMConfig) -> bool:
    """Whether the objective attends causally: its registered objective's own mask is not swap-symmetric."""
    return objective_class(LANGUAGE_TASKS[cfg.objective].objective).own_mask != "symmetric"


def loss_of(model: TextTransformer, ids: torch.Tensor, cfg: LMConfig, generator: torch.Generator) -> torch.Tensor:
    """Mean cross-entropy of the masked tokens (``mlm``) or of every next token (``causal``)."""
    if is_causal(cfg):
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    inputs, chosen = mask_tokens(ids, cfg.mask_rate, model.config.vocab, generator)
    return F.cross_entropy(model(inputs, chosen), ids[chosen])


def build(cfg: LMConfig, vocab: int) -> TextTransformer:
    """The model of ``cfg`` with its seed's weights and its arm's init."""
    text = TextConfig(vocab, cfg.dim, cfg.depth, cfg.heads, cfg.length, causal=is_causal(cfg))
    model = TextTransformer(text, _generator(cfg.seed, _MODEL))
    INITS[cfg.init](model, _generator(cfg.seed, _INIT))
    return model


@torch.no_grad()
def evaluate(model: TextTransformer, test: np.ndarray, cfg: LMConfig) -> float:
    """Held-out loss on fixed windows with fixed masks (the same for every arm, seed and step)."""
    model.eval()
    starts = torch.linspace(0, len(test) - cfg.length - 1, cfg.eval_windows).long()
    generator = _generator(0, _EVAL)
    total, count = 0.0, 0
    for chunk in starts.split(cfg.batch_size):
        total += float(loss_of(model, windows(test, chunk, cfg.length), cfg, generator)) * len(chunk)
        count += len(chunk)
    model.train()
    return total / count


def train_lm(cfg: LMConfig, train: np.ndarray, test: np.ndarray, vocab: int) -> dict:
    """Train one model; returns ``{"curve": rows (step, train_loss, test_loss), "scores": per-layer W_qk rows,
    "config": cfg}``."""
    if min(len(train), len(test)) <= cfg.length + 1:
        raise ValueError(f"need more than {cfg.length + 1} tokens in train and test; got {len(train)}, {len(test)}")
    model = build(cfg, vocab)
    decay = [p for n, p in model.named_parameters() if p.ndim == 2 and "positions" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and "positions" not in n)]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr)
    schedule = lambda step: min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
    data, draws = _generator(cfg.seed, _DATA), _generator(cfg.seed, _DATA + 100)
    curve, running = [{"step": 0, "train_loss": math.nan, "test_loss": evaluate(model, test, cfg)}], []
    for step in range(1, cfg.steps + 1):
        starts = torch.randint(0, len(train) - cfg.length - 1, (cfg.batch_size,), generator=data)
        loss = loss_of(model, windows(train, starts, cfg.length), cfg, draws)
        update(optimizer, loss, cfg.lr * schedule(step - 1), grad_clip=1.0, params=list(model.parameters()))
        running.append(loss.item())
        if step % cfg.log_every == 0 or step == cfg.steps:
            curve.append({"step": step, "train_loss": float(np.mean(running)), "test_loss": evaluate(model, test, cfg)})
            running = []
    scores = score_rows(attention_forms(model), "layer", null_samples=cfg.null_samples)
    return {"curve": curve, "scores": scores, "config": asdict(cfg)}
