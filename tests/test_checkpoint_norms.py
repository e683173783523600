"""Folded norm gains against each model's own forward: tiny BERT (post-LayerNorm), Llama (RMSNorm), Gemma 3
(RMSNorm with ``1 + w`` gains, q/k norms) and DiT (adaLN's gainless LayerNorm), saved as their users save them.

The attention logits are those the model's forward hands to ``scaled_dot_product_attention`` (pre-softmax,
before any mask; positions all 0 make RoPE the identity); the normalised tokens are the residuals entering
the pre-attention norm, standardised as the norm does, without its gain. Biases (and LayerNorm's shift) are
zeroed: they add linear terms to the logits, not part of any form. Each logit must equal
``x_i^T M_h x_j * scale`` with the folded ``M_h``, divided, for the q/k norms, by the per-token
``rms(q_h) rms(k_h)`` that folding leaves out."""

from __future__ import annotations

import contextlib

import pytest
import torch
from checkpoint_builders import SMALL, D, H, L

from wqk.checkpoints.analyze import analyze, describe, layer_forms
from wqk.checkpoints.loading import CheckpointError
from wqk.cli import app

transformers = pytest.importorskip("transformers")


@contextlib.contextmanager
def _captured_attention():
    """Record ``(query, key, scale)`` of every ``scaled_dot_product_attention`` call (``[B, H, N, d_h]``)."""
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def record(query, key, value, *args, scale=None, **kwargs):
        calls.append((query.detach(), key.detach(), scale if scale is not None else query.shape[-1] ** -0.5))
        return original(query, key, value, *args, scale=scale, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = record
    try:
        yield calls
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def _inputs_of(modules):
    """Pre-hooks recording each module's first input; returns the list they fill and the handles."""
    seen: list[torch.Tensor] = []
    handles = [m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach())) for m in modules]
    return seen, handles


def _standardised(r: torch.Tensor, eps: float, centred: bool) -> torch.Tensor:
    """The norm's output before its gain: ``(r - mean) / sigma`` (LayerNorm) or ``r / rms`` (RMSNorm)."""
    r = r.double()
    if centred:
        r = r - r.mean(-1, keepdim=True)
    return r / torch.sqrt(r.pow(2).mean(-1, keepdim=True) + eps)


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(x.double().pow(2).mean(-1) + eps)


def _randomise_gains(model, names=("norm", "LayerNorm", "layernorm")) -> None:
    """Norm gains away from 1 (else folding them tests nothing); shifts and projection biases zeroed."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif any(n in name for n in names) and p.ndim == 1:
                p.copy_(0.3 + torch.rand(p.shape, generator=g, dtype=p.dtype) * 1.4)


def _assert_logits(path, calls, tokens, fold_ln, fold_qk_norm, scales=None):
    """Each captured layer's logits equal ``x_i^T M_h x_j * scale`` (over ``rms(q) rms(k)`` where given)."""
    ckpt, plan = describe(path)
    assert len(calls) == plan.n_layers == len(tokens)
    for layer, ((query, key, scale), x) in enumerate(zip(calls, tokens, strict=True)):
        if key.shape[1] < query.shape[1]:  # grouped keys: each query head reads key head h // (H / H_kv)
            key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        logits = query.double() @ key.double().transpose(-1, -2) * scale  # [B, H, N, N]
        forms = layer_forms(ckpt, plan, layer, fold_ln=fold_ln, fold_qk_norm=fold_qk_norm)
        m = forms.matrices().double()[0]  # [H, d, d]
        want = torch.einsum("bid,hde,bje->bhij", x, m, x) * scale
        if scales is not None:
            r_q, r_k = scales[layer]
            want = want / (r_q[..., :, None] * r_k[..., None, :])
        tolerance = 1e-5 * max(1.0, logits.abs().max().item())
        assert (logits - want).abs().max().item() < tolerance, (layer, (logits - want).abs().max().item())


def _run_decoder(model, n_tokens=5):
    ids = torch.arange(1, n_tokens + 1)[None].repeat(2, 1)
    positions = torch.zeros_like(ids)  # every position 0: RoPE is the identity
    model(input_ids=ids, position_ids=positions)


def test_fold_ln_matches_bert_post_layernorm_logits(tmp_path):
    config = transformers.BertConfig(vocab_size=50, **SMALL, attn_implementation="sdpa")
    model = transformers.BertModel(config).double().eval()
    _randomise_gains(model)
    model.save_pretrained(tmp_path)
    # block i's attention reads the output of block i-1's output LayerNorm (the embeddings' before block 0)
    norms = [model.embeddings.LayerNorm] + [model.encoder.layer[i].output.LayerNorm for i in range(L - 1)]
    seen, handles = _inputs_of(norms)
    with _captured_attention() as calls, torch.no_grad():
        model(input_ids=torch.arange(1, 7)[None].repeat(2, 1))
    for h in handles:
        h.remove()
    tokens = [_standardised(r, config.layer_norm_eps, centred=True) for r in seen[:L]]
    _assert_logits(tmp_path, calls, tokens, fold_ln=True, fold_qk_norm=False)
    with pytest.raises(AssertionError):  # the unfolded form does not give these logits: the test can fail
        _assert_logits(tmp_path, calls, tokens, fold_ln=False, fold_qk_norm=False)


def test_fold_ln_matches_llama_rmsnorm_logits_and_there_is_no_qk_norm_to_fold(tmp_path):
    config = transformers.LlamaConfig(vocab_size=50, **SMALL, num_key_value_heads=2, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).double().eval()
    _randomise_gains(model)
    model.save_pretrained(tmp_path)
    seen, handles = _inputs_of([layer.input_layernorm for layer in model.model.layers])
    with _captured_attention() as calls, torch.no_grad():
        _run_decoder(model)
    for h in handles:
        h.remove()
    tokens = [_standardised(r, config.rms_norm_eps, centred=False) for r in seen]
    _assert_logits(tmp_path, calls, tokens, fold_ln=True, fold_qk_norm=False)
    with pytest.raises(CheckpointError, match="no q/k norm gains"):
        analyze(tmp_path, per="layer", null_samples=8, fold_qk_norm=True)


@pytest.mark.parametrize("fold_ln", [True, False])
def test_fold_qk_norm_matches_gemma3_logits(fold_ln, tmp_path):
    if not hasattr(transformers, "Gemma3ForCausalLM"):
        pytest.skip(f"transformers {transformers.__version__} has no Gemma 3")
    d_head = D // H
    config = transformers.Gemma3TextConfig(
        vocab_size=50,
        **SMALL,
        num_key_value_heads=2,
        head_dim=d_head,
        query_pre_attn_scalar=d_head,
        sliding_window=16,
        attn_implementation="sdpa",
    )
    model = transformers.Gemma3ForCausalLM(config).double().eval()
    _randomise_gains(model)  # Gemma's RMSNorms scale by 1 + w
    model.save_pretrained(tmp_path)
    layers = model.model.layers
    seen, handles = _inputs_of(
        [m for layer in layers for m in (layer.input_layernorm, layer.self_attn.q_norm, layer.self_attn.k_norm)]
    )
    with _captured_attention() as calls, torch.no_grad():
        _run_decoder(model)
    for h in handles:
        h.remove()
    eps = config.rms_norm_eps
    residual, q_in, k_in = seen[0::3], seen[1::3], seen[2::3]
    gains = [1 + layer.input_layernorm.weight.detach().double() for layer in layers]
    tokens = [
        _standardised(r, eps, centred=False) * (1 if fold_ln else g) for r, g in zip(residual, gains, strict=True)
    ]
    scales = []
    for q, k in zip(q_in, k_in, strict=True):  # [B, H, N, d_h], [B, H_kv, N, d_h]
        r_k = _rms(k, eps).repeat_interleave(H // k.shape[1], dim=1)
        scales.append((_rms(q, eps), r_k))
    _assert_logits(tmp_path, calls, tokens, fold_ln=fold_ln, fold_qk_norm=True, scales=scales)
    with pytest.raises(AssertionError):  # the q/k gains unfolded do not give these logits
        _assert_logits(tmp_path, calls, tokens, fold_ln=fold_ln, fold_qk_norm=False, scales=scales)


def test_fold_ln_on_a_dit_is_its_gainless_layernorm(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    model = (
        diffusers.DiTTransformer2DModel(
            num_attention_heads=H,
            attention_head_dim=D // H,
            in_channels=4,
            num_layers=L,
            sample_size=8,
            patch_size=2,
            num_embeds_ada_norm=10,
            norm_num_groups=1,
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        for block in model.transformer_blocks:  # no timestep/class modulation: the norm's output is the token
            block.norm1.linear.weight.zero_()
            block.norm1.linear.bias.zero_()
            block.attn1.to_q.bias.zero_()
            block.attn1.to_k.bias.zero_()
    model.save_pretrained(tmp_path)
    seen, handles = _inputs_of([block.norm1.norm for block in model.transformer_blocks])
    with _captured_attention() as calls, torch.no_grad():
        model(
            torch.randn(2, 4, 8, 8, dtype=torch.float64),
            timestep=torch.tensor([3, 7]),
            class_labels=torch.tensor([1, 2]),
        )
    for h in handles:
        h.remove()
    tokens = [_standardised(r, model.transformer_blocks[0].norm1.norm.eps, centred=True) for r in seen]
    _assert_logits(tmp_path, calls, tokens, fold_ln=True, fold_qk_norm=False)
    ckpt, plan = describe(tmp_path)
    assert torch.equal(layer_forms(ckpt, plan, 0, fold_ln=True).q, layer_forms(ckpt, plan, 0).q.double())


def test_folding_is_off_by_default_and_changes_the_scores_when_asked(tmp_path):
    config = transformers.LlamaConfig(vocab_size=50, **SMALL)
    model = transformers.LlamaForCausalLM(config)
    _randomise_gains(model)
    model.save_pretrained(tmp_path)
    plain = analyze(tmp_path, per="layer", null_samples=8).rows
    assert analyze(tmp_path, per="layer", null_samples=8, fold_ln=False).rows == plain
    folded = analyze(tmp_path, per="layer", null_samples=8, fold_ln=True).rows
    assert [r["symmetry"] for r in folded] != [r["symmetry"] for r in plain]


def test_cli_folds_on_request_and_says_what_it_leaves_out(tmp_path):
    from typer.testing import CliRunner

    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=50, **SMALL))
    model.save_pretrained(tmp_path)
    runner = CliRunner()
    base = ["analyze", str(tmp_path), "--per", "layer", "--null-samples", "8", "--describe"]
    plain = runner.invoke(app, base)
    folded = runner.invoke(app, [*base, "--fold-ln"])
    assert plain.exit_code == folded.exit_code == 0
    assert "--fold-ln" not in plain.output and "centring is not folded" in " ".join(folded.output.split())
    refused = runner.invoke(app, ["analyze", str(tmp_path), "--per", "layer", "--null-samples", "8", "--fold-qk-norm"])
    assert refused.exit_code != 0 and "no q/k norm gains" in refused.output
