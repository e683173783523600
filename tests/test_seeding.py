"""Named random streams and the block-parallel Gaussian sampler (common/seeding.py)."""

from __future__ import annotations

import os
import select
import signal

import numpy as np
import pytest
import torch
from scipy import stats

from wqk.common import seeding
from wqk.common.seeding import gaussian, generator, stream_seed


def test_streams_are_distinct_and_reproducible():
    assert stream_seed(0, 1) == stream_seed(0, 1)
    assert len({stream_seed(s, t) for s in range(20) for t in range(20)}) == 400
    assert torch.equal(torch.rand(5, generator=generator(3, 1)), torch.rand(5, generator=generator(3, 1)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_draw_of_one_block_is_torch_randn(monkeypatch, dtype):
    monkeypatch.setattr(seeding, "GAUSSIAN_BLOCK", 64)
    got = gaussian((4, 16), torch.Generator().manual_seed(5), dtype)
    assert torch.equal(got, torch.randn(4, 16, generator=torch.Generator().manual_seed(5), dtype=dtype))


def test_blocks_do_not_depend_on_the_thread_count(monkeypatch):
    monkeypatch.setattr(seeding, "GAUSSIAN_BLOCK", 1000)
    shape = (3, 50, 47)  # 7050 entries: 7 full blocks and a partial one
    before = torch.get_num_threads()
    try:
        draws = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            draws.append(gaussian(shape, torch.Generator().manual_seed(9)))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(draws[0], d) for d in draws[1:])
    assert draws[0].shape == shape and draws[0].is_contiguous()
    again = gaussian(shape, torch.Generator().manual_seed(10))
    assert not torch.equal(draws[0], again)


def test_blocked_draws_are_standard_normal_and_independent(monkeypatch):
    monkeypatch.setattr(seeding, "GAUSSIAN_BLOCK", 4096)
    blocks = gaussian((64, 4096), torch.Generator().manual_seed(0), torch.float64).numpy()  # a block per row
    assert stats.kstest(blocks.ravel(), "norm").pvalue > 1e-3
    corr = np.corrcoef(blocks[:-1].ravel(), blocks[1:].ravel())[0, 1]
    assert abs(corr) < 4 / np.sqrt(blocks[1:].size)  # four standard errors of a zero correlation
    assert len({row.tobytes() for row in blocks}) == 64


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_with_its_own_threads(monkeypatch):
    monkeypatch.setattr(seeding, "GAUSSIAN_BLOCK", 1000)
    expected = gaussian((5000,), torch.Generator().manual_seed(1))  # the parent's pool now exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the same draw must finish and agree; it never returns into pytest
        try:
            ok = torch.equal(gaussian((5000,), torch.Generator().manual_seed(1)), expected)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)  # a pool that waits for the parent's threads never answers
    answer = os.read(read, 1) if ready else b""
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert answer == b"1", "the forked child's draw hung or differed"
