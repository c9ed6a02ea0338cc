"""The schedulers of a data grid (ranganathan-foster §3-§4): external schedulers, which pick
the site a user's job runs at, and dataset schedulers, which replicate the datasets a site
finds popular. JobAdaptive is the paper's future work (§6): data to the job or the job to
the data, chosen per job from the current link load and the dataset's size.

They do not fit the single-cluster :class:`~datasched.core.policy.Policy` contract (that one
places subjobs on the nodes of one cluster; these pick a site of many, or a site for a
replica), so they have a contract of their own: a read-only :class:`GridView` of the grid in,
a site out. They declare their parameters with the same :class:`~datasched.core.policy.Param`
and are listed by ``datasched policies`` beside the cluster policies, in a registry of their
own (:func:`grid_schedulers`), so the cluster policies' registry-wide tests do not run them on
a cluster they cannot schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from datasched.core.policy import DEFAULT, Param, ParamError, check_defaults, fill_defaults

__all__ = [
    "DATA_DO_NOTHING",
    "DATA_LEAST_LOADED",
    "DATA_RANDOM",
    "JOB_ADAPTIVE",
    "JOB_DATA_PRESENT",
    "JOB_LEAST_LOADED",
    "JOB_LOCAL",
    "JOB_RANDOM",
    "DatasetScheduler",
    "ExternalScheduler",
    "GridJob",
    "GridRng",
    "GridView",
    "build_grid_scheduler",
    "describe_grid_scheduler",
    "grid_schedulers",
]

JOB_RANDOM = "JobRandom"
JOB_LEAST_LOADED = "JobLeastLoaded"
JOB_DATA_PRESENT = "JobDataPresent"
JOB_LOCAL = "JobLocal"
JOB_ADAPTIVE = "JobAdaptive"
DATA_DO_NOTHING = "DataDoNothing"
DATA_RANDOM = "DataRandom"
DATA_LEAST_LOADED = "DataLeastLoaded"


@dataclass(frozen=True, slots=True)
class GridJob:
    """A user's job: it needs one dataset and computes for ``compute_s`` once it has it."""

    job_id: int
    user: int
    origin: int
    """The site of the user's external scheduler (where JobLocal runs it)."""
    dataset: int
    size_bytes: float
    compute_s: float


class GridView(Protocol):
    """What a grid scheduler may read of the grid (an information service's answers, §3)."""

    @property
    def n_sites(self) -> int: ...

    def waiting(self, site: int) -> int:
        """Jobs queued at ``site`` and not yet running: its load, as the paper defines it."""
        ...

    def least_waiting(self) -> Sequence[int]:
        """The sites with the fewest waiting jobs, in site order (kept as the queues change:
        the least loaded of all sites without a pass over them, docs/scale.md)."""
        ...

    def holders(self, dataset: int) -> Sequence[int]:
        """Sites holding a whole replica of ``dataset`` now, in site order."""
        ...

    def neighbours(self, site: int, k: int, without: Sequence[int] = ()) -> Sequence[int]:
        """The ``k`` sites nearest ``site`` by hops (0: every other site), nearest first,
        less those of ``without`` (read in place where it can: every other site but a few
        is not copied, docs/scale.md)."""
        ...

    def fetch_estimate_s(self, dataset: int, site: int) -> float:
        """How long bringing ``dataset`` to ``site`` would take at the links' current load
        (0 if it is there)."""
        ...

    def start_estimate_s(self, site: int) -> float:
        """How long a job sent to ``site`` now would wait for a processor."""
        ...


class GridRng(Protocol):
    """The engine's seeded random stream (policies import no ``random``)."""

    def randrange(self, stop: int, /) -> int: ...


def _least_loaded(sites: Sequence[int], view: GridView, rng: GridRng) -> int:
    """The site of ``sites`` with the fewest waiting jobs, ties broken at random."""
    low = min(view.waiting(s) for s in sites)
    best = [s for s in sites if view.waiting(s) == low]
    return best[rng.randrange(len(best))]


def _least_loaded_of_all(view: GridView, rng: GridRng) -> int:
    """:func:`_least_loaded` of every site, the same answer from the same draw, read from the
    view's index instead of a pass over the grid."""
    best = view.least_waiting()
    return best[rng.randrange(len(best))]


class ExternalScheduler:
    """Picks the site a job runs at (§3, "External Scheduler")."""

    name: ClassVar[str] = ""
    role: ClassVar[str] = "external"
    section: ClassVar[str] = "ranganathan-foster §4"
    summary: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        fill_defaults(cls, cls.params)  # see DEFAULT

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        raise NotImplementedError


class DatasetScheduler:
    """Counts, per site, the jobs that used each dataset there (its popularity, §4) and, when
    a count passes ``threshold``, names a site to replicate that dataset to; the count then
    starts again from zero."""

    name: ClassVar[str] = ""
    role: ClassVar[str] = "dataset"
    section: ClassVar[str] = "ranganathan-foster §4"
    summary: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    replicates: ClassVar[bool] = True

    def __init__(self, *, threshold: int, neighbours: int) -> None:
        self.threshold = threshold
        self.neighbours = neighbours
        self._popularity: dict[tuple[int, int], int] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        fill_defaults(cls, cls.params)  # see DEFAULT

    def popularity(self, site: int, dataset: int) -> int:
        return self._popularity.get((site, dataset), 0)

    def on_access(self, site: int, dataset: int, view: GridView, rng: GridRng) -> int | None:
        """A job at ``site`` starts on ``dataset``: the site to replicate it to, or None."""
        if not self.replicates:
            return None
        count = self._popularity.get((site, dataset), 0) + 1
        self._popularity[site, dataset] = count
        if count <= self.threshold:
            return None
        candidates = view.neighbours(site, self.neighbours, view.holders(dataset))
        if not candidates:
            return None  # every candidate holds it: try again at the next access
        self._popularity[site, dataset] = 0
        return self.target(candidates, view, rng)

    def target(self, candidates: Sequence[int], view: GridView, rng: GridRng) -> int:
        raise NotImplementedError


_THRESHOLD = Param(
    "threshold",
    int,
    5,
    "Replicate a dataset once this many jobs have used it at a site (since its last replica).",
    low=1,
    option=False,
    unit="jobs",
)


def _neighbours(default: int) -> Param:
    return Param(
        "neighbours",
        int,
        default,
        "Sites a replica may go to: the nearest this many by hops (0: every other site).",
        low=0,
        option=False,
        unit="sites",
    )


_registry: dict[str, type[ExternalScheduler] | type[DatasetScheduler]] = {}
G = TypeVar("G", bound=type[ExternalScheduler] | type[DatasetScheduler])


def _register(cls: G) -> G:
    """Class decorator: list a grid scheduler by its ``name``, its constructor's defaults
    only in its declaration, as a cluster policy's are (:func:`check_defaults`)."""
    check_defaults(cls, cls.params, f"grid scheduler {cls.name!r}")
    _registry[cls.name] = cls
    return cls


@_register
class JobRandom(ExternalScheduler):
    name = JOB_RANDOM
    summary = "Send each job to a site drawn at random."

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        return rng.randrange(view.n_sites)


@_register
class JobLeastLoaded(ExternalScheduler):
    name = JOB_LEAST_LOADED
    summary = "Send each job to the site with the fewest waiting jobs."

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        return _least_loaded_of_all(view, rng)


@_register
class JobDataPresent(ExternalScheduler):
    name = JOB_DATA_PRESENT
    summary = "Send each job to a site holding its dataset; the least loaded of those."

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        return _least_loaded(view.holders(job.dataset), view, rng)


@_register
class JobLocal(ExternalScheduler):
    name = JOB_LOCAL
    summary = "Run each job at its user's own site."

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        return job.origin


@_register
class JobAdaptive(ExternalScheduler):
    name = JOB_ADAPTIVE
    section = "ranganathan-foster §6 (future work)"
    summary = (
        "Per job, the least expected completion of: the least loaded site holding the data "
        "(job to data), the user's site or the least loaded site with a fetch at the links' "
        "current load (data to job)."
    )

    def choose(self, job: GridJob, view: GridView, rng: GridRng) -> int:
        holder = _least_loaded(view.holders(job.dataset), view, rng)
        options = [(view.start_estimate_s(holder), 0, holder)]  # the data is there
        for rank, site in enumerate((job.origin, _least_loaded_of_all(view, rng))):
            wait = max(view.start_estimate_s(site), view.fetch_estimate_s(job.dataset, site))
            options.append((wait, rank + 1, site))
        return min(options)[2]


@_register
class DataDoNothing(DatasetScheduler):
    name = DATA_DO_NOTHING
    summary = "No replication; data fetched for a job is cached (LRU) and serves as a replica."
    replicates = False

    def __init__(self) -> None:
        super().__init__(threshold=0, neighbours=0)  # it never replicates


@_register
class DataRandom(DatasetScheduler):
    name = DATA_RANDOM
    summary = "Replicate a dataset popular at a site to a random site."
    params = (_THRESHOLD, _neighbours(0))

    def __init__(self, *, threshold: int = DEFAULT, neighbours: int = DEFAULT) -> None:
        super().__init__(threshold=threshold, neighbours=neighbours)

    def target(self, candidates: Sequence[int], view: GridView, rng: GridRng) -> int:
        return candidates[rng.randrange(len(candidates))]


@_register
class DataLeastLoaded(DatasetScheduler):
    name = DATA_LEAST_LOADED
    summary = "Replicate a dataset popular at a site to its least loaded neighbour."
    params = (_THRESHOLD, _neighbours(5))

    def __init__(self, *, threshold: int = DEFAULT, neighbours: int = DEFAULT) -> None:
        super().__init__(threshold=threshold, neighbours=neighbours)

    def target(self, candidates: Sequence[int], view: GridView, rng: GridRng) -> int:
        return _least_loaded(candidates, view, rng)


def grid_schedulers() -> dict[str, type[ExternalScheduler] | type[DatasetScheduler]]:
    """Every grid scheduler, by name: the external ones, then the dataset ones."""
    return dict(_registry)


def build_grid_scheduler(name: str, **params: Any) -> ExternalScheduler | DatasetScheduler:
    """The named grid scheduler, its parameters checked against its declaration;
    ParamError names a bad one, ValueError an unknown name."""
    cls = _registry.get(name)
    if cls is None:
        raise ValueError(f"unknown grid scheduler {name!r} (known: {', '.join(_registry)})")
    declared = {p.name: p for p in cls.params}
    for key in params:
        if key not in declared:
            raise ParamError(name, key, f"{name} has no such parameter")
    values = {k: declared[k].check(name, v) for k, v in params.items()}
    return cls(**values)


def describe_grid_scheduler(name: str) -> Mapping[str, Any]:
    """A grid scheduler's declaration as JSON, like a cluster policy's."""
    cls = _registry[name]
    return {
        "name": cls.name,
        "role": cls.role,
        "section": cls.section,
        "summary": cls.summary,
        "params": [p.describe() for p in cls.params],
    }
