"""Every corrupt or unexpected input, through the real command line: a non-zero exit, one line on stderr that
names the problem (and what was expected), no traceback.

The table is a plain list of :class:`Case`; a new command adds its rows to ``CASES``. ``{name}`` in an
argument is replaced by the path of the bad file ``name`` that :func:`bad_files` builds (once per module).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from checkpoint_builders import D, H, TimmStack, write_gguf
from safetensors.torch import save_file
from typer.testing import CliRunner

from wqk.cli import SYMBOLIC_MAX_SIZE, app
from wqk.theory.symbolic import MAX_SIZE


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    expect: tuple[str, ...]  # substrings the error line must contain (case-insensitive)


def case(id: str, args: str, *expect: str) -> Case:
    return Case(id, tuple(args.split()), expect)


def _range(command: str, option: str, value: str, bound: str) -> Case:
    """An out-of-range value: click names the option and the bound it breaks."""
    return case(f"{command.replace(' ', '-')}{option}={value}", f"{command} {option} {value}", option, bound)


_CORRUPT = "cannot read"
CASES = [
    # ---- checkpoint files (analyze) ------------------------------------------------------------------------------
    case(
        "safetensors-header-length-past-end", "analyze {huge_header.safetensors}", _CORRUPT, "expected a .safetensors"
    ),
    case("safetensors-header-not-json", "analyze {bad_json_header.safetensors}", _CORRUPT, "expected a .safetensors"),
    case("safetensors-offsets-past-end", "analyze {offsets_past_end.safetensors}", _CORRUPT, "expected a .safetensors"),
    case("safetensors-truncated", "analyze {truncated.safetensors}", _CORRUPT, "expected a .safetensors"),
    case("safetensors-empty", "analyze {empty.safetensors}", _CORRUPT, "expected a .safetensors"),
    case("safetensors-random-bytes", "analyze {random.safetensors}", _CORRUPT, "expected a .safetensors"),
    case("pt-random-bytes", "analyze {random.pt}", _CORRUPT, "expected a state dict"),
    case("bin-random-bytes", "analyze {random.bin}", _CORRUPT, "expected a state dict"),
    case("pth-random-bytes", "analyze {random.pth}", _CORRUPT, "expected a state dict"),
    case("pt-truncated-zip", "analyze {truncated.pt}", _CORRUPT, "expected a state dict"),
    case("pt-bare-tensor", "analyze {tensor.pt}", "not a dict of tensors"),
    case("gguf-random-bytes", "analyze {random.gguf}", _CORRUPT, "GGUF magic", "version 2 or 3"),
    case("gguf-version-99", "analyze {version99.gguf}", _CORRUPT, "version 99", "version 2 or 3"),
    case("gguf-version-1", "analyze {version1.gguf}", _CORRUPT, "version 1", "version 2 or 3"),
    case("gguf-truncated", "analyze {truncated.gguf}", _CORRUPT, "version 2 or 3"),
    case("config-json-corrupt", "analyze {bad_config}", "config.json is not valid JSON", "JSON object"),
    case("config-json-a-list", "analyze {list_config}", "config.json holds a JSON list", "object"),
    case("config-json-binary", "analyze {binary_config}", "config.json is not text", "JSON object"),
    case("sidecar-json-corrupt", "analyze {sidecar/step_1.safetensors}", "step_1.json is not valid JSON"),
    case("shard-index-corrupt", "analyze {bad_index}", "index.json is not valid JSON", "weight_map"),
    case("shard-index-no-weight-map", "analyze {index_without_map}", "has no 'weight_map'", "shard index"),
    case("shard-index-map-a-list", "analyze {index_map_list}", "not a mapping", "weight_map"),
    case("shard-index-missing-shard", "analyze {index_missing_shard}", "names shards that are not there"),
    case("checkpoint-dir-without-weights", "analyze {empty_dir}", "holds no weights", ".safetensors"),
    case("checkpoint-unknown-extension", "analyze {random.txt}", "unsupported file type '.txt'", "expected"),
    case("checkpoint-missing", "analyze {missing}/model.safetensors", "no such file"),
    case("checkpoint-heads-do-not-divide", "analyze {timm.safetensors} --heads 5", "cannot be split into 5 heads"),
    case("checkpoint-prefix-not-found", "analyze {timm.safetensors} --prefix nope", "under the prefix 'nope.'"),
    case("checkpoint-unknown-layout", "analyze {unknown_layout.safetensors}", "unrecognised attention layout"),
    case("analyze-family-unknown", "analyze {timm.safetensors} --heads 4 --family selfie", "unknown family 'selfie'"),
    case("analyze-per-unknown", "analyze {timm.safetensors} --per token", "--per must be head, layer or both"),
    # ---- array files (scores) -----------------------------------------------------------------------------------
    case("scores-npy-random-bytes", "scores {random.npy}", _CORRUPT, "expected a NumPy .npy"),
    case("scores-npy-truncated", "scores {truncated.npy}", _CORRUPT, "expected a NumPy .npy"),
    case("scores-npy-pickled-object", "scores {object.npy}", _CORRUPT, "no pickled objects"),
    case("scores-npz-random-bytes", "scores {random.npz}", _CORRUPT, "expected a NumPy .npz"),
    case("scores-safetensors-random-bytes", "scores {random.safetensors}", _CORRUPT, "expected a .safetensors"),
    case("scores-npz-without-factors", "scores {no_factors.npz}", "must hold arrays 'q' and 'k'"),
    case("scores-unknown-extension", "scores {random.txt}", "unsupported file type '.txt'"),
    case("scores-missing", "scores {missing}/forms.npy", "no such file"),
    case("scores-a-directory", "scores {empty_dir}", "is a directory", "expected"),
    # ---- output paths: a file where a directory is expected, a directory where a file is -------------------------
    case("scores-csv-is-a-directory", "scores {forms.npy} --csv {empty_dir}", "--csv", "is a directory"),
    case("analyze-csv-is-a-directory", "analyze {timm.safetensors} --csv {empty_dir}", "--csv", "is a directory"),
    case("analyze-plot-is-a-directory", "analyze {timm.safetensors} --plot {empty_dir}", "--plot", "is a directory"),
    case("analyze-csv-under-a-file", "analyze {timm.safetensors} --csv {a_file}/x.csv", "is a file, not a directory"),
    case("train-out-under-a-file", "train --out {a_file}/runs", "is a file, not a directory"),
    case("theory-check-csv-is-a-directory", "theory check --csv {empty_dir}", "--csv", "is a directory"),
    case("theory-predict-csv-is-a-directory", "theory predict --csv {empty_dir}", "--csv", "is a directory"),
    case("train-out-is-a-file", "train --out {a_file}", "--out", "is a file"),
    case("simulate-out-is-a-file", "simulate --out {a_file}", "--out", "is a file"),
    case("compare-theory-out-is-a-file", "compare-theory --out {a_file}", "--out", "is a file"),
    case("experiment-out-is-a-file", "experiment claim7 --out {a_file}", "--out", "is a file"),
    case("study-out-is-a-file", "study --out {a_file}", "--out", "is a file"),
    case("paper-out-is-a-file", "paper --out {a_file}", "--out", "is a file"),
    case("paper-work-is-a-file", "paper --work {a_file} --list", "--work", "is a file"),
    case("paper-two-modes", "paper --quick --standard", "choose one of --quick, --standard, --full, --smoke"),
    case("paper-checkpoint-missing", "paper --checkpoints {missing}/model.safetensors", "no such checkpoint"),
    case("paper-unknown-experiment", "paper --only nope --out {empty_dir}/paper", "unknown experiment", "nope"),
    case("paper-unknown-device", "paper --device tpu", "--device must be auto, cpu, cuda"),
    case("train-data-npz-corrupt", "train --data {random.npz} --out {empty_dir}/run", _CORRUPT, ".npz archive"),
    # ---- values that do not parse, unknown names --------------------------------------------------------------
    case("null-d-not-a-number", "null --d abc", "--d", "valid integer"),
    case("null-k-not-a-number", "null --k abc", "--k", "valid number"),
    case("unknown-command", "frobnicate", "No such command 'frobnicate'"),
    case("unknown-option", "null --dd 3", "No such option", "--dd"),
    case("missing-argument", "analyze", "Missing argument"),
    case("theory-unknown-command", "theory frobnicate", "No such command"),
    # ---- out-of-range numeric options of every command -----------------------------------------------------------
    _range("scores {forms.npy}", "--k", "-1", "greater than or equal to 0"),
    _range("scores {forms.npy}", "--null-samples", "1", "greater than or equal to 2"),
    _range("null", "--d", "1", "greater than or equal to 2"),
    _range("null", "--rank", "0", "greater than or equal to 1"),
    _range("null", "--k", "-0.5", "greater than or equal to 0"),
    _range("null", "--samples", "1", "greater than or equal to 2"),
    _range("null", "--seed", "-1", "greater than or equal to 0"),
    _range("analyze {timm.safetensors}", "--heads", "0", "greater than or equal to 1"),
    _range("analyze {timm.safetensors}", "--kv-heads", "0", "greater than or equal to 1"),
    _range("analyze {timm.safetensors}", "--k", "-1", "greater than or equal to 0"),
    _range("analyze {timm.safetensors}", "--null-samples", "1", "greater than or equal to 2"),
    _range("train", "--seeds", "0", "greater than or equal to 1"),
    _range("train", "--seed-start", "-1", "greater than or equal to 0"),
    _range("train", "--steps", "0", "greater than or equal to 1"),
    _range("train", "--batch-size", "0", "greater than or equal to 1"),
    _range("train", "--lr", "0", "is not > 0"),
    _range("train", "--lr", "-1e-3", "is not > 0"),
    _range("train", "--log-every", "0", "greater than or equal to 1"),
    _range("train", "--checkpoint-every", "-1", "greater than or equal to 0"),
    _range("train", "--threads", "-1", "greater than or equal to 0"),
    _range("simulate", "--d", "1", "greater than or equal to 2"),
    _range("simulate", "--n", "1", "greater than or equal to 2"),
    _range("simulate", "--heads", "0", "greater than or equal to 1"),
    _range("simulate", "--d-head", "-1", "greater than or equal to 0"),
    _range("simulate", "--layers", "0", "greater than or equal to 1"),
    _range("simulate", "--steps", "0", "greater than or equal to 1"),
    _range("simulate", "--seeds", "0", "greater than or equal to 1"),
    _range("simulate", "--first-seed", "-1", "greater than or equal to 0"),
    _range("simulate", "--batch", "0", "greater than or equal to 1"),
    _range("simulate", "--lr", "0", "is not > 0"),
    _range("simulate", "--strength", "1.5", "less than or equal to 1"),
    _range("simulate", "--strength", "-0.1", "greater than or equal to 0"),
    _range("simulate", "--lag", "0", "greater than or equal to 1"),
    _range("simulate", "--vocab", "1", "greater than or equal to 2"),
    _range("simulate", "--channels", "0", "greater than or equal to 1"),
    _range("simulate", "--mask-ratio", "0", "not in the range 0<x<=1"),
    _range("simulate", "--mask-ratio", "1.5", "not in the range 0<x<=1"),
    _range("simulate", "--init-scale", "0", "is not > 0"),
    _range("simulate", "--record-every", "0", "greater than or equal to 1"),
    _range("simulate", "--threads", "0", "greater than or equal to 1"),
    _range("compare-theory", "--steps", "0", "greater than or equal to 1"),
    _range("compare-theory", "--batch", "0", "greater than or equal to 1"),
    _range("compare-theory", "--seeds", "0", "greater than or equal to 1"),
    _range("compare-theory", "--mc-sequences", "0", "greater than or equal to 1"),
    _range("compare-theory", "--threads", "0", "greater than or equal to 1"),
    _range("experiment claim7", "--threads", "0", "greater than or equal to 1"),
    _range("study", "--seeds", "1", "greater than or equal to 2"),
    case("study-steps-zero", "study --tasks dit-mnist --steps dit-mnist=0", "steps of task dit-mnist", ">= 1"),
    case("study-steps-not-a-number", "study --tasks vit --steps vit=many", "steps of task vit", "integer"),
    case("study-steps-of-another-task", "study --tasks vit --steps dit=10", "steps given for ['dit']"),
    case("study-target-above-one", "study --tasks vit-mnist --target vit-mnist=1.5", "test_accuracy", "[0, 1]"),
    case("study-fid-target-zero", "study --tasks dit-mnist --target dit-mnist=0", "sample_fid", "> 0"),
    case("study-unknown-task", "study --tasks vit-cifar", "unknown study task", "vit-cifar"),
    case("study-unknown-scheme", "study --schemes default,orthogonal", "unknown init scheme", "orthogonal"),
    case("train-unknown-recipe", "train --recipe dit-cifar", "unknown recipe 'dit-cifar'"),
    case("fidelity-net-out-is-a-directory", "fidelity-net --out {empty_dir}", "--out", "is a directory"),
    case("fidelity-net-unknown-data", "fidelity-net --data nosuch --out {empty_dir}/net", "unknown data"),
    _range("fidelity-net", "--steps", "0", "greater than or equal to 1"),
    _range("fidelity-net", "--sanity-seeds", "1", "greater than or equal to 2"),
    _range("study", "--target-at", "0", "not in the range 0<x<=1"),
    _range("study", "--target-at", "1.5", "not in the range 0<x<=1"),
    _range("study", "--log-every", "0", "greater than or equal to 1"),
    _range("study", "--threads", "-1", "greater than or equal to 0"),
    _range("paper", "--jobs", "0", "greater than or equal to 1"),
    _range("theory check", "--seed", "-1", "greater than or equal to 0"),
    _range("theory check", "--claim", "0", "greater than or equal to 1"),
    _range("theory check", "--claim", "7", "less than or equal to 6"),
    _range("theory derive", "--n", "0", "greater than or equal to 1"),
    _range("theory derive", "--n", str(SYMBOLIC_MAX_SIZE + 1), f"less than or equal to {SYMBOLIC_MAX_SIZE}"),
    _range("theory derive", "--d", "0", "greater than or equal to 1"),
    _range("theory derive", "--d", str(SYMBOLIC_MAX_SIZE + 1), f"less than or equal to {SYMBOLIC_MAX_SIZE}"),
    _range("theory predict", "--n", "2", "greater than or equal to 3"),
    _range("theory predict", "--n", "8", "less than or equal to 7"),
    _range("theory predict", "--d", "1", "greater than or equal to 2"),
    _range("theory predict", "--seed", "-1", "greater than or equal to 0"),
]


def _random(path: Path, n: int = 4096) -> None:
    path.write_bytes(np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8).tobytes())


def _safetensors(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    """Every bad input of the table, built once: ``{name: path}``."""
    root = tmp_path_factory.mktemp("bad-inputs")
    files: dict[str, Path] = {}

    def put(name: str, directory: bool = False) -> Path:
        files[name] = root / name
        (files[name] if directory else files[name].parent).mkdir(parents=True, exist_ok=True)
        return files[name]

    for ext in ("safetensors", "pt", "bin", "pth", "gguf", "npy", "npz", "txt"):
        _random(put(f"random.{ext}"))
    put("huge_header.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    put("bad_json_header.safetensors").write_bytes(_safetensors(b"{not json at all"))
    header = json.dumps({"w": {"dtype": "F32", "shape": [D, D], "data_offsets": [0, 4 * D * D]}}).encode()
    put("offsets_past_end.safetensors").write_bytes(_safetensors(header, b"\0" * 16))
    put("empty.safetensors").write_bytes(b"")
    save_file({f"h.{i}.mixer.Wqkv.weight": torch.zeros(3 * D, D) for i in range(2)}, put("unknown_layout.safetensors"))
    timm = TimmStack()
    save_file({k: v.contiguous() for k, v in timm.state_dict().items()}, put("timm.safetensors"))
    good = files["timm.safetensors"].read_bytes()
    put("truncated.safetensors").write_bytes(good[: len(good) // 2])
    torch.save(timm.state_dict(), root / "good.pt")
    put("truncated.pt").write_bytes((root / "good.pt").read_bytes()[:300])
    torch.save(torch.zeros(3), put("tensor.pt"))
    put("version99.gguf").write_bytes(b"GGUF" + struct.pack("<I", 99) + b"\0" * 64)
    put("version1.gguf").write_bytes(b"GGUF" + struct.pack("<I", 1) + b"\0" * 64)
    q = np.random.default_rng(1).standard_normal((D, D)).astype(np.float32)
    write_gguf(root / "good.gguf", {"blk.0.attn_q.weight": q, "blk.0.attn_k.weight": q}, H, H, D, 1)
    put("truncated.gguf").write_bytes((root / "good.gguf").read_bytes()[:40])
    for name, config in (
        ("bad_config", b'{"model_type": "bert",'),
        ("list_config", b"[1, 2]"),
        ("binary_config", b"\xff\xfe\0"),
    ):
        save_file({"x": torch.zeros(1)}, put(name, directory=True) / "model.safetensors")
        (files[name] / "config.json").write_bytes(config)
    save_file({"x": torch.zeros(1)}, put("sidecar/step_1.safetensors"))
    (root / "sidecar" / "step_1.json").write_text("{oops")
    for name, index in (
        ("bad_index", "{,"),
        ("index_without_map", '{"metadata": {}}'),
        ("index_map_list", '{"weight_map": ["a", "b"]}'),
        ("index_missing_shard", '{"weight_map": {"w": "model-00001-of-00002.safetensors"}}'),
    ):
        (put(name, directory=True) / "model.safetensors.index.json").write_text(index)
    put("empty_dir", directory=True)
    put("a_file").write_text("not a directory")
    files["missing"] = root / "missing"
    np.save(put("forms.npy"), np.eye(D))
    put("truncated.npy").write_bytes(files["forms.npy"].read_bytes()[:100])
    np.save(put("object.npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(put("no_factors.npz"), a=np.eye(3))
    return files


def _expand(args: tuple[str, ...], files: dict[str, Path]) -> list[str]:
    out = []
    for arg in args:
        for name, path in files.items():
            arg = arg.replace("{" + name + "}", str(path))
        assert "{" not in arg, f"unknown file placeholder in {arg!r}"
        out.append(arg)
    return out


def test_the_table_covers_enough_cases_with_unique_ids():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    assert len(CASES) >= 60


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_clear_line(case: Case, bad_files, monkeypatch, tmp_path):
    monkeypatch.setenv("WQK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WQK_TRACEBACK", raising=False)
    result = CliRunner().invoke(app, _expand(case.args, bad_files))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code != 0, result.output
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{result.stderr}"
    line = lines[0]
    assert line.startswith("error: ") and "internal error" not in line, line
    for part in case.expect:
        assert part.lower() in line.lower(), f"{part!r} not in {line!r}"
    assert "Traceback" not in result.output and 'File "' not in result.output, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception


def test_traceback_on_request(bad_files, monkeypatch):
    """``WQK_TRACEBACK=1`` re-raises the reader's error (for debugging), instead of the one line."""
    monkeypatch.setenv("WQK_TRACEBACK", "1")
    result = CliRunner().invoke(app, ["analyze", str(bad_files["random.safetensors"])])
    assert result.exit_code != 0 and isinstance(result.exception, ValueError)


def test_help_without_arguments_exits_cleanly():
    for args in ([], ["theory"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and "Usage:" in result.output and not result.stderr.strip()


def test_symbolic_bound_is_the_one_theory_enforces():
    assert SYMBOLIC_MAX_SIZE == MAX_SIZE
