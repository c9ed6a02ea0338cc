"""One assignment batch of romosan's co-scheduling, as a min-cost flow (romosan, "Network Flow
Representation" and "LP Algorithm Implementation").

The paper's network: a source, one node per file requested by the queued jobs (supply: its
popularity N(f), the number of queued jobs needing it), one node per server with free slots
(capacity S(s)), a sink. An edge joins every file to every server, of capacity
min(N(f), S(s)) and cost C(f, s) = 0 where the server holds the file, l where another server
does, r where none does. The total flow is min(sum N, sum S): as many jobs as can start. The
exact objective (count an edge's cost once if it carries any flow) is NP-hard, so the paper
minimises its linear relaxation, sum flow(e) / capacity(e) x C(e): a min-cost flow with unit
cost C(e) / capacity(e).

:func:`solve` solves it with OR-Tools' min-cost flow on integer unit costs (exact: the costs
are scaled by the least common multiple of the capacities, which are at most a server's free
slots, whenever that stays below 2^40; rounded to 2^-31 of the largest cost otherwise). Two
networks give the same optimum:

* ``"full"``: the paper's, every file to every server (F x S edges);
* ``"grouped"`` (the default): the edges from a file to the servers that do not hold it all
  cost the file's l or r over min(N(f), S(s)), so servers of the same free-slot count are
  reached through one node per count. A file then has an edge to that node and one to each
  server holding it: F x (distinct free-slot counts) + holders edges instead of F x S. Any
  optimal flow of one maps onto the other at the same cost (a flow through the shared node
  to a server holding the file would cost more than the edge it has of its own, which has
  room whenever that flow can exist), so the optimum is the paper's; tests check it against
  the full network, a brute force and HiGHS (:func:`solve_lp`).

A batch's server may also stand for a *group* (``Batch.count``): that many servers of the
same free slots, none of them holding a file of the batch (nor any on its way there), which
every file reaches at the same cost. The units a group receives are the group's to share
among its servers, in any way that gives none more than its free slots: the cost is the same
whichever way (:meth:`Batch.expanded` is the batch with each group written out server by
server, for the checks). The policy sends its servers holding none of the queued files as
one group per free-slot count, so that a batch's network does not grow with the cluster.

Pure: no clock, no I/O. :mod:`datasched.policies.cosched.model` builds a :class:`Batch` from the
scheduler's state; ``datasched cosched solve`` reads one from JSON (:func:`parse_instance`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "NETWORKS",
    "Batch",
    "BatchFlow",
    "Instance",
    "InstanceError",
    "Network",
    "parse_instance",
    "solve",
    "solve_instance",
    "solve_lp",
]

Network = Literal["grouped", "full"]
NETWORKS: tuple[Network, ...] = ("grouped", "full")
IntArray = npt.NDArray[np.int64]
_EXACT_LIMIT = 2**40
"""Largest integer unit cost for which costs are scaled exactly."""
_ROUNDED_MAX = 2**31
"""Largest integer unit cost when they are rounded instead."""


@dataclass(frozen=True)
class Batch:
    """One batch of the paper's network, as arrays (files and servers by index).

    ``zero_ptr``/``zero_idx``: per file, the servers where it costs nothing (they hold it,
    or it is on its way there), in compressed rows. ``has_copy``: whether some server holds
    the file, so that elsewhere it costs ``local_cost`` (else ``remote_cost``). ``count``:
    per server, how many servers of ``free`` free slots it stands for (None: one each; see
    the module docstring on groups).
    """

    popularity: IntArray
    free: IntArray
    zero_ptr: IntArray
    zero_idx: IntArray
    has_copy: npt.NDArray[np.bool_]
    local_cost: float = 1.0
    remote_cost: float = 10.0
    count: IntArray | None = None

    @property
    def n_files(self) -> int:
        return len(self.popularity)

    @property
    def n_servers(self) -> int:
        """Servers of the batch, a group counting as one."""
        return len(self.free)

    @property
    def n_machines(self) -> int:
        """Servers of the paper's network: a group counts as its servers."""
        return self.n_servers if self.count is None else int(self.count.sum())

    @property
    def slots(self) -> IntArray:
        """Per server, the slots it offers: its free slots, times its servers for a group."""
        return self.free if self.count is None else self.free * self.count

    @property
    def total_flow(self) -> int:
        """min(queued jobs, free slots): the flow the paper requires."""
        return int(min(self.popularity.sum(), self.slots.sum()))

    def expanded(self) -> tuple[Batch, IntArray]:
        """The batch with every group written out as its servers, and for each of those
        servers the index of the batch's server it comes from."""
        if self.count is None:
            return self, np.arange(self.n_servers, dtype=np.int64)
        count = self.count
        origin = np.repeat(np.arange(self.n_servers, dtype=np.int64), count)
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        ptr = [0]
        idx: list[int] = []
        for f in range(self.n_files):
            for s in self.zero_idx[self.zero_ptr[f] : self.zero_ptr[f + 1]].tolist():
                idx += range(int(first[s]), int(first[s] + count[s]))
            ptr.append(len(idx))
        batch = Batch(
            popularity=self.popularity,
            free=self.free[origin],
            zero_ptr=np.array(ptr, dtype=np.int64),
            zero_idx=np.array(idx, dtype=np.int64),
            has_copy=self.has_copy,
            local_cost=self.local_cost,
            remote_cost=self.remote_cost,
        )
        return batch, origin

    def zero_pairs(self) -> tuple[IntArray, IntArray]:
        """(file, server) index pairs of cost 0."""
        files = np.repeat(np.arange(self.n_files, dtype=np.int64), np.diff(self.zero_ptr))
        return files, self.zero_idx

    def elsewhere_cost(self) -> npt.NDArray[np.float64]:
        """Per file, C on a server that does not hold it: l or r."""
        return np.where(self.has_copy, self.local_cost, self.remote_cost)


@dataclass(frozen=True)
class BatchFlow:
    """A batch's optimal flow: ``units[i]`` jobs of file ``files[i]`` to ``servers[i]``,
    sorted by file then server, and the paper's linear objective."""

    total_flow: int
    objective: float
    files: IntArray
    servers: IntArray
    units: IntArray


def solve(batch: Batch, network: Network = "grouped") -> BatchFlow:
    """The batch's min-cost flow of total min(sum N, sum S), solved with OR-Tools."""
    from ortools.graph.python import min_cost_flow

    total = batch.total_flow
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return BatchFlow(0, 0.0, empty, empty, empty)
    pop, free = batch.popularity, batch.free
    room = batch.slots
    n_f, n_s = batch.n_files, batch.n_servers
    files_at, servers_at = 2, 2 + n_f
    zf, zs = batch.zero_pairs()
    keep = (pop[zf] > 0) & (free[zs] > 0)
    zf, zs = zf[keep], zs[keep]
    code = np.where(batch.has_copy, 1, 2)
    tails: list[IntArray] = []
    heads: list[IntArray] = []
    caps: list[IntArray] = []
    codes: list[IntArray] = []

    def arcs(t: IntArray, h: IntArray, cap: IntArray, c: IntArray) -> tuple[int, int]:
        first = sum(len(x) for x in tails)
        tails.append(t)
        heads.append(h)
        caps.append(cap)
        codes.append(c)
        return first, first + len(t)

    files = np.arange(n_f, dtype=np.int64)
    servers = np.arange(n_s, dtype=np.int64)
    zeros_f = np.zeros(n_f, dtype=np.int64)
    zeros_s = np.zeros(n_s, dtype=np.int64)
    arcs(zeros_f, files + files_at, pop, zeros_f)
    arcs(servers + servers_at, zeros_s + 1, room, zeros_s)
    n_nodes = 2 + n_f + n_s
    classes: IntArray = np.zeros(0, dtype=np.int64)
    if network == "full":
        f = np.repeat(files, n_s)
        s = np.tile(servers, n_f)
        c = np.repeat(code, n_s)
        c[zf * n_s + zs] = 0
        edges = arcs(f + files_at, s + servers_at, np.minimum(pop[f], room[s]), c)
    elif network == "grouped":
        zero = arcs(zf + files_at, zs + servers_at, np.minimum(pop[zf], room[zs]), zs * 0)
        classes = np.unique(free[free > 0])
        class_at = n_nodes
        n_nodes += len(classes)
        k = len(classes)
        f = np.repeat(files, k)
        cls = np.tile(np.arange(k, dtype=np.int64), n_f)
        to_class = arcs(f + files_at, cls + class_at, pop[f], np.repeat(code, k))
        s_cls = np.searchsorted(classes, free)
        up = free > 0
        from_class = arcs(
            s_cls[up] + class_at,
            servers[up] + servers_at,
            room[up],
            np.zeros(int(up.sum()), np.int64),
        )
    else:
        raise ValueError(f"network: must be one of {', '.join(NETWORKS)}, got {network!r}")
    tail = np.concatenate(tails)
    head = np.concatenate(heads)
    cap = np.concatenate(caps)
    arc_code = np.concatenate(codes)
    # The capacity an arc's cost is scaled by: the paper's min(N(f), S(s)) on file-to-server
    # edges (S(s) a server's free slots, one of a group's for a group); min(N(f), count) on a
    # file's edge to the node of servers with ``count`` free.
    scale_cap = cap.copy()
    if network == "grouped":
        lo, hi = to_class
        scale_cap[lo:hi] = np.minimum(pop[f], classes[cls])
    else:
        lo, hi = edges
        scale_cap[lo:hi] = np.minimum(pop[f], free[s])
    unit = _unit_costs(arc_code, scale_cap, batch.local_cost, batch.remote_cost)
    mcf = min_cost_flow.SimpleMinCostFlow()
    mcf.add_arcs_with_capacity_and_unit_cost(
        tail.astype(np.int32), head.astype(np.int32), cap, unit
    )
    supplies = np.zeros(n_nodes, dtype=np.int64)
    supplies[0], supplies[1] = total, -total
    mcf.set_nodes_supplies(np.arange(n_nodes, dtype=np.int32), supplies)
    status = mcf.solve()
    if status != mcf.OPTIMAL:
        raise RuntimeError(f"min-cost flow: {status.name} (a batch always has a flow)")
    flow = np.asarray(mcf.flows(np.arange(len(tail), dtype=np.int32)), dtype=np.int64)
    if network == "full":
        lo, hi = edges
        used = np.nonzero(flow[lo:hi])[0]
        pf, ps, pu = f[used], s[used], flow[lo:hi][used]
    else:
        pf, ps, pu = _decompose(
            flow, zf, zs, zero, to_class, from_class, f, cls, servers[up], s_cls[up]
        )
    return _result(batch, total, pf, ps, pu)


def _decompose(
    flow: IntArray,
    zf: IntArray,
    zs: IntArray,
    zero: tuple[int, int],
    to_class: tuple[int, int],
    from_class: tuple[int, int],
    f: IntArray,
    cls: IntArray,
    class_servers: IntArray,
    server_cls: IntArray,
) -> tuple[IntArray, IntArray, IntArray]:
    """File-to-server units of a grouped flow: direct edges as they are; through each
    free-slot node, the files' units paired with the servers' in order (any pairing of an
    optimal flow is optimal: see the module docstring)."""
    lo, hi = zero
    used = np.nonzero(flow[lo:hi])[0]
    out_f, out_s, out_u = [zf[used]], [zs[used]], [flow[lo:hi][used]]
    lo, hi = to_class
    into = flow[lo:hi]
    lo2, hi2 = from_class
    outof = flow[lo2:hi2]
    for c in np.unique(cls[into > 0]):
        fi = np.nonzero((cls == c) & (into > 0))[0]
        si = np.nonzero((server_cls == c) & (outof > 0))[0]
        f_units = into[fi].tolist()
        s_units = outof[si].tolist()
        a = b = 0
        pf: list[int] = []
        ps: list[int] = []
        pu: list[int] = []
        while a < len(fi) and b < len(si):
            q = min(f_units[a], s_units[b])
            pf.append(int(f[fi[a]]))
            ps.append(int(class_servers[si[b]]))
            pu.append(q)
            f_units[a] -= q
            s_units[b] -= q
            a += f_units[a] == 0
            b += s_units[b] == 0
        out_f.append(np.array(pf, dtype=np.int64))
        out_s.append(np.array(ps, dtype=np.int64))
        out_u.append(np.array(pu, dtype=np.int64))
    return np.concatenate(out_f), np.concatenate(out_s), np.concatenate(out_u)


def _result(batch: Batch, total: int, pf: IntArray, ps: IntArray, pu: IntArray) -> BatchFlow:
    """Units merged per (file, server), sorted, with the paper's linear objective."""
    n_s = batch.n_servers
    key = pf * n_s + ps
    uniq, inverse = np.unique(key, return_inverse=True)
    units = np.bincount(inverse, weights=pu).astype(np.int64)
    files, servers = uniq // n_s, uniq % n_s
    if int(units.sum()) != total:
        raise RuntimeError(f"min-cost flow: {int(units.sum())} units placed, {total} required")
    return BatchFlow(total, objective(batch, files, servers, units), files, servers, units)


def objective(batch: Batch, files: IntArray, servers: IntArray, units: IntArray) -> float:
    """The paper's linear objective: sum of units / min(N(f), S(s)) x C(f, s)."""
    if len(files) == 0:
        return 0.0
    zf, zs = batch.zero_pairs()
    n_s = batch.n_servers
    is_zero = np.isin(files * n_s + servers, zf * n_s + zs)
    cost = np.where(is_zero, 0.0, batch.elsewhere_cost()[files])
    cap = np.minimum(batch.popularity[files], batch.free[servers])
    return float(np.sum(units / cap * cost))


def _unit_costs(code: IntArray, cap: IntArray, local: float, remote: float) -> IntArray:
    """Integer unit costs C / cap for arcs of cost code 0 (nothing), 1 (l) or 2 (r)."""
    lf = Fraction(local).limit_denominator(10**6)
    rf = Fraction(remote).limit_denominator(10**6)
    den = math.lcm(lf.denominator, rf.denominator)
    x = np.array([0, int(lf * den), int(rf * den)], dtype=np.int64)
    top = int(x.max())
    if top == 0:
        return np.zeros(len(code), dtype=np.int64)
    positive = cap[(code > 0) & (cap > 0)]
    scale = 1
    for c in np.unique(positive).tolist() if len(positive) else []:
        scale = math.lcm(scale, int(c))
        if scale * top > _EXACT_LIMIT:
            break
    safe = np.maximum(cap, 1)
    if scale * top <= _EXACT_LIMIT:
        return np.asarray(x[code] * (scale // safe), dtype=np.int64)
    return np.rint(x[code].astype(np.float64) * (_ROUNDED_MAX / top) / safe).astype(np.int64)


def solve_lp(batch: Batch) -> tuple[float, npt.NDArray[np.float64]]:
    """The same batch as the paper's linear program on the full network, solved with HiGHS
    (the cross-check of :func:`solve`): its optimal objective and the flow, files x servers
    (a group's servers one by one: :meth:`Batch.expanded`).

    Needs ``highspy`` (the ``dev`` extra); meant for tests and benchmarks."""
    import highspy

    batch, _ = batch.expanded()
    pop, free = batch.popularity, batch.free
    n_f, n_s = batch.n_files, batch.n_servers
    total = batch.total_flow
    flows = np.zeros((n_f, n_s))
    if total == 0:
        return 0.0, flows
    f = np.repeat(np.arange(n_f), n_s)
    s = np.tile(np.arange(n_s), n_f)
    cap = np.minimum(pop[f], free[s]).astype(np.float64)
    cost = np.repeat(batch.elsewhere_cost(), n_s)
    zf, zs = batch.zero_pairs()
    cost[zf * n_s + zs] = 0.0
    per_unit = np.divide(cost, cap, out=np.zeros_like(cost), where=cap > 0)
    n_col = n_f * n_s
    lp = highspy.HighsLp()
    lp.num_col_ = n_col
    lp.num_row_ = n_f + n_s + 1
    lp.col_cost_ = per_unit
    lp.col_lower_ = np.zeros(n_col)
    lp.col_upper_ = cap
    lp.row_lower_ = np.concatenate([np.zeros(n_f + n_s), [float(total)]])
    lp.row_upper_ = np.concatenate([pop, free, [total]]).astype(np.float64)
    matrix = lp.a_matrix_
    matrix.format_ = highspy.MatrixFormat.kColwise
    matrix.num_col_, matrix.num_row_ = n_col, n_f + n_s + 1
    matrix.start_ = np.arange(0, 3 * n_col + 1, 3, dtype=np.int32)
    index = np.stack([f, n_f + s, np.full(n_col, n_f + n_s)], axis=1).ravel()
    matrix.index_ = index.astype(np.int32)
    matrix.value_ = np.ones(3 * n_col)
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS: {h.getModelStatus()}")
    values = np.asarray(h.getSolution().col_value, dtype=np.float64)
    return float(h.getInfo().objective_function_value), values.reshape(n_f, n_s)


# -- one batch as JSON (``datasched cosched solve``) ------------------------------------------


class InstanceError(ValueError):
    """A bad instance; ``field`` names the bad field (``files[2].popularity``)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class Instance:
    """A batch read from JSON, with the ids its files and servers were given."""

    file_ids: list[Any]
    server_ids: list[Any]
    batch: Batch


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InstanceError(field, f"expected a number, got {value!r}")
    if value < 0:
        raise InstanceError(field, f"must not be negative, got {value!r}")
    return float(value)


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InstanceError(field, f"expected a whole number, got {value!r}")
    if value < 0:
        raise InstanceError(field, f"must not be negative, got {value!r}")
    return value


def _id(value: Any, field: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InstanceError(field, f"expected a text or whole-number id, got {value!r}")
    return value


def _list(doc: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise InstanceError(key, "expected a list")
    return value


def parse_instance(doc: Any) -> Instance:
    """A batch from ``{"local_cost", "remote_cost", "files": [{"id", "popularity",
    "holders"}], "servers": [{"id", "free_slots"}]}``; InstanceError naming the bad field."""
    if not isinstance(doc, dict):
        raise InstanceError("instance", "expected a JSON object")
    local = _number(doc.get("local_cost"), "local_cost")
    remote = _number(doc.get("remote_cost"), "remote_cost")
    server_ids: list[Any] = []
    free: list[int] = []
    index: dict[Any, int] = {}
    for i, s in enumerate(_list(doc, "servers")):
        where = f"servers[{i}]"
        if not isinstance(s, dict):
            raise InstanceError(where, "expected an object")
        sid = _id(s.get("id"), f"{where}.id")
        if sid in index:
            raise InstanceError(f"{where}.id", f"server {sid!r} is listed twice")
        index[sid] = i
        server_ids.append(sid)
        free.append(_count(s.get("free_slots"), f"{where}.free_slots"))
    file_ids: list[Any] = []
    pop: list[int] = []
    ptr = [0]
    idx: list[int] = []
    seen: set[Any] = set()
    for i, f in enumerate(_list(doc, "files")):
        where = f"files[{i}]"
        if not isinstance(f, dict):
            raise InstanceError(where, "expected an object")
        fid = _id(f.get("id"), f"{where}.id")
        if fid in seen:
            raise InstanceError(f"{where}.id", f"file {fid!r} is listed twice")
        seen.add(fid)
        file_ids.append(fid)
        pop.append(_count(f.get("popularity"), f"{where}.popularity"))
        holders = f.get("holders", [])
        if not isinstance(holders, list):
            raise InstanceError(f"{where}.holders", "expected a list of server ids")
        mine: set[int] = set()
        for j, h in enumerate(holders):
            if isinstance(h, bool) or h not in index:
                raise InstanceError(f"{where}.holders[{j}]", f"unknown server {h!r}")
            mine.add(index[h])
        idx += sorted(mine)
        ptr.append(len(idx))
    batch = Batch(
        popularity=np.array(pop, dtype=np.int64),
        free=np.array(free, dtype=np.int64),
        zero_ptr=np.array(ptr, dtype=np.int64),
        zero_idx=np.array(idx, dtype=np.int64),
        has_copy=np.diff(np.array(ptr, dtype=np.int64)) > 0,
        local_cost=local,
        remote_cost=remote,
    )
    return Instance(file_ids, server_ids, batch)


def solve_instance(instance: Instance, network: Network = "grouped") -> dict[str, Any]:
    """``{"total_flow", "objective", "flow": [[file_id, server_id, units], ...]}``."""
    result = solve(instance.batch, network)
    return {
        "total_flow": result.total_flow,
        "objective": result.objective,
        "flow": [
            [instance.file_ids[f], instance.server_ids[s], int(u)]
            for f, s, u in zip(
                result.files.tolist(), result.servers.tolist(), result.units.tolist(), strict=True
            )
        ],
    }
