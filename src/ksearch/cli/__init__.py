"""The command line: the typer app, its commands, the live view of a run, the demo. Nothing else in ksearch imports
this package."""

from ksearch.cli.app import app, main

__all__ = ["app", "main"]
