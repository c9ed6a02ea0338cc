"""Jobs described in YAML: what data, which processor, where the result goes, and when.

A jobs file holds many jobs, each with an optional submission time (a workload, as in the
papers' experiments)::

    catalog: catalog.yaml                 # optional, relative to this file
    defaults: {processor: "datasched.runtime.demodata:DimuonMass", output_dir: out}
    jobs:
      - id: z-peak-1
        dataset: zmumu                    # a catalog dataset, or files: [...] with tree:
        events: [0, 5000]                 # optional global range [start, stop)
        processor: analysis.py:MyProcessor
        output: out/z1.pkl                # optional; default <output_dir>/<id>.pkl
        submit_s: 0                       # optional, seconds after the run starts
      - id: coffea-user
        fileset: fileset.json             # coffea's format: one job per dataset, one output
        processor: analysis.py:MyProcessor
        processor_args: {era: 2018}       # the processor class's constructor arguments
        schema: nanoaod                   # events as NanoEvents (none: flat arrays)
        schema_options: {error_missing_event_ids: false}   # the schema class's options
        output: out/mine.coffea           # written with coffea.util.save

Everything is checked before anything starts; a problem is one :class:`JobSpecError` naming
the file, the job and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from datasched.runtime.dataset import (
    CatalogError,
    Dataset,
    DatasetError,
    Skipped,
    expand_files,
    fileset_datasets,
    load_catalog,
    open_dataset,
    read_yaml,
)
from datasched.runtime.events import SCHEMAS, ReadSpec, SchemaOptions
from datasched.runtime.jobchecks import (
    Err,
    check_columns,
    check_output,
    check_processor,
    check_schema,
    check_schema_options,
)
from datasched.runtime.processor import Processor, ShippedProcessor, load_processor, ship
from datasched.sandbox.confine import Confinement, UserCode

__all__ = ["JobSpec", "JobSpecError", "job_processor", "limit_chunks", "load_jobs", "processor_for"]

JOB_KEYS = frozenset(
    {
        "id",
        "dataset",
        "files",
        "fileset",
        "tree",
        "events",
        "processor",
        "processor_args",
        "schema",
        "schema_options",
        "columns",
        "output",
        "submit_s",
        "user",
        "user_group",
        "priority",
    }
)
DEFAULT_KEYS = (JOB_KEYS - {"id"}) | {"output_dir"}
TOP_KEYS = frozenset({"catalog", "defaults", "jobs", "output_dir"})


class JobSpecError(ValueError):
    """A jobs file is wrong; the message names the file, the job and the field. ``traceback``
    is the user's traceback when their processor raised while it was loaded."""

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a jobs file, checked: the events ``[start, stop)`` of ``dataset`` run
    through ``processor``, the merged result written to ``output``; the job arrives
    ``submit_s`` seconds after the run starts."""

    id: str
    dataset: Dataset
    start: int
    stop: int
    processor: str
    output: Path
    submit_s: float = 0.0
    base_dir: Path = Path()
    """Where relative processor paths are found (the jobs file's directory)."""
    processor_args: Mapping[str, Any] = field(default_factory=dict, compare=False)
    schema: str = "none"
    columns: tuple[str, ...] | None = None
    schema_options: SchemaOptions = ()
    """The schema class's options (``schema_options`` of the jobs file), set on the workers
    where the events are built."""
    group: str | None = None
    """The fileset job this dataset's job is part of: the group's jobs write one output."""
    user: str = "user"
    """Who runs it: resource scheduling by group priority shares a group's CPU among its
    users (the core's ``Job.user``)."""
    user_group: str = "default"
    """The group its user belongs to, whose priority or quota it runs under (the core's
    ``Job.group``; not :attr:`group`, which is the fileset grouping)."""
    priority: float = 0.0
    """The job's own priority, for policies that order jobs by it (the core's
    ``Job.priority``)."""
    skipped: tuple[tuple[str, str], ...] = ()
    """Files left out when the jobs file was read (``--skip-bad-files``): (url, reason)."""
    loaded: tuple[Processor, ShippedProcessor] | None = field(
        default=None, compare=False, repr=False
    )
    """The processor as loaded when the jobs file was read (what runs, even if the file
    changes or goes away later); None: loaded when the job runs."""
    code: UserCode | None = field(default=None, compare=False, repr=False)
    """The service's jobs: the processor as data, never loaded in the master; its packets
    run it in a sandbox with ``confine`` and return opaque bytes (nothing is merged)."""
    confine: Confinement | None = None

    @property
    def n_events(self) -> int:
        """Events the job processes."""
        return self.stop - self.start

    @property
    def read(self) -> ReadSpec:
        """How its packets read their events."""
        return ReadSpec(
            self.dataset.name,
            self.dataset.metadata,
            self.schema,
            self.columns,
            self.schema_options,
        )

    @property
    def output_of(self) -> str:
        """The id its output belongs to: its group's, or its own."""
        return self.group or self.id


def job_processor(spec: JobSpec) -> tuple[Processor, ShippedProcessor]:
    """The job's processor, loaded here (the master), and as it is sent to the workers."""
    if spec.loaded is not None:
        return spec.loaded
    proc = load_processor(spec.processor, spec.base_dir, spec.processor_args)
    return proc, ship(proc, spec.processor)


def processor_for(
    spec: JobSpec, loaded: dict[str, tuple[Processor, ShippedProcessor]]
) -> tuple[Processor | None, ShippedProcessor]:
    """What a job's packets run, and the master's copy: a confined job's processor as data
    (:attr:`JobSpec.code`, never loaded here: no master's copy), the one loaded when the jobs
    file was read, or one loaded now, once per processor and arguments (kept in
    ``loaded``)."""
    if spec.code is not None:
        return None, ShippedProcessor(spec.processor, key=spec.code.key)  # data, not code
    if spec.loaded is not None:
        return spec.loaded  # as it was when the job was read or submitted
    key = json.dumps(
        [spec.processor, str(spec.base_dir), dict(spec.processor_args)],
        sort_keys=True,
        default=repr,
    )
    if key not in loaded:
        loaded[key] = job_processor(spec)
    return loaded[key]


def _names(keys: Any) -> str:
    return ", ".join(sorted(map(str, keys)))


def _unknown(unknown: list[str], known: Iterable[str]) -> str:
    others = f"; also unknown: {', '.join(unknown[1:])}" if len(unknown) > 1 else ""
    return f"unknown field{others} (expected {_names(known)})"


def load_jobs(path: Path, *, skip_bad_files: bool = False) -> list[JobSpec]:
    """The jobs of ``path``, all checked, sorted by submission time (then order in the file).
    A fileset job becomes one job per dataset (ids ``<id>/<dataset>``, one output).

    Raises :class:`JobSpecError` for the first problem found, before anything is started.
    With ``skip_bad_files``, files that cannot be read are left out of their datasets and
    recorded in each job's ``skipped``."""
    where = str(path)
    doc = read_yaml(path, JobSpecError)
    if not isinstance(doc, Mapping):
        raise JobSpecError(f"{where}: expected a mapping with a 'jobs' list")
    unknown = sorted(map(str, set(doc) - TOP_KEYS))
    if unknown:
        raise JobSpecError(f"{where}: field '{unknown[0]}': {_unknown(unknown, TOP_KEYS)}")
    if "jobs" not in doc:
        raise JobSpecError(f"{where}: field 'jobs': missing")
    jobs = doc["jobs"]
    if not isinstance(jobs, list):
        raise JobSpecError(f"{where}: field 'jobs': expected a list, got {type(jobs).__name__}")
    if not jobs:
        raise JobSpecError(f"{where}: field 'jobs': empty")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise JobSpecError(f"{where}: field 'defaults': expected a mapping")
    bad = set(defaults) - DEFAULT_KEYS
    if bad:
        raise JobSpecError(
            f"{where}: field 'defaults': unknown {_names(bad)} (expected {_names(DEFAULT_KEYS)})"
        )
    base = path.parent
    skipped: Skipped | None = [] if skip_bad_files else None
    catalog: dict[str, Dataset] = {}
    if doc.get("catalog") is not None:
        if not isinstance(doc["catalog"], str):
            raise JobSpecError(f"{where}: field 'catalog': expected a path")
        cat = Path(doc["catalog"])
        try:
            catalog = load_catalog(cat if cat.is_absolute() else base / cat, skipped=skipped)
        except CatalogError as exc:
            raise JobSpecError(f"{where}: field 'catalog': {exc}") from exc
    out_dir = defaults.get("output_dir", doc.get("output_dir", "."))
    if not isinstance(out_dir, str):
        raise JobSpecError(f"{where}: field 'output_dir': expected a path")
    job_defaults = {k: v for k, v in defaults.items() if k != "output_dir"}
    seen: dict[str, int] = {}
    outputs: dict[Path, str] = {}
    specs: list[JobSpec] = []
    ctx = _Context(where, job_defaults, catalog, base, Path(out_dir), seen, skip_bad_files)
    for n, raw in enumerate(jobs, start=1):
        group = _job(ctx, n, raw)
        first = group[0]
        if first.output in outputs:
            raise JobSpecError(
                f"{where}: job {first.output_of!r} (#{n}): field 'output': "
                f"{first.output} is also job {outputs[first.output]!r}'s output"
            )
        outputs[first.output] = first.output_of
        specs.extend(group)
    order = sorted(range(len(specs)), key=lambda i: (specs[i].submit_s, i))
    return [specs[i] for i in order]


@dataclass(slots=True)
class _Context:
    """What every job of a file is checked against."""

    where: str
    defaults: Mapping[str, Any]
    catalog: Mapping[str, Dataset]
    base: Path
    out_dir: Path
    seen: dict[str, int]
    skip_bad_files: bool
    checked: dict[str, tuple[Processor, ShippedProcessor]] = field(default_factory=dict)
    """Processors already loaded and shipped (by reference and arguments)."""
    schemas: dict[tuple[str, str, str, SchemaOptions], str | None] = field(default_factory=dict)
    """Files already checked against a schema, and what was found."""


def _job(ctx: _Context, n: int, raw: Any) -> list[JobSpec]:
    """The job (or, for a fileset, the jobs: one per dataset) of entry ``n``."""
    where = ctx.where
    if not isinstance(raw, Mapping):
        raise JobSpecError(f"{where}: job #{n}: expected a mapping with 'id' and the job's fields")
    job_id = raw.get("id")
    label = f"{where}: job {job_id!r} (#{n})"

    def err(field: str, reason: str, traceback: str = "") -> JobSpecError:
        return JobSpecError(f"{label}: field '{field}': {reason}", traceback)

    if job_id is None:
        raise err("id", "missing")
    if not isinstance(job_id, str) or not job_id:
        raise err("id", f"expected a non-empty string, got {job_id!r}")
    if job_id in ctx.seen:
        raise err("id", f"also the id of job #{ctx.seen[job_id]}")
    ctx.seen[job_id] = n
    unknown = sorted(map(str, set(raw) - JOB_KEYS))
    if unknown:
        raise err(unknown[0], _unknown(unknown, JOB_KEYS))

    sources = [k for k in ("dataset", "files", "fileset") if k in raw]
    if not sources:  # only then may the defaults say which
        sources = [k for k in ("dataset", "files", "fileset") if k in ctx.defaults]
    if len(sources) > 1:
        raise err(sources[0], f"give one of 'dataset', 'files' or 'fileset', not {sources}")
    if not sources:
        raise err(
            "dataset",
            "missing: give 'dataset' (from the catalog), 'files' and 'tree', or 'fileset'",
        )
    job = dict(ctx.defaults)
    job.update(raw)
    skipped: Skipped | None = [] if ctx.skip_bad_files else None

    if sources[0] == "fileset":
        if "events" in raw:
            raise err("events", "not with 'fileset' (each dataset runs whole)")
        datasets = _fileset(job, ctx.base, err, skipped)
    else:
        datasets = {"": _dataset(job, sources[0] == "dataset", raw, ctx, err, skipped)}

    ref = job.get("processor")
    if ref is None:
        raise err("processor", "missing")
    if not isinstance(ref, str) or not ref.strip():
        raise err("processor", f"expected module:attr or a .py file, got {ref!r}")
    args = job.get("processor_args") or {}
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise err("processor_args", f"expected a mapping of argument names, got {args!r}")
    key = json.dumps([ref, dict(args)], sort_keys=True, default=repr)
    if key not in ctx.checked:
        ctx.checked[key] = check_processor(ref, ctx.base, args, err)

    schema = job.get("schema", "none")
    if schema not in SCHEMAS:
        raise err("schema", f"expected one of {', '.join(SCHEMAS)}, got {schema!r}")
    columns = check_columns(job.get("columns"), schema, datasets, err)
    schema_options = check_schema_options(job.get("schema_options"), schema, err)
    check_schema(schema, schema_options, datasets, err, ctx.schemas)
    output = check_output(job.get("output"), ctx.out_dir / f"{job_id}.pkl", ctx.base, err)

    submit = job.get("submit_s", 0.0)
    if (
        isinstance(submit, bool)
        or not isinstance(submit, int | float)
        or not math.isfinite(submit)
        or submit < 0
    ):
        raise err("submit_s", f"expected a number of seconds >= 0, got {submit!r}")
    owner = {}
    for name, default in (("user", "user"), ("user_group", "default")):
        value = job.get(name, default)
        if not isinstance(value, str) or not value.strip() or "," in value or "=" in value:
            raise err(name, f"expected a name (no ',' or '='), got {value!r}")
        owner[name] = value.strip()
    priority = job.get("priority", 0.0)
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int | float)
        or not math.isfinite(priority)
    ):
        raise err("priority", f"expected a number, got {priority!r}")
    common = {
        **owner,
        "priority": float(priority),
        "processor": ref.strip(),
        "output": output,
        "submit_s": float(submit),
        "base_dir": ctx.base,
        "processor_args": dict(args),
        "schema": schema,
        "schema_options": schema_options,
        "columns": columns,
        "skipped": tuple(skipped or ()),
        "loaded": ctx.checked[key],
    }
    if sources[0] != "fileset":
        dataset = datasets[""]
        start, stop = _events(job.get("events"), dataset, err)
        return [JobSpec(job_id, dataset, start, stop, **common)]
    specs = []
    for name, dataset in datasets.items():
        if dataset.n_events == 0:
            continue
        specs.append(
            JobSpec(f"{job_id}/{name}", dataset, 0, dataset.n_events, group=job_id, **common)
        )
    if not specs:
        raise err("fileset", "its datasets hold no events")
    return specs


def _fileset(
    job: Mapping[str, Any], base: Path, err: Err, skipped: Skipped | None
) -> dict[str, Dataset]:
    """The datasets of a job's ``fileset``: inline, or a JSON/YAML file of one."""
    value = job["fileset"]
    tree = job.get("tree")
    if tree is not None and (not isinstance(tree, str) or not tree):
        raise err("tree", f"expected a tree name, got {tree!r}")
    where, doc, root = "fileset", value, base
    if isinstance(value, str):
        path = Path(value) if Path(value).is_absolute() else base / value
        try:
            doc = read_yaml(path, CatalogError, missing="no such fileset file")
        except CatalogError as exc:
            raise err("fileset", str(exc)) from exc
        where, root = str(path), path.parent
    try:
        return fileset_datasets(doc, root, where, tree=tree, skipped=skipped)
    except CatalogError as exc:
        raise err("fileset", str(exc)) from exc


def _dataset(
    job: Mapping[str, Any],
    from_catalog: bool,
    raw: Mapping[str, Any],
    ctx: _Context,
    err: Err,
    skipped: Skipped | None,
) -> Dataset:
    """The job's dataset: a catalog's, or one opened from its file list."""
    if from_catalog:
        if "tree" in raw:
            raise err("tree", "only with 'files' (a catalog dataset names its own tree)")
        name = job["dataset"]
        if not isinstance(name, str):
            raise err("dataset", f"expected a dataset name, got {name!r}")
        if name not in ctx.catalog:
            known = f"known: {_names(ctx.catalog)}" if ctx.catalog else "no catalog given"
            raise err("dataset", f"unknown dataset {name!r} ({known})")
        return ctx.catalog[name]
    files = job["files"]
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise err("files", "expected a non-empty list of paths, globs or URLs")
    tree = job.get("tree")
    if tree is None:
        raise err("tree", "missing (required with 'files')")
    if not isinstance(tree, str) or not tree:
        raise err("tree", f"expected a tree name, got {tree!r}")
    try:
        if skipped is None:
            urls = expand_files(files, ctx.base)
        else:  # --skip-bad-files: a path that names nothing is left out too
            urls = []
            for pattern in files:
                try:
                    urls += expand_files([pattern], ctx.base)
                except DatasetError as exc:
                    skipped.append((pattern, str(exc)))
            if not urls:
                raise DatasetError(f"dataset {job['id']!r}: none of its files can be read")
        return open_dataset(str(job["id"]), urls, tree, skipped=skipped)
    except DatasetError as exc:
        raise err("files", str(exc)) from exc


def _events(ev: Any, dataset: Dataset, err: Err) -> tuple[int, int]:
    """The job's global event range, the whole dataset by default."""
    n = dataset.n_events
    if ev is None:
        if n == 0:
            raise err("dataset", f"dataset {dataset.name!r} has no events")
        return 0, n
    if (
        not isinstance(ev, list)
        or len(ev) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in ev)
    ):
        raise err("events", f"expected [start, stop] as two integers, got {ev!r}")
    start, stop = ev
    if start > stop:
        raise err("events", f"[{start}, {stop}) ends before it starts")
    if not 0 <= start <= stop <= n:
        raise err("events", f"[{start}, {stop}) is outside the dataset's events [0, {n})")
    if start == stop:
        raise err("events", f"[{start}, {stop}) is empty")
    return start, stop


def limit_chunks(specs: list[JobSpec], chunksize: int, maxchunks: int) -> list[JobSpec]:
    """Each job cut to its first ``maxchunks`` chunks (coffea's ``maxchunks``, for quick
    tests): chunks of at most ``chunksize`` events, cut at its files' ends."""
    out = []
    for spec in specs:
        stop, left = spec.start, maxchunks
        for _, a, b in spec.dataset.locate(spec.start, spec.stop):
            while a < b and left > 0:
                step = min(chunksize, b - a)
                a, stop, left = a + step, stop + step, left - 1
            if left == 0:
                break
        out.append(replace(spec, stop=stop))
    return out
