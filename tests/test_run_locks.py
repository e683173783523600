"""Run locks (``Context.locked``): units that share a run train it in turn, units of other runs at once."""

from __future__ import annotations

import threading

from wqk.paper.experiment import Context


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
