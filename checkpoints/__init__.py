"""Score published checkpoints: load weights lazily, recognise the attention layout, adapt it to ``FactoredForms``.

Modules: ``loading`` (files and configs), ``model_types`` (one record per model type), ``adapters`` (readers:
one pure function per storage order, with its shape check), ``layouts`` (where each layout keeps its weights),
``detect`` (the plan: with ``stacks``, ``heads``, ``keys`` and ``plan``), ``norms`` (norm gains folded on
request), ``analyze`` (scores and the summary), ``fp8`` and ``mlx_quant`` (quantised weights read dequantised),
``plot``.
"""
