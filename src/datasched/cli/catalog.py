"""``datasched catalog``: scan storage into the catalog, import a YAML catalog, query it
(the local store, or a server's with ``--server``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from datasched.cli.client import ApiClient, ServerOpt, TokenOpt
from datasched.cli.common import fail, out
from datasched.cli.serve import DbOpt, catalog_app, open_store

__all__: list[str] = []


def _meta(items: list[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--meta: {item!r}: expected key=value")
        if key == "keywords":
            meta[key] = value.replace(",", " ").split()
        else:
            meta[key] = value
    return meta


@catalog_app.command("scan")
def scan(
    url: Annotated[str, typer.Argument(help="A directory, glob or file (any fsspec URL).")],
    dataset: Annotated[str | None, typer.Option(help="The dataset's name.")] = None,
    tree: Annotated[
        str | None, typer.Option(help="The tree (default: the files' only one).")
    ] = None,
    meta: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            help="Metadata (repeatable): year, system, energy, detector, trigger, keywords.",
        ),
    ] = None,
    db: DbOpt = None,
) -> None:
    """Walk storage for ROOT files, count their events and add them as a dataset."""
    from datasched.runtime.dataset import DatasetError

    metadata = _meta(meta or [])
    store = open_store(db)
    from datasched.service.catalog import Catalog

    try:
        name, n = Catalog(store).scan(url, dataset=dataset, tree=tree, metadata=metadata)
    except (DatasetError, ValueError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"URL: {url}: {exc.strerror or exc}", code=1)
    finally:
        store.close()
    out.print(f"{name}: {n} files", highlight=False)


@catalog_app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A YAML catalog (the runtime's format).")],
    db: DbOpt = None,
) -> None:
    """Import the datasets of a YAML catalog; a dataset's metadata gives its year, system,
    energy, detector, trigger and keywords."""
    from datasched.runtime.dataset import CatalogError, DatasetError
    from datasched.service.catalog import Catalog

    store = open_store(db)
    try:
        names = Catalog(store).import_yaml(file)
    except (CatalogError, DatasetError, ValueError) as exc:
        fail(str(exc))
    finally:
        store.close()
    out.print(f"imported {len(names)} datasets: {', '.join(names)}", highlight=False)


@catalog_app.command("query")
def query(
    terms: Annotated[str, typer.Argument(help="'year=2004 system=AuAu energy>=100 keyword'")] = "",
    files: Annotated[bool, typer.Option("--files", help="List the files (local store).")] = False,
    db: DbOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """The datasets matching a query, from the local store or a server (--server)."""
    if server is not None:
        with ApiClient(server, token) as client:
            got = client.call("GET", "/catalog/datasets", params={"query": terms}).json()
        got = got["datasets"]
    else:
        from dataclasses import asdict

        from datasched.service.catalog import Catalog, CatalogQueryError

        store = open_store(db)
        try:
            cat = Catalog(store)
            got = [asdict(d) for d in cat.datasets(terms)]
            if files:
                for f in cat.query(terms):
                    typer.echo(f"{f.url}\t{f.n_events}\t{f.n_bytes}")
                return
        except CatalogQueryError as exc:
            fail(str(exc))
        finally:
            store.close()
    table = Table("dataset", "files", "events", "bytes", "metadata")
    for d in got:
        meta = " ".join(f"{k}={v}" for k, v in d["metadata"].items())
        table.add_row(d["name"], str(d["n_files"]), str(d["n_events"]), str(d["n_bytes"]), meta)
    out.print(table)
