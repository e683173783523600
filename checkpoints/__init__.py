"""Score published checkpoints: load weights lazily, recognise the attention layout, adapt it to ``FactoredForms``.

Modules: ``loading`` (files and configs), ``adapters`` (one pure function per weight layout),
``detect`` (layout detection and the dry-run plan), ``analyze`` (scores and the summary), ``plot``.
"""
