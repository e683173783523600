"""Command line of the W_qk toolkit: ``python cli.py COMMAND`` (the commands live in :mod:`wqk.cli`)."""

from wqk.cli import SYMBOLIC_MAX_SIZE, app

__all__ = ["SYMBOLIC_MAX_SIZE", "app"]

if __name__ == "__main__":
    app()
