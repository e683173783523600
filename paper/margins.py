"""The regions of no effect of the report's predictions and the paper's reference values, fixed before the data
(docs/theory.md section 5 for the paper's values): each margin says why it is that wide."""

from __future__ import annotations

import math

from wqk.paper.verdict import Margin, RangeOf

S_GAP = Margin.around(
    0.0,
    0.04,
    "10% of the paper's encoder-decoder gap in s (BERT-base trained as an encoder 0.32, as a decoder -0.05)",
)
S_GAP_VISION = Margin.around(
    0.0, 0.02, "10% of the paper's vision gap in s (ViT family about 0.34, the causal iGPT 0.11-0.18)"
)
DELTA_GAP = Margin.around(0.0, 0.05, "10% of the paper's encoder-decoder gap in δ (gpt2 -0.58, bert-base -0.08)")
DELTA_PR_GAP = Margin.around(
    0.0, 0.03, "the 95% band of one random form's δ_PR at d = 64 (2 null sd of 0.016, docs/theory.md section 2)"
)
RATIO = Margin(0.71, 1.41, "the 95% band of ‖M x‖ / ‖xᵀ M‖ for one random 64 x 64 Gaussian-product form")
RATIO_GAP = Margin.around(
    0.0, 0.1, "a tenth of the no-preference ratio 1 (the paper gives no size for ‖M x_BOS‖ >> ‖x_BOSᵀ M‖)"
)
STEP_RATIO = Margin.around(1.0, 0.07, "10% of the paper's effect (up to about 70% fewer steps: a ratio of 0.3)")
SAVING_GAP = Margin.around(
    0.0, 0.07, "10% of the paper's saving by its rule (72.9% / 68.9% fewer steps for BERT-small, 20-35% for BERT-base)"
)
CONTEXT = Margin.around(0.0, 0.1, "a tenth of a nat: a perplexity 10% below that of a model that sees no context")
#: The sampling noise of one logged sample FID of the standard DiT (500 samples): the SD over 16 draws of seed 0's
#: final samples, measured by ``dit_sampling_noise`` before any init study was judged (its summary's
#: ``sample_fid_sd``; ``tests/test_margins.py`` reads it back from the committed table).
FID_SAMPLING_SD = 1.058


def sampling_margin(sd: float, z: float = 1.959963984540054) -> float:
    """The half-width of a paired difference's region of no effect from sampling noise alone: two runs' values
    each carry sampling noise of SD ``sd``, their difference ``sqrt(2) sd``, and 95% of such differences fall
    within ``z sqrt(2) sd`` of 0 with no effect at all."""
    return z * math.sqrt(2) * sd


FID_DIFF = Margin.around(
    0.0,
    round(sampling_margin(FID_SAMPLING_SD), 2),
    "the 95% band of a paired FID difference from sampling noise alone (1.96 x √2 x the SD of one logged FID over "
    "16 draws of the same model's 500 samples, dit_sampling_noise): the paper gives no fidelity effect",
)
GRID_AIM = Margin(0.9, 0.9, "the project's aim for the grid, set on a run of 8 seeds per cell")
#: Question (a)'s encoder reference: the MAE ViT has another depth and width than the DiT, so its layers do not pair
#: with the DiT's and a difference of the two would mix backbone with objective; the DiT is described against it.
MAE_UPDATE_RANGE = RangeOf(
    None,
    None,
    "the MAE ViT's update s per layer (seed means at its last step), lowest to highest layer, on the same data: "
    "another backbone (depth, width), so a description, not a region of no effect",
    experiment="vision_mae",
    where={"task": "mae", "form": "update", "step": "last"},
)


#: The paper's released tables (docs/theory.md section 5): per family, the median over models of the per-layer
#: medians of s and δ; language encoders and decoders over every row of the released tables, vision encoders over
#: its released vision results.
PAPER_MEDIANS = {
    "encoder": {"symmetry": 0.51, "directionality": -0.13},
    "decoder": {"symmetry": 0.07, "directionality": -0.37},
    # the paper's vision rows (ViT, DeiT, DINO, BEiT, MAE) pooled: supervised and self-supervised alike
    "vision-supervised": {"symmetry": 0.34, "directionality": -0.08},
    "vision-self-supervised": {"symmetry": 0.34, "directionality": -0.08},
}
