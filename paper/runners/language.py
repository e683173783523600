"""Runner over :mod:`wqk.language`: the paper's positive control, encoder (MLM) and decoder (next token) of the same
size on English docstring prose, several init arms (:data:`wqk.language.train.INITS`), several seeds.

The tokenised corpus is kept under ``WORK/language/<sources, vocabulary, split>/`` (reading the docstrings of a
large package takes tens of seconds) and read back as numpy arrays.
"""

from __future__ import annotations

from wqk.paper.experiment import Context, Tables
from wqk.paper.seeds import config_seeds


def corpus(config: dict, ctx: Context):
    """``(train ids, test ids, vocabulary size)`` of ``config``'s corpus, tokenised once per work directory."""
    import json

    import numpy as np

    from wqk.paper.experiment import config_hash

    spec = {k: config[k] for k in ("sources", "vocab_size", "test_fraction")}
    directory = ctx.scratch("language", config_hash(spec))
    paths = {name: directory / f"{name}.npy" for name in ("train", "test")}
    with ctx.locked(directory):  # units that need the same corpus at once: one tokenises it, the others wait for it
        if not all(p.is_file() for p in paths.values()):
            from wqk.common.io import write_json
            from wqk.language.corpus import load_corpus
            from wqk.language.tokens import Tokenizer

            ctx.note(f"reading docstrings of {', '.join(config['sources'])}")
            train, test = load_corpus(config["sources"], config["test_fraction"])
            tokenizer = Tokenizer.fit(train, config["vocab_size"])
            for name, texts in (("train", train), ("test", test)):
                np.save(directory / f".{name}.npy", tokenizer.encode(texts), allow_pickle=False)
            write_json(directory / "vocab.json", list(tokenizer.vocab))
            for name in paths:  # the arrays appear together or not at all
                (directory / f".{name}.npy").replace(paths[name])
    vocab = len(json.loads((directory / "vocab.json").read_text()))
    return (*(np.load(paths[n], allow_pickle=False) for n in ("train", "test")), vocab)


def language_runs(config: dict, ctx: Context) -> Tables:
    """Train every objective x arm x seed of ``config`` (a unit's ``seed_list``, default every seed of the config):
    held-out loss curves, per-layer ``W_qk`` scores at the end, and the corpus with its no-context (unigram) loss; with
    ``record_inits``, each run's init as ``inits`` (the query and key thirds' scale, ``s`` and self-similarity at
    step 0, :func:`wqk.vision.init.init_scales` and :func:`wqk.vision.init.init_structure`)."""
    import torch

    from wqk.language.tokens import unigram_loss
    from wqk.language.train import LMConfig, build, train_lm
    from wqk.vision.init import init_scales, init_structure

    if ctx.threads > 0:
        torch.set_num_threads(ctx.threads)
    train, test, vocab = corpus(config, ctx)
    curves, scores, inits = [], [], []
    for objective in config["objectives"]:
        for arm in config["arms"]:
            for seed in config_seeds(config):
                ctx.note(f"{objective} {arm} seed {seed}")
                cfg = LMConfig(objective=objective, init=arm, seed=seed, **config["train"])
                ids = {"objective": objective, "arm": arm, "seed": seed}
                if config.get("record_inits"):
                    model = build(cfg, vocab)  # the run's own step-0 model: its seed's draws, deterministic
                    inits.append({**ids, **init_scales(model), **init_structure(model)})
                run = train_lm(cfg, train, test, vocab)
                curves += [{**ids, **r} for r in run["curve"]]
                scores += [{**ids, **{k: v for k, v in r.items() if not k.endswith("_p")}} for r in run["scores"]]
    info = {
        "sources": config["sources"],
        "train_tokens": len(train),
        "test_tokens": len(test),
        "vocab": vocab,
        "unigram_loss": unigram_loss(train, test, vocab),  # the loss of a model that sees no context
    }
    return {"curves": curves, "scores": scores, "corpus": info, **({"inits": inits} if inits else {})}


def language_analysis(config: dict, units: dict[str, Tables]) -> Tables:
    """Every unit's runs together, with the steps to each target rule and the savings per rule
    (:mod:`wqk.language.control`; the verdicts' long-format summary is :func:`wqk.paper.derive.control_summary`)."""
    from wqk.language.control import step_rows, summary_rows
    from wqk.paper.experiment import concat_units

    tables = concat_units(config, units)
    steps = step_rows(tables["curves"])
    return {**tables, "steps": steps, "savings": summary_rows(steps, tables["curves"])}
