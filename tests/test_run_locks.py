"""Run locks (``Context.locked``): units that share a run train it in turn, units of other runs at once."""

from __future__ import annotations

import threading
import time

import wqk.language.corpus
from wqk.paper.experiment import Context
from wqk.paper.runners.language import corpus


def _holder(ctx: Context, names: list[str], acquired: threading.Event) -> threading.Thread:
    def hold() -> None:
        with ctx.locked(ctx.work, names):
            acquired.set()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_units_of_other_runs_hold_their_locks_at_once(tmp_path):
    ctx = Context(tmp_path)
    acquired = threading.Event()
    with ctx.locked(tmp_path, ["default-seed100"]):
        thread = _holder(ctx, ["default-seed101"], acquired)
        assert acquired.wait(10)
    thread.join(10)


def test_a_shared_run_is_held_in_turn(tmp_path):
    ctx = Context(tmp_path)
    acquired = threading.Event()
    with ctx.locked(tmp_path, ["default-seed100"]):
        # a holder of an overlapping set (a several-seed config beside a one-seed unit) waits for the shared run
        thread = _holder(ctx, ["default-seed101", "default-seed100"], acquired)
        assert not acquired.wait(0.5)
    assert acquired.wait(10)
    thread.join(10)


def test_the_whole_directory_lock_is_one_name(tmp_path):
    ctx = Context(tmp_path)
    acquired = threading.Event()
    with ctx.locked(tmp_path):
        thread = _holder(ctx, [""], acquired)
        assert not acquired.wait(0.5)
    assert acquired.wait(10)
    thread.join(10)


def test_units_that_need_one_corpus_at_once_tokenise_it_once(tmp_path, monkeypatch):
    """Two units of the language control starting together on a fresh machine: one reads and tokenises the corpus,
    the other waits for it and reads the same arrays (both writing the same temporary files made one fail)."""
    reads = []

    def slow_corpus(sources, test_fraction):
        reads.append(sources)
        time.sleep(0.3)  # the other unit starts while this one is still reading
        return ["the cat sat on the mat"] * 8, ["the dog sat on the cat"] * 2

    monkeypatch.setattr(wqk.language.corpus, "load_corpus", slow_corpus)
    config = {"sources": ["fake"], "vocab_size": 16, "test_fraction": 0.2}
    out, errors = {}, []

    def unit(k: int) -> None:
        try:
            out[k] = corpus(config, Context(tmp_path))
        except Exception as err:  # the test reports what a unit raised
            errors.append(err)

    threads = [threading.Thread(target=unit, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(reads) == 1
    (train0, test0, vocab0), (train1, test1, vocab1) = out[0], out[1]
    assert vocab0 == vocab1 and (train0 == train1).all() and (test0 == test1).all()
