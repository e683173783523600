"""Infrastructure every package uses: atomic result files and provenance (:mod:`wqk.common.io`), named random
streams (:mod:`wqk.common.seeding`), summaries over seeds (:mod:`wqk.common.summary`), figure saving with one
palette (:mod:`wqk.common.figures`), float32 products at the machine's GEMM rate (:mod:`wqk.common.gemm`) and
huge pages for torch's large CPU tensors (:mod:`wqk.common.hugepages`).
Nothing here knows about attention; ``theory`` and everything above it build on it.
"""
