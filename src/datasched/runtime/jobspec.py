"""Jobs described in YAML: what data, which processor, where the result goes, and when.

Everything is checked before anything starts; a problem is one :class:`JobSpecError` naming
the file, the job and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from datasched.runtime.dataset import (
    CatalogError,
    Dataset,
    DatasetError,
    expand_files,
    load_catalog,
    open_dataset,
)
from datasched.runtime.processor import ProcessorError, load_processor

__all__ = ["JobSpec", "JobSpecError", "load_jobs"]

JOB_KEYS = {"id", "dataset", "files", "tree", "events", "processor", "output", "submit_s"}
TOP_KEYS = {"catalog", "defaults", "jobs", "output_dir"}
OUTPUT_SUFFIXES = (".pkl", ".pickle", ".root")


class JobSpecError(ValueError):
    """A jobs file is wrong; the message names the file, the job and the field."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a jobs file, checked."""

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
        return self.stop - self.start


def load_jobs(path: Path) -> list[JobSpec]:
    """The jobs of ``path``, sorted by submission time (then order in the file)."""
    where = str(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise JobSpecError(f"{where}: no such file") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise JobSpecError(f"{where}{line}: not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise JobSpecError(f"{where}: expected a mapping with a 'jobs' list")
    unknown = set(doc) - TOP_KEYS
    if unknown:
        raise JobSpecError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    base = path.parent
    catalog: dict[str, Dataset] = {}
    if doc.get("catalog") is not None:
        cat = Path(str(doc["catalog"]))
        try:
            catalog = load_catalog(cat if cat.is_absolute() else base / cat)
        except CatalogError as exc:
            raise JobSpecError(f"{where}: field 'catalog': {exc}") from exc
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise JobSpecError(f"{where}: field 'defaults': expected a mapping")
    bad = set(defaults) - (JOB_KEYS - {"id"}) - {"output_dir"}
    if bad:
        raise JobSpecError(f"{where}: field 'defaults': unknown {', '.join(sorted(bad))}")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise JobSpecError(f"{where}: field 'jobs': missing or empty")
    out_dir = defaults.get("output_dir", doc.get("output_dir", "."))
    seen: set[str] = set()
    specs = []
    for n, raw in enumerate(jobs, start=1):
        specs.append(_job(where, n, raw, defaults, catalog, base, Path(str(out_dir)), seen))
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
    seen: set[str],
) -> JobSpec:
    if not isinstance(raw, Mapping):
        raise JobSpecError(f"{where}: job #{n}: expected a mapping")
    job_id = raw.get("id")
    label = f"{where}: job {job_id!r} (#{n})"

    def err(field: str, reason: str) -> JobSpecError:
        return JobSpecError(f"{label}: field '{field}': {reason}")

    if not isinstance(job_id, str) or not job_id:
        raise err("id", "missing or not a string")
    if job_id in seen:
        raise err("id", "used by an earlier job")
    seen.add(job_id)
    unknown = set(raw) - JOB_KEYS
    if unknown:
        raise err(sorted(map(str, unknown))[0], "unknown field")
    job = {k: v for k, v in defaults.items() if k != "output_dir"}
    job.update(raw)
    if ("dataset" in job) == ("files" in job):
        raise err("dataset", "give either 'dataset' or 'files'")
    if "dataset" in job:
        name = str(job["dataset"])
        if name not in catalog:
            known = ", ".join(sorted(catalog)) or "no catalog given"
            raise err("dataset", f"unknown dataset {name!r} ({known})")
        dataset = catalog[name]
    else:
        files = job["files"]
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files:
            raise err("files", "expected a list of paths, globs or URLs")
        tree = job.get("tree")
        if not isinstance(tree, str) or not tree:
            raise err("tree", "required with 'files'")
        try:
            dataset = open_dataset(job_id, expand_files([str(f) for f in files], base), tree)
        except DatasetError as exc:
            raise err("files", str(exc)) from exc
    start, stop = 0, dataset.n_events
    if job.get("events") is not None:
        ev = job["events"]
        if (
            not isinstance(ev, list)
            or len(ev) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in ev)
        ):
            raise err("events", "expected [start, stop] as two whole numbers")
        start, stop = ev
        if not 0 <= start < stop <= dataset.n_events:
            raise err("events", f"[{start}, {stop}) is empty or outside [0, {dataset.n_events})")
    ref = job.get("processor")
    if not isinstance(ref, str) or not ref:
        raise err("processor", "missing")
    try:
        load_processor(ref, base)
    except ProcessorError as exc:
        raise err("processor", str(exc)) from exc
    output = Path(str(job.get("output", out_dir / f"{job_id}.pkl")))
    if not output.is_absolute():
        output = base / output
    if output.suffix not in OUTPUT_SUFFIXES:
        raise err("output", f"expected a {', '.join(OUTPUT_SUFFIXES)} file, got {output.name}")
    submit = job.get("submit_s", 0.0)
    if isinstance(submit, bool) or not isinstance(submit, int | float) or submit < 0:
        raise err("submit_s", f"expected seconds >= 0, got {submit!r}")
    return JobSpec(job_id, dataset, start, stop, ref, output, float(submit), base)
