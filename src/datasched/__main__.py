"""``python -m datasched``: the command line."""

from datasched.cli import app

app()
