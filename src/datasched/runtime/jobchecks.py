"""Checks of a job's processor, columns and output, made when its jobs file is read (before
anything runs): each problem is one error naming the job and the field."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from datasched.runtime.dataset import Dataset
from datasched.runtime.events import SCHEMA_OPTIONS, SchemaOptions, open_remote, schema_mismatch
from datasched.runtime.outputs import OUTPUT_SUFFIXES, coffea_available
from datasched.runtime.processor import (
    Processor,
    ProcessorError,
    ShippedProcessor,
    load_processor,
    ship,
)

__all__ = [
    "COFFEA_HINT",
    "Err",
    "check_columns",
    "check_output",
    "check_processor",
    "check_schema",
    "check_schema_options",
]

COFFEA_HINT = "needs coffea: pip install 'datasched[coffea]'"


class Err(Protocol):
    """Makes the error for ``(field, reason)`` of the job being checked."""

    def __call__(self, field: str, reason: str, traceback: str = "") -> Exception: ...


def check_processor(
    ref: str, base: Path, args: Mapping[str, Any], err: Err
) -> tuple[Processor, ShippedProcessor]:
    """The processor, loaded here (the master) with its arguments, and shipped: what the
    job runs, whatever happens to the file afterwards."""
    try:
        proc = load_processor(ref, base, args)
        return proc, ship(proc, ref)
    except ProcessorError as exc:
        raise err("processor", str(exc), exc.traceback) from exc


def check_output(value: Any, default: Path, base: Path, err: Err) -> Path:
    """The job's output path (relative to ``base``), of a suffix that can be written."""
    raw = value if value is not None else str(default)
    if not isinstance(raw, str) or not raw:
        raise err("output", f"expected a path, got {raw!r}")
    output = Path(raw)
    if not output.is_absolute():
        output = base / output
    if output.suffix not in OUTPUT_SUFFIXES:
        raise err("output", f"expected a {', '.join(OUTPUT_SUFFIXES)} file, got {output.name}")
    if output.suffix == ".coffea" and not coffea_available():
        raise err("output", f"a .coffea output {COFFEA_HINT}")
    if output.exists() and output.is_dir():
        raise err("output", f"{output} is a directory")
    return output


def check_columns(
    value: Any, schema: str, datasets: Mapping[str, Dataset], err: Err
) -> tuple[str, ...] | None:
    """The job's ``columns`` (branch names or globs): each must match a branch of the first
    file of every dataset, so that a typo is found now rather than on a worker. A schema
    other than ``none`` needs coffea."""
    if schema != "none" and not coffea_available():
        raise err("schema", f"schema {schema!r} {COFFEA_HINT}")
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise err("columns", f"expected a list of branch names or globs, got {value!r}")
    for dataset in datasets.values():
        first = dataset.files[0]
        if first.url.endswith(".parquet"):
            continue
        try:
            with open_remote(first.url) as f:
                tree = f[first.tree]
                for pattern in value:
                    if not tree.keys(filter_name=pattern):
                        raise err(
                            "columns",
                            f"{pattern!r} matches no branch of {first.url} (tree {first.tree})",
                        )
        except OSError as exc:
            raise err("columns", f"cannot check them on {first.url}: {exc}") from exc
    return tuple(value)


def check_schema_options(value: Any, schema: str, err: Err) -> SchemaOptions:
    """The job's ``schema_options``: a mapping of the options ``schema`` allows
    (:data:`~datasched.runtime.events.SCHEMA_OPTIONS`), each of its type; sorted pairs."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise err("schema_options", f"expected a mapping of option names, got {value!r}")
    allowed = SCHEMA_OPTIONS[schema]
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) if allowed else "none"
        raise err(
            "schema_options",
            f"unknown option {unknown[0]!r} for schema {schema!r} (expected: {known})",
        )
    for name, kind in allowed.items():
        if name in value and type(value[name]) is not kind:
            raise err(
                "schema_options",
                f"option {name!r}: expected a {kind.__name__}, got {value[name]!r}",
            )
    return tuple(sorted((str(k), v) for k, v in value.items()))


def check_schema(
    schema: str,
    options: SchemaOptions,
    datasets: Mapping[str, Dataset],
    err: Err,
    checked: dict[tuple[str, str, str, SchemaOptions], str | None] | None = None,
) -> None:
    """Each dataset's first file read with ``schema`` and ``options`` as a worker will read
    it (coffea's factory builds the events of its first entry: the branches' metadata, no
    event data), so that a file the schema refuses is found now, in one line naming the
    dataset, and not on the workers after the run started. ``checked`` remembers the files
    already checked (many jobs read the same dataset)."""
    if schema == "none":
        return
    for dataset in datasets.values():
        first = dataset.files[0]
        if first.url.endswith(".parquet"):
            continue
        key = (first.url, first.tree, schema, options)
        if checked is not None and key in checked:
            reason = checked[key]
        else:
            try:
                reason = schema_mismatch(first.url, first.tree, schema, options)
            except OSError as exc:
                raise err(
                    "schema", f"dataset {dataset.name!r}: cannot check {first.url}: {exc}"
                ) from exc
            if checked is not None:
                checked[key] = reason
        if reason is not None:
            raise err("schema", f"dataset {dataset.name!r} does not fit it: {reason}")
