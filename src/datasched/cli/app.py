"""The root command of the command line, and its groups (``trace``, ``reproduce``).

Every command explains itself with ``--help``; the commands live in the modules of this
package, one module per group of commands, each registering on :data:`app`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from datasched import __version__
from datasched.cli.common import err, out

__all__ = ["RootGroup", "app", "reproduce_app", "request_app", "trace_app"]


def _usage_error_line(exc: Exception) -> str:
    """The parser's error as one line: ``--pipeline: 'x' is not one of ...``."""
    message = str(getattr(exc, "message", "") or "").removeprefix("Value error, ")
    # The converter's own wording ("Input should be a valid number, unable to parse string
    # as a number") said as the rest of the errors are: "expected a number".
    typed = re.fullmatch(r"Input should be a valid (\w+)(, .*)?", message)
    if typed is not None:
        kind = typed.group(1)
        message = f"expected {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    param = getattr(exc, "param", None)
    if isinstance(exc, typer.BadParameter) and param is not None and message:
        names = [o for o in param.opts if o.startswith("--")] or list(param.opts)
        line = f"{names[0] if names else param.name}: {message}"
    else:
        line = str(exc.format_message())  # type: ignore[attr-defined]
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            line = f"{line.rstrip('.')} (see '{ctx.command_path} --help')"
    return " ".join(line.split())


def plain_flags(command: Any) -> None:
    """Show every on/off flag of ``command`` and of its subcommands as the bare flag in
    ``--help`` (``--skip-bad-files``), not followed by typer's ``<bool>`` placeholder, which
    reads as if the flag took a value. ``--help`` itself included: its option is made here
    (typer keeps the one a command makes, and reuses it)."""
    params = list(getattr(command, "params", []))
    help_option = command.get_help_option(typer.Context(command))
    for param in [*params, help_option]:
        flag = getattr(param, "is_flag", False) and not getattr(param, "count", False)
        if flag and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        plain_flags(sub)


class RootGroup(TyperGroup):
    """The root command: errors of the parser, too, are one ``error:`` line (exit code 2);
    flags show no ``<bool>`` in ``--help`` (:func:`plain_flags`)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        plain_flags(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            err.print("aborted", highlight=False)
            sys.exit(1)
        except Exception as exc:
            # Click's exceptions (vendored by typer): a message and an exit code. Anything
            # else is a bug and keeps its traceback.
            exit_code = getattr(exc, "exit_code", None)
            if not (hasattr(exc, "format_message") and isinstance(exit_code, int)):
                raise
            if type(exc).__name__ != "NoArgsIsHelpError":  # its help is already printed
                err.print(
                    f"error: {_usage_error_line(exc)}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            sys.exit(exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=RootGroup,
    help=(
        "Schedule analysis jobs that read large event datasets on a cluster whose nodes "
        "cache data from slow central (tape) storage. Simulate: compare scheduling policies, "
        "find the load a cluster sustains, sweep loads and cache sizes, reproduce the "
        "published results (ponce-hersch). Run: the same policies drive real analyses on "
        "Dask workers with disk caches (run, demo)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # paragraphs are re-wrapped to the terminal
)
trace_app = typer.Typer(
    help="Make and inspect job traces (CSV files, one submitted job per row); tell a job's "
    "story from a scheduler's trace (--trace-log).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
reproduce_app = typer.Typer(
    help="Reproduce a paper's numbers and write a report with its values beside ours.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
request_app = typer.Typer(
    help="Meta-job requests of the service (XML or YAML): check one offline.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(trace_app, name="trace")
app.add_typer(reproduce_app, name="reproduce")
app.add_typer(request_app, name="request")


def version_callback(value: bool) -> None:
    """``--version``: print it, and how the simulator's hot path runs, and stop."""
    if value:
        from datasched import _compiled

        if _compiled.build_is_current():
            how = "compiled"
        elif _compiled.pure_requested():
            how = f"from its sources ({_compiled.PURE_ENV} is set)"
        else:
            how = "from its sources (not compiled, or changed since: `make venv` compiles it)"
        out.print(f"datasched {__version__}\nsimulator hot path: {how}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=version_callback,
            is_eager=True,
            metavar="",
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Cache-aware scheduling of data-intensive analysis jobs (simulator)."""
