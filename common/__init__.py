"""Infrastructure every package uses: atomic result files and provenance (:mod:`common.io`), named random
streams (:mod:`common.seeding`), summaries over seeds (:mod:`common.summary`), figure saving with one
palette (:mod:`common.figures`), float32 products at the machine's GEMM rate (:mod:`common.gemm`) and
huge pages for torch's large CPU tensors (:mod:`common.hugepages`).
Nothing here knows about attention; ``theory`` and everything above it build on it.
"""
