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

Everything is checked before anything starts; a problem is one :class:`JobSpecError` naming
the file, the job and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasched.runtime.dataset import (
    CatalogError,
    Dataset,
    DatasetError,
    expand_files,
    load_catalog,
    open_dataset,
    read_yaml,
)
from datasched.runtime.processor import OUTPUT_SUFFIXES, ProcessorError, load_processor

__all__ = ["JobSpec", "JobSpecError", "load_jobs"]

JOB_KEYS = frozenset(
    {"id", "dataset", "files", "tree", "events", "processor", "output", "submit_s"}
)
DEFAULT_KEYS = (JOB_KEYS - {"id"}) | {"output_dir"}
TOP_KEYS = frozenset({"catalog", "defaults", "jobs", "output_dir"})


class JobSpecError(ValueError):
    """A jobs file is wrong; the message names the file, the job and the field."""


_Err = Callable[[str, str], JobSpecError]
"""Makes the error for ``(field, reason)`` of the job being checked."""


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
    base_dir: Path = Path(".")
    """Where relative processor paths are found (the jobs file's directory)."""

    @property
    def n_events(self) -> int:
        """Events the job processes."""
        return self.stop - self.start


def _names(keys: Any) -> str:
    return ", ".join(sorted(map(str, keys)))


def _unknown(unknown: list[str], known: Iterable[str]) -> str:
    others = f"; also unknown: {', '.join(unknown[1:])}" if len(unknown) > 1 else ""
    return f"unknown field{others} (expected {_names(known)})"


def load_jobs(path: Path) -> list[JobSpec]:
    """The jobs of ``path``, all checked, sorted by submission time (then order in the file).

    Raises :class:`JobSpecError` for the first problem found, before anything is started."""
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
    catalog: dict[str, Dataset] = {}
    if doc.get("catalog") is not None:
        if not isinstance(doc["catalog"], str):
            raise JobSpecError(f"{where}: field 'catalog': expected a path")
        cat = Path(doc["catalog"])
        try:
            catalog = load_catalog(cat if cat.is_absolute() else base / cat)
        except CatalogError as exc:
            raise JobSpecError(f"{where}: field 'catalog': {exc}") from exc
    out_dir = defaults.get("output_dir", doc.get("output_dir", "."))
    if not isinstance(out_dir, str):
        raise JobSpecError(f"{where}: field 'output_dir': expected a path")
    job_defaults = {k: v for k, v in defaults.items() if k != "output_dir"}
    seen: dict[str, int] = {}
    outputs: dict[Path, str] = {}
    specs = []
    for n, raw in enumerate(jobs, start=1):
        spec = _job(where, n, raw, job_defaults, catalog, base, Path(out_dir), seen)
        if spec.output in outputs:
            raise JobSpecError(
                f"{where}: job {spec.id!r} (#{n}): field 'output': "
                f"{spec.output} is also job {outputs[spec.output]!r}'s output"
            )
        outputs[spec.output] = spec.id
        specs.append(spec)
    order = sorted(range(len(specs)), key=lambda i: (specs[i].submit_s, i))
    return [specs[i] for i in order]


def _job(
    where: str,
    n: int,
    raw: Any,
    defaults: Mapping[str, Any],
    catalog: Mapping[str, Dataset],
    base: Path,
    out_dir: Path,
    seen: dict[str, int],
) -> JobSpec:
    if not isinstance(raw, Mapping):
        raise JobSpecError(f"{where}: job #{n}: expected a mapping with 'id' and the job's fields")
    job_id = raw.get("id")
    label = f"{where}: job {job_id!r} (#{n})"

    def err(field: str, reason: str) -> JobSpecError:
        return JobSpecError(f"{label}: field '{field}': {reason}")

    if job_id is None:
        raise err("id", "missing")
    if not isinstance(job_id, str) or not job_id:
        raise err("id", f"expected a non-empty string, got {job_id!r}")
    if job_id in seen:
        raise err("id", f"also the id of job #{seen[job_id]}")
    seen[job_id] = n
    unknown = sorted(map(str, set(raw) - JOB_KEYS))
    if unknown:
        raise err(unknown[0], _unknown(unknown, JOB_KEYS))

    has_dataset, has_files = "dataset" in raw, "files" in raw
    if not has_dataset and not has_files:  # only then may the defaults say which
        has_dataset, has_files = "dataset" in defaults, "files" in defaults
    if has_dataset and has_files:
        raise err("dataset", "give either 'dataset' or 'files', not both")
    if not has_dataset and not has_files:
        raise err("dataset", "missing: give 'dataset' (from the catalog) or 'files' and 'tree'")
    job = dict(defaults)
    job.update(raw)

    dataset = _dataset(job, has_dataset, raw, catalog, base, err)
    start, stop = _events(job.get("events"), dataset, err)

    ref = job.get("processor")
    if ref is None:
        raise err("processor", "missing")
    if not isinstance(ref, str) or not ref.strip():
        raise err("processor", f"expected module:attr or a .py file, got {ref!r}")
    try:
        load_processor(ref, base)
    except ProcessorError as exc:
        raise err("processor", str(exc)) from exc

    raw_output = job.get("output", str(out_dir / f"{job_id}.pkl"))
    if not isinstance(raw_output, str) or not raw_output:
        raise err("output", f"expected a path, got {raw_output!r}")
    output = Path(raw_output)
    if not output.is_absolute():
        output = base / output
    if output.suffix not in OUTPUT_SUFFIXES:
        raise err("output", f"expected a {', '.join(OUTPUT_SUFFIXES)} file, got {output.name}")

    submit = job.get("submit_s", 0.0)
    if (
        isinstance(submit, bool)
        or not isinstance(submit, int | float)
        or not math.isfinite(submit)
        or submit < 0
    ):
        raise err("submit_s", f"expected a number of seconds >= 0, got {submit!r}")
    return JobSpec(job_id, dataset, start, stop, ref, output, float(submit), base)


def _dataset(
    job: Mapping[str, Any],
    from_catalog: bool,
    raw: Mapping[str, Any],
    catalog: Mapping[str, Dataset],
    base: Path,
    err: _Err,
) -> Dataset:
    """The job's dataset: a catalog's, or one opened from its file list."""
    if from_catalog:
        if "tree" in raw:
            raise err("tree", "only with 'files' (a catalog dataset names its own tree)")
        name = job["dataset"]
        if not isinstance(name, str):
            raise err("dataset", f"expected a dataset name, got {name!r}")
        if name not in catalog:
            known = f"known: {_names(catalog)}" if catalog else "no catalog given"
            raise err("dataset", f"unknown dataset {name!r} ({known})")
        return catalog[name]
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
        return open_dataset(str(job["id"]), expand_files(files, base), tree)
    except DatasetError as exc:
        raise err("files", str(exc)) from exc


def _events(ev: Any, dataset: Dataset, err: _Err) -> tuple[int, int]:
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
