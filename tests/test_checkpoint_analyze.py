"""`cli.py analyze`: the table, the paper's summary, the CSV, the plot and the dry run."""

from __future__ import annotations

import csv
import sys

import pytest
import torch
from checkpoint_builders import NULL_SAMPLES, SMALL, H, L
from typer.testing import CliRunner

from wqk.checkpoints.analyze import (
    ANALYZE_COLUMNS,
    _converted,
    _page_in,
    analyze,
    default_null_samples,
    describe,
    null_shapes,
    summarize,
)
from wqk.cli import app

transformers = pytest.importorskip("transformers")
runner = CliRunner()


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-bert")
    transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=50, **SMALL)).save_pretrained(path)
    return path


def _run(*args):
    return runner.invoke(app, ["analyze", *map(str, args), "--null-samples", str(NULL_SAMPLES)])


def test_csv_has_the_scores_columns_plus_model_and_family(bert_dir, tmp_path):
    out = tmp_path / "scores.csv"
    result = _run(bert_dir, "--csv", out)
    assert result.exit_code == 0, result.output
    assert "summary" in result.output and "median" in result.output
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ANALYZE_COLUMNS
    assert [(r["layer"], r["head"]) for r in rows] == [(str(l), str(h)) for l in range(L) for h in [*range(H), "all"]]
    assert {(r["model"], r["family"], r["stack"]) for r in rows} == {(bert_dir.name, "encoder", "self")}


@pytest.mark.parametrize("per, heads", [("layer", {"all"}), ("head", {str(h) for h in range(H)})])
def test_per_selects_the_rows(per, heads, bert_dir, tmp_path):
    out = tmp_path / "scores.csv"
    assert _run(bert_dir, "--per", per, "--csv", out).exit_code == 0
    with open(out) as f:
        assert {r["head"] for r in csv.DictReader(f)} == heads


def test_describe_lists_what_is_scored_and_skipped_without_scoring(bert_dir, tmp_path):
    out = tmp_path / "never.csv"
    result = _run(bert_dir, "--describe", "--csv", out)
    assert result.exit_code == 0, result.output
    assert f"{L} layers x {H} heads" in result.output
    assert "bert.encoder.layer.*.attention.self.value.weight" in result.output
    assert "value or output projection" in result.output and "bias" in result.output
    assert "summary" not in result.output and not out.exists()


def test_plot_writes_an_image(bert_dir, tmp_path):
    out = tmp_path / "scores.png"
    result = _run(bert_dir, "--plot", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_inputs_exit_with_a_message(tmp_path):
    result = _run(tmp_path / "missing.safetensors")
    assert result.exit_code == 2 and "no such file" in result.output
    result = _run(tmp_path / "x", "--per", "token")
    assert result.exit_code == 2 and "--per" in result.output


def test_summary_is_median_and_iqr_over_layer_rows_only():
    layer = [
        {"layer": i, "head": "all", "symmetry": s, "directionality": -s, "symmetry_z": z, "directionality_z": -z}
        for i, (s, z) in enumerate([(0.1, 1.0), (0.5, 3.0), (0.3, 2.0)])
    ]
    heads = [
        {"layer": 0, "head": 0, "symmetry": 0.9, "directionality": 0.9, "symmetry_z": 9.0, "directionality_z": 9.0}
    ]
    sym, dirn = summarize(heads + layer)
    assert (sym["median"], sym["q25"], sym["q75"], sym["median_z"]) == pytest.approx((0.3, 0.2, 0.4, 2.0))
    assert (dirn["median"], dirn["q25"], dirn["q75"]) == pytest.approx((-0.3, -0.4, -0.2))
    assert sym["over"].startswith("3 layers")
    assert summarize(heads)[0]["over"].startswith("1 heads")


def test_analysis_rows_carry_model_and_family(bert_dir):
    result = analyze(bert_dir, per="layer", null_samples=NULL_SAMPLES)
    assert [r["layer"] for r in result.rows] == list(range(L))
    assert all(r["model"] == bert_dir.name and r["family"] == "encoder" for r in result.rows)
    assert result.summary[0]["score"] == "symmetry"


def test_default_null_samples_shrink_only_for_costly_forms():
    assert default_null_samples(768, 64) == default_null_samples(1024, 1024) == 256  # BERT heads and layers
    assert default_null_samples(4096, 128) == 256  # 7B heads
    assert default_null_samples(4096, 4096) == 32  # 7B layers: a few minutes once, then cached
    assert default_null_samples(8192, 8192) == 32  # never below the floor
    widths = [512, 1024, 2048, 3072, 4096, 5120]
    counts = [default_null_samples(d, d) for d in widths]
    assert counts == sorted(counts, reverse=True)


def test_per_layer_null_of_grouped_query_attention_has_rank_h_kv_d_h(tmp_path):
    config = transformers.LlamaConfig(vocab_size=50, num_key_value_heads=2, **SMALL)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    _, plan = describe(tmp_path)
    assert [(p, r) for p, _, r, _ in null_shapes(plan, "both")] == [("head", plan.d_head), ("layer", 2 * plan.d_head)]


def test_7b_benchmark_script_runs_at_a_tiny_size(tmp_path, monkeypatch, capsys):
    """benchmarks/analyze.py end to end on a small sharded checkpoint (the 7B shapes are its default)."""
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "analyze.py"
    monkeypatch.setattr("sys.argv", [str(script), "--d", "32", "--layers", "3", "--heads", "4", "--dir", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "2 shards" in out and "cold" in out and "warm" in out and "reference" in out, out
    assert not list(tmp_path.iterdir()), "the temporary checkpoint must be removed"


@pytest.mark.parametrize("source", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("target", [torch.float32, torch.float64], ids=str)
def test_reader_conversion_is_exact_and_keeps_the_memory_order(source, target):
    """The cast of a layer read from disk: same values as torch's cast, same strides."""
    x = torch.randn(2, 24, 40).to(source).transpose(1, 2)  # a weight viewed as [H, d, d_h]: not contiguous
    y = _converted(x, target)
    assert y.dtype == target and y.stride() == x.stride() and torch.equal(y, x.to(target))


VIEWS = {
    "transposed": lambda t: t.transpose(1, 2),  # [H, d, d_h] over a weight [H, d_h, d]
    "strided-block": lambda t: t[:, 3:17, ::2],  # e.g. q of a fused qkv: not dense
    "flat": lambda t: t.reshape(-1),
    "size-1": lambda t: t.permute(2, 0, 1)[:, :1],
    "empty": lambda t: t[:, :0],
    "scalar": lambda t: t[0, 0, 0],
}


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_reader_conversion_of_any_view(view):
    """Whatever the view's shape and strides: the same values as torch's cast, the order kept where it is dense."""
    x = view(torch.randn(3, 24, 40).half())
    y = _converted(x, torch.float32)
    assert y.shape == x.shape and torch.equal(y, x.float())
    if x.untyped_storage().nbytes() == x.numel() * x.element_size():  # x covers its storage: its order is kept
        assert y.stride() == x.stride()


def _mapped_bytes(address: int) -> int:
    """Bytes of the mapping holding ``address`` that this process has in its page tables (Rss in /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        lines = smaps.readlines()
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(v, 16) for v in head.split("-"))
            inside = start <= address < end
        elif inside and head == "Rss:":
            return int(line.split()[1]) * 1024
    raise LookupError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the mapping's Rss in /proc/self/smaps")
@pytest.mark.parametrize("view", ["whole", "transposed", "tail"])
def test_the_reader_brings_a_memory_mapped_tensor_into_memory(tmp_path, view):
    """After _page_in every page the tensor spans is mapped in this process (none before), and nothing changed."""
    rows, row = 4096, 1024  # 16 MiB, 4096 pages
    values = torch.arange(rows * row, dtype=torch.float32).view(rows, row)
    path = tmp_path / "weights.bin"
    path.write_bytes(values.numpy().tobytes())
    mapped = torch.from_file(str(path), shared=True, size=rows * row, dtype=torch.float32).view(rows, row)
    x = {"whole": mapped, "transposed": mapped.T, "tail": mapped[rows // 2 :]}[view]
    spanned = x.numel() * x.element_size()
    before = _mapped_bytes(mapped.data_ptr())
    _page_in(x)
    after = _mapped_bytes(mapped.data_ptr())
    assert before < spanned // 2 and after >= spanned, (before, after, spanned)
    assert torch.equal(mapped, values)
