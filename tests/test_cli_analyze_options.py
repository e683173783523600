"""``analyze``'s library options reach :func:`checkpoints.analyze.analyze` by name, and only when given."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import checkpoints.analyze as ana
from cli import app
from wqk.cli.scoring import LIBRARY_KEYWORDS

transformers = pytest.importorskip("transformers")


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """The keywords each call of ``checkpoints.analyze.analyze`` got (it then runs without them)."""
    seen = []
    run = ana.analyze

    def spy(*args, **kwargs):
        seen.append({k: kwargs.pop(k) for k in LIBRARY_KEYWORDS if k in kwargs})
        return run(*args, **kwargs)

    monkeypatch.setattr(ana, "analyze", spy)
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "nulls"))
    return seen


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24
    )
    transformers.BertModel(config).save_pretrained(path)
    return path


@pytest.mark.parametrize(
    ("args", "passed"),
    [
        ([], {}),
        (["--null", "iid"], {}),
        (["--null", "spectrum"], {"null": "spectrum"}),
        (["--fold-ln"], {"fold_ln": True}),
        (["--fold-qk-norm", "--fold-ln"], {"fold_ln": True, "fold_qk_norm": True}),
    ],
)
def test_options_are_passed_through_only_when_given(args, passed, bert, calls):
    result = CliRunner().invoke(app, ["analyze", str(bert), "--null-samples", "16", *args])
    assert result.exit_code == 0, result.output
    assert calls == [passed]


def test_an_unknown_null_is_one_line(bert):
    result = CliRunner().invoke(app, ["analyze", str(bert), "--null", "uniform"])
    assert result.exit_code == 2 and "--null must be iid or spectrum" in result.stderr
