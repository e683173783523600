"""cli.py asks torch's allocator for huge pages when a command runs, before torch is imported (never at import),
and a user's own setting stands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import contextlib, io, os, sys
from wqk import cli
at_import = os.environ.get('THP_MEM_ALLOC_ENABLE')
with contextlib.redirect_stdout(io.StringIO()):
    cli.app(['null', '--help'], standalone_mode=False)
print(at_import, os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("0", "0"), ("1", "1")])
def test_cli_sets_the_variable_before_torch_is_imported(given, seen):
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if given is not None:
        env["THP_MEM_ALLOC_ENABLE"] = given
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [given or "None", seen, "False"]


# a 4 MiB tensor held while glibc's count of separately mapped blocks (mallinfo2().hblks) is read
MAPPED = """
import ctypes, sys
import wqk.common.hugepages as hp
if sys.argv[1] == "kept":
    assert hp.keep_freed_blocks()
import torch

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
before = mallinfo2().hblks
x = torch.ones(1 << 20)
print(mallinfo2().hblks - before)
"""


def _mapped_blocks(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", MAPPED, mode], cwd=ROOT, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_freed_blocks_are_kept_in_the_heap_instead_of_mapped_one_by_one():
    try:
        import ctypes

        ctypes.CDLL(None).mallinfo2  # noqa: B018 (glibc >= 2.33)
    except AttributeError:
        pytest.skip("no glibc mallinfo2 here")
    assert _mapped_blocks("default") == 1  # glibc maps a 4 MiB block on its own by default
    assert _mapped_blocks("kept") == 0  # served from the heap once keep_freed_blocks() has run
