"""Open a checkpoint on disk as named tensors that are read one at a time, plus its config.

Formats: ``.safetensors`` (single, or sharded through its ``*.index.json``), ``.pt`` / ``.pth`` / ``.ckpt`` /
``.bin`` (``torch.load(..., weights_only=True)``: tensors and plain containers only), ``.gguf``
(dequantised through the ``gguf`` package; its metadata becomes a config), or a directory holding
one of those next to a ``config.json`` (a diffusers pipeline directory is read from ``transformer/`` or ``unet/``).
A single file without a ``config.json`` takes its config from a JSON of the same stem, if any.
Only the tensors an adapter asks for are ever read (memory maps, never a whole-file load). Float8 weights
(FP8 checkpoints) are read times the scale stored beside them (:mod:`wqk.checkpoints.fp8`), MLX's packed
integers unpacked with their group scales and biases (:mod:`wqk.checkpoints.mlx_quant`).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from wqk.checkpoints import mlx_quant
from wqk.checkpoints.fp8 import FLOAT8, SCALE_SUFFIXES, block_size, dequantized

#: File names that say nothing about the model: name it after the directory instead.
_GENERIC_STEMS = {"model", "pytorch_model", "diffusion_pytorch_model", "consolidated", "weights", "checkpoint"}
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
# Classes torch's weights-only loader may rebuild besides tensors and containers. argparse.Namespace
# is how DiT's training script stores its args next to "model" and "ema": it is restored as plain
# attributes, runs no code, and is then ignored.
_ALLOWED_CLASSES = [argparse.Namespace]


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or scored; the message says why and what to do.

    ``details`` (e.g. a listing of the checkpoint's attention-looking keys) follow the one-line ``message``
    in ``str(err)``; the command line prints them apart, on stdout, under the one error line.
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(f"{message}\n{details}" if details else message)
        self.message, self.details = message, details


def _why(err: BaseException) -> str:
    """The first line of a reader's own error (its type when it says nothing)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


_SAFETENSORS = "a .safetensors file (an 8-byte header length, a JSON header, then the tensor bytes it describes)"


@dataclass(frozen=True)
class HeadCounts:
    """Query and key/value head counts and where they came from (shown by ``--describe``)."""

    n_heads: int
    n_kv_heads: int
    source: str


@dataclass
class Checkpoint:
    """Tensor names and shapes of a checkpoint, its config (``config.json`` or GGUF metadata), lazy reads."""

    path: Path
    name: str
    format: str
    shapes: dict[str, tuple[int, ...]]
    config: dict[str, Any]
    reader: Callable[[str], torch.Tensor]
    notes: list[str] = field(default_factory=list)
    config_source: str = "config.json"

    @property
    def keys(self) -> list[str]:
        return list(self.shapes)

    def get(self, key: str) -> torch.Tensor:
        """Read one tensor: dequantised for GGUF and MLX; a float8 or integer weight times the scale stored beside it
        (FP8 checkpoints, compressed-tensors' int8 ``int-quantized``: :mod:`wqk.checkpoints.fp8`); in its stored dtype
        otherwise. A float8 or integer weight with no scale beside it is refused: its stored values are not the
        weights."""
        if key not in self.shapes:
            raise CheckpointError(f"{self.path} has no tensor {key!r}")
        tensor = self.reader(key)
        if tensor.is_floating_point() and tensor.dtype not in FLOAT8:
            return tensor
        scale = next((key + suffix for suffix in SCALE_SUFFIXES if key + suffix in self.shapes), None)
        if scale is None:
            raise CheckpointError(
                f"{key} is stored in {tensor.dtype} with no {key}{SCALE_SUFFIXES[0]} or {key}{SCALE_SUFFIXES[1]} "
                "beside it (nor MLX's scales and biases with the config's quantization): without its scale the "
                "stored values are not the weights (not guessing); dequantise the model first"
            )
        zero = key.removesuffix("weight") + "weight_zero_point"
        if zero in self.shapes and bool(self.reader(zero).any()):
            raise CheckpointError(f"{key}: asymmetric quantisation ({zero} is not zero) is not read")
        try:
            return dequantized(tensor, self.reader(scale), block_size(self.config), key)
        except ValueError as err:
            raise CheckpointError(str(err)) from err

    @classmethod
    def from_state_dict(
        cls, state_dict: Mapping[str, torch.Tensor], config: dict[str, Any] | None = None, name: str = "state_dict"
    ) -> Checkpoint:
        """Wrap an in-memory state dict (e.g. ``model.state_dict()``) so it is analysed like a file."""
        tensors, notes = _flatten(state_dict)
        return cls(
            Path(name),
            name,
            "state dict",
            {k: tuple(t.shape) for k, t in tensors.items()},
            dict(config or {}),
            tensors.__getitem__,
            notes,
            "the given config",
        )


# ---- head counts ---------------------------------------------------------------------------------
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads", "attention_heads")
_KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "n_kv_heads")


def _count(value: Any, stage: int | None) -> int | None:
    """A positive int, or entry ``stage`` of a per-stage list of them (Swin's ``num_heads``, SegFormer's)."""
    if isinstance(value, list) and stage is not None and stage < len(value):
        value = value[stage]
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _first_in(scope: Mapping[str, Any], names: tuple[str, ...], stage: int | None = None) -> tuple[str, int] | None:
    """The first of ``names`` that ``scope`` maps to a positive int (or a per-stage list, given ``stage``)."""
    for name in names:
        value = _count(scope.get(name), stage)
        if value is not None:
            return (name if stage is None or not isinstance(scope.get(name), list) else f"{name}[{stage}]"), value
    return None


def _first(config: Mapping[str, Any], names: tuple[str, ...], stage: int | None = None) -> tuple[str, int] | None:
    """The first of ``names`` holding an int at the top level, else one level down (run configs nest ``model``).

    One level down, the nested configs that state a value must agree: a composite config whose towers
    differ (CLIP's ``text_config`` and ``vision_config``) gives None rather than one tower's count.
    """
    found = _first_in(config, names, stage)
    if found:
        return found
    nested = [
        (f"{key}.{hit[0]}", hit[1])
        for key, scope in config.items()
        if isinstance(scope, Mapping) and (hit := _first_in(scope, names, stage))
    ]
    return nested[0] if len({value for _, value in nested}) == 1 else None


def config_head_counts(
    config: Mapping[str, Any], source: str = "config.json", role: str = "", stage: int | None = None
) -> HeadCounts | None:
    """Head counts a config states, or None when it names none.

    ``role`` (e.g. ``"decoder"``) looks for ``decoder_num_attention_heads``, ``decoder_attention_heads`` and
    the like first, as a ViT-MAE or BART config states its decoder's heads; ``stage`` picks the entry of a
    per-stage list. ``n_kv_heads`` is 0 when the config does not say (the caller infers it from the key
    weight's shape). A multi-query config (``multi_query``, Falcon's older architecture) has one key head.
    """
    role_keys = tuple(f"{role}_{n}" for n in (*_HEAD_KEYS, "attention_heads") if role)
    heads = _first(config, role_keys + _HEAD_KEYS, stage)
    if heads is None:
        return None
    ratio = _count(config.get("head_ratio"), None)
    if ratio is not None:  # ConvBERT: H / head_ratio attention heads (at least one); its other "heads" convolve
        heads = (f"{heads[0]} / head_ratio", max(1, heads[1] // ratio))
    kv = _first(config, tuple(f"{role}_{n}" for n in _KV_HEAD_KEYS if role) + _KV_HEAD_KEYS, stage)
    if config.get("multi_query") is True and not config.get("new_decoder_architecture"):
        kv = ("multi_query", 1)  # Falcon writes num_kv_heads = H beside it, but its forward uses one key head
    where = f"{source} ({heads[0]}" + (f", {kv[0]})" if kv else ")")
    return HeadCounts(heads[1], kv[1] if kv else 0, where)


# ---- formats -------------------------------------------------------------------------------------
def _safetensors_files(files: list[Path]) -> tuple[dict[str, tuple[int, ...]], Callable[[str], torch.Tensor]]:
    """Shapes from the headers of every file; a read opens only the file holding that tensor."""
    from safetensors import safe_open

    shapes, where = {}, {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                found = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
        except Exception as err:  # safetensors' own error types: a truncated or corrupt header, bad offsets
            raise CheckpointError(f"cannot read {path}: {_why(err)}; expected {_SAFETENSORS}") from err
        for key, shape in found.items():
            if key in where:
                raise CheckpointError(f"tensor {key!r} is in both {where[key].name} and {path.name}")
            shapes[key] = shape
            where[key] = path

    def read(key: str) -> torch.Tensor:
        try:
            with safe_open(str(where[key]), framework="pt") as f:
                return f.get_tensor(key)
        except Exception as err:
            raise CheckpointError(f"cannot read tensor {key!r} of {where[key]}: {_why(err)}") from err

    return shapes, read


def _flatten(obj: Mapping, prefix: str = "") -> tuple[dict[str, torch.Tensor], list[str]]:
    """Nested dicts of tensors -> ``{"a.b.c": tensor}``; anything else is noted and left out."""
    tensors, notes = {}, []
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            tensors[name] = value
        elif isinstance(value, Mapping):
            sub, sub_notes = _flatten(value, f"{name}.")
            tensors.update(sub)
            notes += (
                sub_notes
                if sub
                else [f"{name}: {len(value)} {'entry' if len(value) == 1 else 'entries'}, no tensor (ignored)"]
            )
        else:
            notes.append(f"{name}: {type(value).__name__}, not a tensor (ignored)")
    return tensors, notes


#: Entries of a training checkpoint (a dict saved with ``torch.save``) that may state the model's hyper-parameters,
#: in the order they are tried where no config.json lies beside it: nanoGPT's ``model_args``, Lightning's
#: ``hyper_parameters``, a training script's ``config`` or ``args``.
_HYPERPARAMETER_ENTRIES = ("model_args", "model_config", "config", "hyper_parameters", "hparams", "args")


def _hyperparameters(obj: Mapping) -> tuple[str, dict[str, Any]] | None:
    """The first hyper-parameter entry of a loaded checkpoint that states a head count, and its name, else None."""
    for entry in _HYPERPARAMETER_ENTRIES:
        value = obj.get(entry)
        value = vars(value) if isinstance(value, argparse.Namespace) else value
        if isinstance(value, Mapping) and _first(value, _HEAD_KEYS) is not None:
            return entry, {k: v for k, v in value.items() if not isinstance(v, torch.Tensor)}
    return None


def _torch_files(
    files: list[Path],
) -> tuple[dict[str, tuple[int, ...]], Callable[[str], torch.Tensor], list[str], tuple[str, dict] | None]:
    """``torch.load(weights_only=True)``, memory-mapped where the file allows it; refuses any other object.

    Also returns the first hyper-parameter entry saved beside the weights that states a head count
    (``(name, mapping)``, see ``_HYPERPARAMETER_ENTRIES``), else None.
    """
    tensors, notes, stated = {}, [], None
    for path in files:
        try:
            with torch.serialization.safe_globals(_ALLOWED_CLASSES):
                try:
                    obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
                except RuntimeError as err:  # legacy (non-zip) files cannot be memory-mapped
                    if "mmap" not in str(err):
                        raise
                    obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            found = re.search(r"GLOBAL ([\w.]+)", str(err))
            if not found:  # not a refused object: a corrupt or foreign file (torch's reason, if it gave one)
                detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(err))
                raise CheckpointError(
                    f"cannot read {path} with torch.load: {detail[1] if detail else _why(err)}; expected a state "
                    "dict saved with torch.save"
                ) from err
            culprit = f"it names {found[1]}"
            raise CheckpointError(
                f"refusing {path}: it holds serialised Python objects besides tensors ({culprit}), and loading "
                "them could run arbitrary code. Save the state dict alone (torch.save(model.state_dict(), ...)) "
                "or convert it to .safetensors."
            ) from err
        if isinstance(obj, torch.Tensor) or not isinstance(obj, Mapping):
            raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a dict of tensors (a state dict)")
        sub, sub_notes = _flatten(obj)
        clash = set(sub) & set(tensors)
        if clash:
            raise CheckpointError(f"tensor {sorted(clash)[0]!r} appears in more than one file next to {path.name}")
        tensors.update(sub)
        notes += [f"{path.name}: {note}" for note in sub_notes]
        found = None if stated else _hyperparameters(obj)
        stated = (f"{path.name}'s {found[0]!r}", found[1]) if found else stated
    return {k: tuple(t.shape) for k, t in tensors.items()}, tensors.__getitem__, notes, stated


def _gguf_field(reader, key: str) -> Any:
    field_ = reader.get_field(key)
    return None if field_ is None else field_.contents()


def _gguf_file(path: Path) -> tuple[dict[str, tuple[int, ...]], Callable[[str], torch.Tensor], dict, list[str]]:
    """GGUF tensors (numpy order ``(out, in)``, dequantised on read) and metadata as a config dict."""
    try:
        from gguf import GGUFReader
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize
    except ImportError as err:
        raise CheckpointError("reading .gguf needs the 'gguf' package: pip install 'wqk-toolkit[formats]'") from err
    try:
        reader = GGUFReader(str(path))
    except Exception as err:  # the reader's ValueError (magic, version), or IndexError on a truncated file
        raise CheckpointError(
            f"cannot read {path} as GGUF: {_why(err)}; expected a GGUF file of version 2 or 3 (llama.cpp's format)"
        ) from err
    tensors = {t.name: t for t in reader.tensors}
    arch = _gguf_field(reader, "general.architecture") or "unknown"
    config: dict[str, Any] = {"model_type": arch}
    for ours, theirs in [
        ("num_attention_heads", "attention.head_count"),
        ("num_key_value_heads", "attention.head_count_kv"),
        ("hidden_size", "embedding_length"),
        ("rope_dimension_count", "rope.dimension_count"),
        ("rope_theta", "rope.freq_base"),
    ]:
        value = _gguf_field(reader, f"{arch}.{theirs}")
        if value is not None:
            config[ours] = value
    quantised = sorted({t.tensor_type.name for t in tensors.values()} - {"F32", "F16", "BF16"})
    notes = [
        f"GGUF tensors stored as {', '.join(quantised)} are dequantised: the scores include the quantisation error"
    ] * bool(quantised)

    def read(key: str) -> torch.Tensor:
        t = tensors[key]
        data = t.data if t.tensor_type == GGMLQuantizationType.F32 else dequantize(t.data, t.tensor_type)
        return torch.from_numpy(data.reshape(tuple(reversed(t.shape.tolist()))).copy())

    return {k: tuple(reversed(t.shape.tolist())) for k, t in tensors.items()}, read, config, notes


def _weight_files(directory: Path, open_clip: bool = False) -> tuple[list[Path], list[Path]]:
    """The weight files a directory is read from, in order of preference: open_clip's own files
    (``open_clip_model.safetensors``, ``open_clip_pytorch_model.bin``) where its config is the one read, the others
    otherwise (a hub repo of an open_clip model often holds the transformers conversion beside them); and the
    variants left unread (``_one_variant``)."""
    patterns = (
        "*.safetensors.index.json",
        "*.safetensors",
        "*.bin.index.json",
        "*.bin",
        "*.pt",
        "*.pth",
        "*.ckpt",
        "*.gguf",
    )
    for pattern in patterns:
        found = [f for f in sorted(directory.glob(pattern)) if f.name.startswith("open_clip_") == open_clip]
        if found:
            files = found[:1] if pattern.endswith(".json") else _one_variant(found)
            return files, [f for f in found if f not in files and not pattern.endswith(".json")]
    return [], []


#: diffusers' weight variants (``diffusion_pytorch_model.fp16.safetensors``), in order of preference after the file
#: with none: copies of the same weights at other precisions, then the raw training weights (``non_ema``: Stable
#: Diffusion samples with the EMA weights, the file with no variant).
_VARIANTS = ("fp16", "bf16", "fp32", "ema", "non_ema")


def _one_variant(files: list[Path]) -> list[Path]:
    """One variant of each file stored in several (``diffusion_pytorch_model.safetensors`` beside its ``.fp16.`` and
    ``.non_ema.`` copies), in the order of ``_VARIANTS``; a file is a variant of ``B`` where its name is
    ``B.{variant}.{ext}`` with a known variant."""
    by_base: dict[str, list[tuple[int, Path]]] = {}
    for f in files:
        base, _, variant = f.name.removesuffix(f.suffix).rpartition(".")
        known = base and variant in _VARIANTS
        key, rank = (base, 1 + _VARIANTS.index(variant)) if known else (f.name.removesuffix(f.suffix), 0)
        by_base.setdefault(key, []).append((rank, f))
    return sorted(min(group)[1] for group in by_base.values())


def _index_files(index: Path) -> list[Path]:
    """Shard files named by a Hugging Face ``*.index.json`` (its ``weight_map``)."""
    what = "expected a shard index: a JSON object whose 'weight_map' maps tensor names to shard file names"
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{index} is not valid JSON ({err}); {what}") from err
    except (KeyError, TypeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{index} has no 'weight_map'; {what}") from err
    if not isinstance(weight_map, Mapping) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: its 'weight_map' is not a mapping of names to file names; {what}")
    files = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise CheckpointError(f"{index.name} names shards that are not there: {', '.join(missing)}")
    return files


def _model_name(path: Path) -> str:
    stem = path.name.split(".")[0] if path.is_file() else path.name
    return path.parent.name if path.is_file() and (stem in _GENERIC_STEMS or stem.startswith("model-")) else stem


def _config_file(path: Path) -> Path | None:
    """``config.json`` next to the weights, else open_clip's ``open_clip_config.json``, else a JSON sidecar of the
    same stem (``wqk.vision.train``'s ``step_K.json`` beside ``step_K.safetensors``, which states the head counts)."""
    folder = path if path.is_dir() else path.parent
    for name in ("config.json", OPEN_CLIP_CONFIG):
        if (folder / name).exists():
            return folder / name
    sidecar = path.with_suffix(".json")
    return sidecar if path.is_file() and sidecar != path and sidecar.exists() else None


def read_config(path: Path) -> dict[str, Any]:
    """A ``config.json`` (or sidecar) as a dict; a corrupt one is an error naming it."""
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON ({err}); expected the model's config, a JSON object") from err
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path} is not text; expected the model's config, a JSON object") from err
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} holds a JSON {type(config).__name__}; expected the model's config, an object")
    return config


OPEN_CLIP_CONFIG = "open_clip_config.json"


def open_clip_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """open_clip's config (``{"model_cfg": {"vision_cfg": ..., "text_cfg": ...}}``) as the config analyze reads.

    The text transformer is the model's own ``transformer.``: its heads go at the top; the vision transformer is
    ``visual.transformer.``: ``vision_config``, with ``width // head_width`` heads (open_clip's VisionTransformer).
    Missing fields take open_clip's defaults (``CLIPVisionCfg``: width 768, head_width 64; ``CLIPTextCfg``: width
    512, 8 heads). A tower built from timm or transformers (``timm_model_name``, ``hf_model_name``) states no heads.
    """
    model = config.get("model_cfg", config)
    vision, text = (
        model.get(part) or {} if isinstance(model, Mapping) else None for part in ("vision_cfg", "text_cfg")
    )
    if not isinstance(vision, Mapping) or not isinstance(text, Mapping):
        raise CheckpointError(f"{OPEN_CLIP_CONFIG}: expected model_cfg with vision_cfg and text_cfg objects")

    def field(part: Mapping[str, Any], name: str, default: int) -> int:
        value = part.get(name, default)
        if _count(value, None) is None:
            raise CheckpointError(f"{OPEN_CLIP_CONFIG}: {name} must be a positive integer; got {value!r}")
        return value

    out: dict[str, Any] = {"model_type": "open_clip"}
    if not text.get("hf_model_name"):
        out |= {"hidden_size": field(text, "width", 512), "num_attention_heads": field(text, "heads", 8)}
    if not vision.get("timm_model_name"):
        width, head_width = field(vision, "width", 768), field(vision, "head_width", 64)
        out["vision_config"] = {"hidden_size": width, "num_attention_heads": max(1, width // head_width)}
    return out


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Open a file or directory for reading tensor by tensor; the config comes from ``config.json`` or GGUF."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no such file or directory: {path}")
    notes: list[str] = []
    name = _model_name(path)
    denoiser = next((p for p in ("transformer", "unet") if (path / p).is_dir()), None) if path.is_dir() else None
    if denoiser and (path / "model_index.json").exists():
        notes.append(f"{path.name} is a diffusers pipeline: reading its {denoiser}/ folder")
        path = path / denoiser
    config_path = _config_file(path)
    config = read_config(config_path) if config_path else {}
    open_clip = config_path is not None and config_path.name == OPEN_CLIP_CONFIG
    if open_clip:
        config = open_clip_config(config)
        notes.append(f"{OPEN_CLIP_CONFIG}: open_clip's model config (heads per tower from its widths)")
    files, variants = _weight_files(path, open_clip) if path.is_dir() else ([path], [])
    if variants:
        notes.append(
            f"reading {', '.join(f.name for f in files)}; its variants not read: {', '.join(f.name for f in variants)}"
        )
    if not files:
        raise CheckpointError(
            f"{path} holds no weights (.safetensors, .bin, .pt, .pth, .ckpt or .gguf, or a shard index)"
        )
    if files[0].name.endswith(".index.json"):
        index, files = files[0], _index_files(files[0])
        notes.append(f"sharded: {index.name} -> {len(files)} files")
    suffix = files[0].suffix.lower()
    saved = None  # the hyper-parameter entry of a torch file that serves as its config
    if suffix == ".safetensors":
        shapes, read = _safetensors_files(files)
        fmt = "safetensors"
    elif suffix in _TORCH_SUFFIXES:
        shapes, read, more, stated = _torch_files(files)
        fmt, notes = "torch (weights_only)", notes + more
        if config_path is None and stated is not None:
            saved, config = stated
            notes.append(f"no config.json next to the weights: the config is {saved}, saved with them")
    elif suffix == ".gguf":
        if len(files) > 1:
            raise CheckpointError(f"{path} holds several .gguf files ({', '.join(f.name for f in files)}): pass one")
        shapes, read, gguf_config, more = _gguf_file(files[0])
        fmt, config, notes = "gguf", {**gguf_config, **config}, notes + more
    else:
        raise CheckpointError(
            f"unsupported file type {suffix!r} for {path}: expected .safetensors, "
            f"{', '.join(_TORCH_SUFFIXES)}, .gguf, a shard index or a directory"
        )
    quant = mlx_quant.quantization(config)
    if quant is not None:
        try:
            shapes, packed = mlx_quant.unpacked_shapes(shapes, quant)
        except ValueError as err:
            raise CheckpointError(str(err)) from err
        if packed:
            read = mlx_quant.reader(read, packed)
            notes.append(f"MLX-quantised: {len(packed)} packed weights are dequantised as they are read")
    if config_path is None and fmt != "gguf" and not config:
        notes.append("no config.json next to the weights: head counts come from --heads or known presets")
    source = config_path.name if config_path else "GGUF metadata" if fmt == "gguf" else saved or "config.json"
    return Checkpoint(path, name, fmt, shapes, config, read, notes, source)
