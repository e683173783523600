"""cli.py asks torch's allocator for huge pages before torch is imported, and a user's own setting stands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = "import os, sys, cli; print(os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)"


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("0", "0"), ("1", "1")])
def test_cli_sets_the_variable_before_torch_is_imported(given, seen):
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if given is not None:
        env["THP_MEM_ALLOC_ENABLE"] = given
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [seen, "False"]
