"""The ``cli.py`` command line: one module per command group, assembled here (``python cli.py COMMAND``).

Every command is a thin wrapper over a plain function of the library; the error policy is :mod:`wqk.cli.errors`,
the shared options :mod:`wqk.cli.options`, the printed rows :mod:`wqk.cli.output`. Importing builds the
command group only: nothing runs until it is called.
"""

from __future__ import annotations

import typer

from wqk.cli import paper, scoring, simulator, theory, vision
from wqk.cli.errors import OneLineErrors
from wqk.cli.theory import SYMBOLIC_MAX_SIZE

__all__ = ["SYMBOLIC_MAX_SIZE", "app"]

app = typer.Typer(
    cls=OneLineErrors,
    help="How does the training objective shape W_qk = W_q W_k^T? Score forms, draw nulls, simulate, train, analyze.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)
for group in (scoring, vision, simulator, paper, theory):
    group.register(app)
