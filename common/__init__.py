"""Infrastructure every package uses: atomic result files and provenance (:mod:`common.io`), named random
streams (:mod:`common.seeding`), summaries over seeds (:mod:`common.summary`) and figure saving with one
palette (:mod:`common.figures`). Nothing here knows about attention; ``theory`` and everything above it build on it.
"""
