"""The vision networks, one file per family with a dataclass config and named presets: ViT (:mod:`.vit`), the
masked autoencoder (:mod:`.mae`), the causal next-patch ViT (:mod:`.causal`) and the DiT (:mod:`.dit`), all on one
fused-qkv attention (:mod:`.attention`) and einops patchify (:mod:`.patches`); ViT and DiT configs share one size
record (:mod:`.transformer_size`). Models only: what they are trained
on lives in :mod:`wqk.vision.tasks`.
"""
