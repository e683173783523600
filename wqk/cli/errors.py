"""The command line's error policy, in one place: bad input ends in one line on stderr, never a traceback.

Click's usage errors (unknown options, values out of range, paths of the wrong kind) and the ``ValueError`` /
``OSError`` a command lets through are printed as ``error: ...`` with exit status 2; anything else (a bug) as one
line naming the exception, exit status 1. ``WQK_TRACEBACK=1`` shows the traceback instead.
"""

from __future__ import annotations

import os
import sys

import typer
import typer.core
from rich.console import Console
from rich.text import Text

try:  # only for older typer, whose errors are click's own
    import click
except ImportError:  # pragma: no cover
    click = None

#: Click's exception classes: typer >= 0.2x vendors its own click (typer.TyperException), older typer uses click's.
_CLICK_ERRORS = (typer.TyperException, *((click.ClickException,) if click is not None else ()))
_ABORTS = (typer.Abort, *((click.exceptions.Abort,) if click is not None else ()))


def print_error(message: str) -> None:
    """``error: message`` on stderr, never wrapped (one line per line of the message)."""
    Console(stderr=True, soft_wrap=True).print(Text.assemble(("error: ", "bold red"), message))


class OneLineErrors(typer.core.TyperGroup):
    """The command group: asks for huge pages before any command imports torch, and turns bad input into one line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from wqk.common.hugepages import enable_huge_pages

        enable_huge_pages()  # torch's allocator reads the setting at its first allocation
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as err:
            code = _report(err)
        if not standalone_mode:
            return code
        sys.exit(code or 0)


def _report(err: Exception) -> int:
    """Print ``err`` as one line (a usage error's help, for a bare group) and return the exit status."""
    if type(err).__name__ == "NoArgsIsHelpError":  # `cli.py` or `cli.py theory` alone: the help
        typer.echo(err.format_message())  # type: ignore[attr-defined]
        return 0
    if isinstance(err, _CLICK_ERRORS):
        ctx = getattr(err, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        print_error(" ".join(err.format_message().split()) + hint)  # type: ignore[attr-defined]
        return int(getattr(err, "exit_code", 2))
    if isinstance(err, _ABORTS):
        print_error("aborted")
        return 1
    if os.environ.get("WQK_TRACEBACK"):
        raise err
    if isinstance(err, ValueError | OSError):
        print_error(_message(err))
        return 2
    print_error(f"internal error ({type(err).__name__}): {_message(err)}; WQK_TRACEBACK=1 shows where")
    return 1


def _message(err: BaseException) -> str:
    """The one line an exception gives: an OSError's reason and file, else the first line of its message.

    A checkpoint error's details (e.g. its listing of attention-looking keys) go to stdout first.
    """
    details = getattr(err, "details", "")
    if details:
        Console().print(details, highlight=False, soft_wrap=True)
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {err.filename}"
    text = getattr(err, "message", None) or str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def fail(message: str | Exception) -> None:
    """Exit with a one-line error instead of a traceback (bad input is the user's, not a crash).

    Called while handling an exception with ``WQK_TRACEBACK=1`` set, re-raises it instead.
    """
    handling = sys.exc_info()[1]
    if handling is not None and os.environ.get("WQK_TRACEBACK"):
        raise handling
    print_error(_message(message) if isinstance(message, Exception) else message)
    raise typer.Exit(2)
