"""``datasched request check``: a meta-job request (XML or YAML) parsed, checked and split
offline, as the service would take it, without a server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from datasched.cli.app import request_app
from datasched.cli.common import err, fail, out, print_json
from datasched.cli.options import JsonOpt

if TYPE_CHECKING:
    from datasched.service.contracts import CatalogLookup, FieldError

__all__: list[str] = []


def _content_type(path: Path, data: bytes) -> str:
    suffix = path.suffix.lower()
    if suffix == ".xml":
        return "application/xml"
    if suffix in (".yaml", ".yml"):
        return "application/yaml"
    return "application/xml" if data.lstrip()[:1] == b"<" else "application/yaml"


def _count_events(url: str, tree: str | None) -> int:
    """Entries of a file the catalog does not know, counted as ``datasched run`` does."""
    if tree is None:
        raise ValueError(f"{url}: the processor names no tree, so its events cannot be counted")
    from datasched.runtime.dataset import open_dataset

    return open_dataset("request", [url], tree).n_events


def _catalog(path: Path | None) -> CatalogLookup | None:
    if path is None:
        return None
    from datasched.runtime.dataset import CatalogError, load_catalog
    from datasched.service.request import DatasetsCatalog

    try:
        return DatasetsCatalog(load_catalog(path))
    except CatalogError as exc:
        fail(f"--catalog: {exc}")


def _errors(errors: list[FieldError], as_json: bool, file: Path) -> None:
    """Every error, each naming the file and its field (``--json``: the fields alone)."""
    if as_json:
        print_json({"valid": False, "errors": [e.as_dict() for e in errors]})
    else:
        for e in errors:
            where = e.field if e.field == str(file) else f"{file}: {e.field}"
            err.print(f"error: {where}: {e.reason}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@request_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The request (.xml or .yaml).")],
    roots: Annotated[
        list[Path] | None,
        typer.Option(
            "--roots",
            metavar="DIR",
            help="A directory the request may read and write under (repeat for more; "
            "default: the current directory).",
        ),
    ] = None,
    catalog: Annotated[
        Path | None,
        typer.Option("--catalog", metavar="FILE", help="A catalog YAML (as `datasched run`'s)."),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            metavar="STRATEGY",
            help="by-host, by-cache or by-policy (default: the request's, else by-policy).",
        ),
    ] = None,
    load: Annotated[
        bool,
        typer.Option(
            "--load", metavar="", help="Load the processor (runs its module's code, here)."
        ),
    ] = False,
    allow_shell: Annotated[
        bool,
        typer.Option("--allow-shell", metavar="", help="Allow shell operators in the command."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Parse and check a meta-job request as the service would (syntax, then its files,
    command or processor and outputs) and print every error (field: reason, exit code 2)
    or the elementary jobs it would become."""
    from datasched.service.contracts import RequestInvalid, SplitStrategy
    from datasched.service.request import check_request, parse_request, split_request

    try:
        data = file.read_bytes()
    except OSError as exc:
        fail(f"{file}: {exc.strerror or exc}", code=1)
    strategy = None
    if split is not None:
        try:
            strategy = SplitStrategy(split)
        except ValueError:
            fail(f"--split: expected one of {', '.join(s.value for s in SplitStrategy)}")
    try:
        mjr = parse_request(data, _content_type(file, data))
    except RequestInvalid as exc:
        errors = list(exc.errors)
        if not as_json:  # the request's text as a whole ("body") is, here, the file
            errors = [replace(e, field=str(file)) if e.field == "body" else e for e in errors]
        _errors(errors, as_json, file)
    lookup = _catalog(catalog)
    files, errors = check_request(
        mjr,
        lookup,
        roots=[r.resolve() for r in roots] if roots else [Path.cwd()],
        code_check=_load_here(roots) if load else None,
        allow_shell=allow_shell,
        count_events=_count_events,
    )
    if errors:
        _errors(errors, as_json, file)
    strategy = strategy or mjr.split or SplitStrategy.BY_POLICY
    jobs = split_request("check", mjr, files, strategy)
    if as_json:
        doc: dict[str, Any] = {
            "valid": True,
            "split": strategy.value,
            "files": len(files),
            "jobs": [
                {
                    "id": j.id,
                    "node": j.node,
                    "files": [f.url for f in j.files],
                    "n_events": j.n_events,
                }
                for j in jobs
            ],
        }
        print_json(doc)
        return
    table = Table(title=f"{len(jobs)} elementary jobs ({strategy.value})", box=box.SIMPLE_HEAD)
    for column in ("job", "node", "files", "events", "first file"):
        table.add_column(column)
    for j in jobs:
        first = j.files[0].url if j.files else "-"
        table.add_row(j.id, j.node or "-", str(len(j.files)), str(j.n_events), first)
    out.print(table)


def _load_here(roots: list[Path] | None) -> Any:
    """``--load``: the processor loaded in this process, as ``datasched run`` loads it on the
    user's own machine (never what the daemon does: it loads one in a sandbox)."""
    from datasched.runtime.processor import ProcessorError, load_processor
    from datasched.service.contracts import FieldError, ProcessorWork
    from datasched.service.request.paths import Outside, locate

    where = [r.resolve() for r in roots] if roots else [Path.cwd()]

    def check(work: ProcessorWork) -> FieldError | None:
        ref = work.processor.strip()
        target, sep, attr = ref.rpartition(":")
        if not sep:
            target, attr = ref, ""
        if target.endswith(".py"):
            try:
                ref = f"{locate(target, where)}:{attr}" if attr else str(locate(target, where))
            except Outside as exc:
                return FieldError("processor", str(exc))
        try:
            load_processor(ref, where[0], work.processor_args)
        except ProcessorError as exc:
            return FieldError("processor", str(exc))
        return None

    return check
