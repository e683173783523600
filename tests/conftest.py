"""Shared test settings: a private null cache per session and hypothesis profiles sized for 2 cores.

The default profile is derandomized, so every run (and CI) draws the same examples and a failure
reproduces; for the same reason every test starts from torch's global seed 0. ``pytest --hypothesis-profile
explore`` draws fresh random examples, ten times as many: run it after touching a property, since a fixed
sample cannot find new counterexamples.
"""

import pytest
import torch
from hypothesis import HealthCheck, settings

from wqk.vision.data import load_data

_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", max_examples=40, derandomize=True, **_common)
settings.register_profile("explore", max_examples=400, **_common)
settings.load_profile("default")


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Every test starts from the same global torch random state (the random init of the models tests build with
    their own library included), so a run, and CI, repeats a failure instead of drawing a new model each time."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _null_cache(tmp_path_factory):
    """Keep null draws made by tests out of the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WQK_CACHE_DIR", str(tmp_path_factory.mktemp("wqk-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared 2-core machine: one intra-op thread avoids spinning on busy cores
    (use with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's digits with the default split (read once per session)."""
    return load_data("digits")


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory):
    """A tiny BERT checkpoint on disk (3 layers of 2 heads, d = 16): the CLI's tables print a few rows of it."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("wide-bert")
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=24
    )
    transformers.BertForMaskedLM(config).save_pretrained(path)
    return path
