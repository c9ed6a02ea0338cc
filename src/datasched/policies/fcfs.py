"""First-come-first-served policies of ponce-hersch §3: processing farm, job splitting and
cache-oriented job splitting (Tables 1 and 2)."""

from __future__ import annotations

from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob
from datasched.core.scheduler import JobState, Policy, Scheduler
from datasched.policies.registry import register

__all__ = ["CacheOrientedSplitting", "JobSplitting", "ProcessingFarm", "cut_by_cache"]


@register
class ProcessingFarm(Policy):
    """A job runs whole on the first free node; no caching (ponce-hersch §3.1).

    The M/E_r/m queue of the paper; our reference for every other policy.
    """

    name = "farm"
    section = "ponce-hersch §3.1"
    summary = "processing farm: one job per node, first come first served, no cache"

    def job_arrived(self, sched: Scheduler, js: JobState) -> None:
        if sched.idle_nodes:
            sched.start(sched.new_subjob(js, js.job.data), sched.idle_nodes[0])
        else:
            sched.job_queue.append(js.job_id)

    def node_freed(self, sched: Scheduler, node: int, ended: JobState | None) -> None:
        if sched.job_queue:
            js = sched.jobs[sched.job_queue.popleft()]
            sched.start(sched.new_subjob(js, js.job.data), node)


def _multi_node_jobs(sched: Scheduler) -> list[JobState]:
    """Jobs running on two or more nodes (none of them being preempted), in arrival order."""
    out = []
    for js in sched.jobs.values():
        if len(js.running_nodes) >= 2 and all(sched.running[n].settled for n in js.running_nodes):
            out.append(js)
    return out


def _estimated_remaining_events(sched: Scheduler, js: JobState) -> int:
    now = sched.now
    left = sum(sched.running[n].estimated_remaining(now) for n in js.running_nodes)
    return left + sum(sj.data.length for sj in js.suspended)


def _job_to_shrink(sched: Scheduler) -> JobState | None:
    """The job with the largest number of nodes per event still to process (Table 1)."""
    best: JobState | None = None
    best_ratio = -1.0
    for js in _multi_node_jobs(sched):
        ratio = len(js.running_nodes) / max(_estimated_remaining_events(sched, js), 1)
        if ratio > best_ratio:
            best, best_ratio = js, ratio
    return best


def cut_by_cache(sched: Scheduler, data: IntervalSet) -> list[tuple[IntervalSet, int | None]]:
    """``data`` cut into runs each cached on one node (that node) or on none (``None``).

    The cutting of ponce-hersch Tables 2-4: "data processed by a given subjob should always
    either be fully cached on a node or not cached at all". Cached runs shorter than the
    minimal subjob count as not cached; a run cached on several nodes goes to an idle one.
    Everything cached on one node forms one piece; non-cached runs stay separate.
    """
    runs: list[tuple[int, int, int | None]] = []
    minimum = sched.min_subjob_events
    idle = set(sched.idle_nodes)
    for start, stop in data:
        for a, b, holders in sched.directory.holders(start, stop):
            holder = None
            if len(holders) == 1:
                (holder,) = holders
            elif holders:
                free = idle.intersection(holders)
                holder = min(free) if free else min(holders)
            if runs and runs[-1][2] == holder and runs[-1][1] == a:
                runs[-1] = (runs[-1][0], b, holder)
            else:
                runs.append((a, b, holder))
    merged: dict[int | None, list[tuple[int, int]]] = {}
    order: list[int | None] = []
    for a, b, holder in runs:
        if holder is not None and b - a < minimum:
            holder = None
        if holder not in merged:
            merged[holder] = []
            order.append(holder)
        merged[holder].append((a, b))
    out: list[tuple[IntervalSet, int | None]] = []
    for holder in order:
        ranges = IntervalSet.from_sorted(merged[holder])  # in event order, disjoint
        if holder is None:
            out.extend((IntervalSet.range(a, b), None) for a, b in ranges)
        else:
            out.append((ranges, holder))
    return out


def _split_saving(
    sched: Scheduler,
    node: int,
    data: IntervalSet,
    target: int,
    s_here: float | None = None,
) -> float:
    """Seconds saved by splitting ``data`` (to run on ``node``) with the free ``target``.

    Alone, ``node`` needs ``n * a`` seconds (``a`` its time per event); split so both parts
    end together, ``n * a * b / (a + b)``, with ``b`` the target's time per event. The saving,
    ``n * a * a / (a + b)``, is half the time when both read at the same speed, more when the
    target caches the data, less when the data is cached where it is (the split part would be
    read again from tertiary storage).
    """
    n = data.length
    if n < 2 * sched.min_subjob_events:
        return 0.0
    a = s_here if s_here is not None else sched.s_per_event_on(node, data)
    b = sched.s_per_event_on(target, data)
    return n * a * a / (a + b)


def _suspend_then_start(sched: Scheduler, node: int, sj: Subjob) -> None:
    """Preempt ``node``, park its remainder with its job, and run ``sj`` there instead."""
    victim = sched.running[node].subjob

    def then(remaining: IntervalSet) -> None:
        if remaining:
            vjs = sched.jobs[victim.job_id]
            sched.suspend(sched.new_subjob(vjs, remaining, cached_on=victim.cached_on))
        sched.start(sj, node)

    sched.preempt(node, then)


@register
class JobSplitting(Policy):
    """Jobs split over idle nodes, first come first served, no caching (ponce-hersch Table 1).

    Choices where the table is silent: the subjob suspended for a newcomer is the one of the
    chosen job with the least estimated work left (the least work parked); a freed node with
    nothing of its own job to resume takes a queued job, then any job's suspended subjob
    (oldest job first), and only then splits the largest running subjob.
    """

    name = "splitting"
    section = "ponce-hersch §3.2, Table 1"
    summary = "job splitting: subjobs of equal size on idle nodes, first come first served"

    def job_arrived(self, sched: Scheduler, js: JobState) -> None:
        idle = sched.idle_nodes
        if idle:
            parts = sched.split_even(js.job.data, len(idle))
            for part, node in zip(parts, list(idle), strict=False):
                sched.start(sched.new_subjob(js, part), node)
            return
        victim_job = _job_to_shrink(sched)
        if victim_job is None:
            sched.job_queue.append(js.job_id)
            return
        node = min(
            victim_job.running_nodes,
            key=lambda n: (sched.running[n].estimated_remaining(sched.now), n),
        )
        _suspend_then_start(sched, node, sched.new_subjob(js, js.job.data))

    def node_freed(self, sched: Scheduler, node: int, ended: JobState | None) -> None:
        if ended is not None and ended.job_id in sched.jobs and ended.suspended:
            sched.start(ended.suspended.popleft(), node)
            return
        if sched.job_queue:
            js = sched.jobs[sched.job_queue.popleft()]
            sched.start(sched.new_subjob(js, js.job.data), node)
            return
        for js in sched.jobs.values():
            if js.suspended:
                sched.start(js.suspended.popleft(), node)
                return
        victim = sched.longest_running()
        if victim is not None:
            sched.split_running(victim, node)


@register
class CacheOrientedSplitting(Policy):
    """Job splitting that caches what it reads and sends subjobs to the nodes caching their
    data (ponce-hersch §3.3, Table 2).

    A job is cut into pieces each fully cached on one node or not cached at all (cached pieces
    shorter than the minimal subjob size count as not cached). Where the table leaves room:
    an idle node with no piece of its own takes a non-cached piece, then a piece cached on a
    busy node; when idle nodes outnumber the pieces, the piece with the most estimated time is
    split so both parts end together; the caching benefit of splitting a running subjob for a
    freed node is the number of its remaining events that node caches.
    """

    name = "cache-splitting"
    section = "ponce-hersch §3.3, Table 2"
    summary = "cache-oriented job splitting: subjobs go where their data is cached, FIFO"
    cache_fill = True

    def __init__(self, *, fill_duplicates: bool = True) -> None:
        self.fill_duplicates = fill_duplicates

    # -- cutting a job by cache content -------------------------------------------------------

    # -- placing a job on free nodes ----------------------------------------------------------

    def _launch(self, sched: Scheduler, js: JobState, nodes: list[int]) -> None:
        """Give each of the free ``nodes`` the most suitable piece of ``js``; park the rest."""
        pieces = cut_by_cache(sched, js.job.data)
        plan: dict[int, tuple[IntervalSet, int | None]] = {}
        free = list(nodes)
        rest: list[tuple[IntervalSet, int | None]] = []
        for data, holder in pieces:
            if holder is not None and holder in free and holder not in plan:
                plan[holder] = (data, holder)
            else:
                rest.append((data, holder))
        free = [n for n in free if n not in plan]
        # Non-cached pieces first (largest first), then pieces cached on busy nodes.
        rest.sort(key=lambda p: (p[1] is not None, -p[0].length, p[0].start))
        while free and rest:
            plan[free.pop(0)] = rest.pop(0)
        # More free nodes than pieces: each free node joins the planned piece with the most
        # time per node, then each piece is cut so its nodes all end together (equal parts
        # for data nobody caches, as in Table 1).
        helpers: dict[int, list[int]] = {n: [] for n in plan}
        minimum = sched.min_subjob_events
        for target in free:

            def per_node_s(n: int) -> float:
                data = plan[n][0]
                if data.length < (len(helpers[n]) + 2) * minimum:
                    return -1.0
                return data.length * sched.s_per_event_on(n, data) / (len(helpers[n]) + 1)

            if not plan:
                break
            best = max(plan, key=lambda n: (per_node_s(n), -n))
            if per_node_s(best) < 0:
                break
            helpers[best].append(target)
        for node, extra in helpers.items():
            if not extra:
                continue
            data, holder = plan[node]
            rates = [1 / sched.s_per_event_on(n, data) for n in [node, *extra]]
            total = sum(rates)
            sizes = [round(data.length * r / total) for r in rates]
            sizes[0] = data.length - sum(sizes[1:])
            left = data
            for i, n in enumerate([node, *extra]):
                part, left = sched.cut(left, sizes[i]) if i < len(extra) else (left, IntervalSet())
                plan[n] = (part, holder if n == node else None)
        for node in sorted(plan):
            data, holder = plan[node]
            sched.start(sched.new_subjob(js, data, cached_on=holder), node)
        for data, holder in rest:
            sched.suspend(sched.new_subjob(js, data, cached_on=holder), front=False)

    # -- the table's three cases --------------------------------------------------------------

    def job_arrived(self, sched: Scheduler, js: JobState) -> None:
        if sched.idle_nodes:
            self._launch(sched, js, list(sched.idle_nodes))
            return
        multi = _multi_node_jobs(sched)
        if not multi:
            sched.job_queue.append(js.job_id)
            return
        pieces = cut_by_cache(sched, js.job.data)
        node = None
        # Best: a node running non-cached work of a multi-node job, caching data of the newcomer.
        multi_nodes = {n for m in multi for n in m.running_nodes}
        cached_here = [
            (data.length, holder)
            for data, holder in pieces
            if holder in multi_nodes and sched.running[holder].subjob.cached_on != holder
        ]
        if cached_here:
            node = max(cached_here, key=lambda c: (c[0], -c[1]))[1]
        else:
            victim_job = _job_to_shrink(sched)
            assert victim_job is not None
            node = min(
                victim_job.running_nodes,
                key=lambda n: (
                    sched.running[n].subjob.cached_on == n,
                    sched.running[n].estimated_remaining(sched.now),
                    n,
                ),
            )
        # The newcomer's piece for that node: cached there if any, else the largest non-cached.
        own = [p for p in pieces if p[1] == node]
        others = [p for p in pieces if p[1] != node]
        if own:
            first = own[0]
        else:
            others.sort(key=lambda p: (p[1] is not None, -p[0].length, p[0].start))
            first = others.pop(0)
        sj = sched.new_subjob(js, first[0], cached_on=first[1])
        for data, holder in others:
            sched.suspend(sched.new_subjob(js, data, cached_on=holder), front=False)
        _suspend_then_start(sched, node, sj)

    def node_freed(self, sched: Scheduler, node: int, ended: JobState | None) -> None:
        if ended is not None and ended.job_id in sched.jobs and ended.suspended:
            sj = self._most_cached(sched, node, list(ended.suspended))
            sched.take_suspended(ended, sj)
            sched.start(sj, node)
            return
        if sched.job_queue:
            js = sched.jobs[sched.job_queue.popleft()]
            self._launch(sched, js, [node])
            return
        waiting = [sj for js in sched.jobs.values() for sj in js.suspended]
        if waiting:
            sj = self._most_cached(sched, node, waiting)
            sched.take_suspended(sched.jobs[sj.job_id], sj)
            sched.start(sj, node)
            return
        self._split_for(sched, node)

    @staticmethod
    def _most_cached(sched: Scheduler, node: int, subjobs: list[Subjob]) -> Subjob:
        """The subjob with the most data cached on ``node`` (the earliest on ties)."""
        content = sched.directory.content(node)
        best = subjobs[0]
        best_n = best.data.overlap_length(content)
        for sj in subjobs[1:]:
            n = sj.data.overlap_length(content)
            if n > best_n:
                best, best_n = sj, n
        return best

    def _split_for(self, sched: Scheduler, node: int) -> None:
        """Split the running subjob whose split saves the most time (Table 2's "largest
        caching benefit"); the freed node takes what it caches of it, if enough, else a tail
        sized so both parts end together."""
        # Look at candidates from the longest remaining time down: a subjob with ``left_s``
        # seconds left saves at most ``left_s * a / (a + fastest)`` (as if the target cached
        # everything), at most ``left_s * slowest / (slowest + fastest)`` whatever its pace,
        # so the scan stops as soon as that cannot beat the best saving found: usually a few
        # candidates, not every node (ponce-hersch Table 5 scans them all).
        fastest = sched.fastest_s_per_event
        slowest = sched.slowest_s_per_event
        cap = slowest / (slowest + fastest)
        best: int | None = None
        best_saving = 0.0

        too_short_s = 2 * sched.min_subjob_events * fastest

        def visit(other: int, left_s: float) -> bool:
            nonlocal best, best_saving
            if left_s * cap <= best_saving or left_s < too_short_s:
                return False  # neither this nor any shorter one can do better
            r = sched.running[other]
            a = r.s_per_event
            if left_s * a / (a + fastest) <= best_saving:
                return True
            _, rest = r.subjob.data.head(r.estimated_done(sched.now))
            saving = _split_saving(sched, other, rest, node, a)
            if saving > best_saving or (
                saving == best_saving and best is not None and other < best
            ):
                best, best_saving = other, saving
            return True

        sched.scan_longest(visit)
        if best is None:
            return
        holder = best
        directory = sched.directory

        def pick(remaining: IntervalSet) -> IntervalSet:
            return (remaining & directory.content(node)) - directory.content(holder)

        sched.split_running(holder, node, pick)
