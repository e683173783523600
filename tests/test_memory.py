"""common.memory: glibc takes the settings (this project's machines run Linux with glibc), once."""

import sys

import pytest
import torch

from common.memory import reuse_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_glibc_keeps_freed_blocks_and_results_are_unchanged():
    before = torch.randn(2048, 2048, generator=torch.Generator().manual_seed(0)).square().sum()
    assert reuse_freed_memory() is True
    assert reuse_freed_memory() is True  # cached: a second call changes nothing
    after = torch.randn(2048, 2048, generator=torch.Generator().manual_seed(0)).square().sum()
    assert torch.equal(before, after)
