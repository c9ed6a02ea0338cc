"""A checked request's files into elementary job requests (EJR), by the administrator's
policy (the paper's *JobRequestAnalyzer*, §3 of Mandapaka et al.).

* ``by-host`` (the paper's): files sorted by the host that holds them (the ``machine`` of
  their input, else the first node the catalog places them on), one EJR per host;
* ``by-cache``: each file to a node whose cache holds it now (the daemon's live view,
  ``cache_holders``, else the catalog's), the least loaded of them, so that the files held
  twice spread; the files no cache holds go together;
* ``by-policy`` (the default): one EJR over all the files, on no node: the core's policy
  splits it into subjobs and places them.

In every strategy a file is in exactly one EJR, and no EJR holds more than the cap
(``maxFilesPerProcess``: the request's, or the administrator's if smaller). The result is
deterministic: hosts sorted by name, files in the order the request names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from datasched.service.contracts import ElementaryJob, FileRef, MetaJobRequest, SplitStrategy

__all__ = ["split_request"]


def _cap(mjr: MetaJobRequest, max_files_per_job: int | None) -> int | None:
    caps = [c for c in (mjr.max_files_per_job, max_files_per_job) if c is not None]
    if any(c < 1 for c in caps):
        raise ValueError(f"max_files_per_job: expected an integer >= 1, got {min(caps)}")
    return min(caps) if caps else None


def _by_host(files: Sequence[FileRef]) -> dict[str | None, list[FileRef]]:
    groups: dict[str | None, list[FileRef]] = {}
    for f in files:
        groups.setdefault(f.cached_on[0] if f.cached_on else None, []).append(f)
    return groups


def _by_cache(
    files: Sequence[FileRef], cache_holders: Mapping[str, Sequence[str]]
) -> dict[str | None, list[FileRef]]:
    groups: dict[str | None, list[FileRef]] = {}
    # Files held by fewer nodes choose first, so that those held by many fill the gaps.
    holders = {f.url: sorted(set(cache_holders.get(f.url, f.cached_on))) for f in files}
    order = sorted(range(len(files)), key=lambda i: len(holders[files[i].url]))
    chosen: dict[int, str | None] = {}
    for i in order:
        nodes = holders[files[i].url]
        node = min(nodes, key=lambda n: (len(groups.get(n, [])), n)) if nodes else None
        chosen[i] = node
        groups.setdefault(node, []).append(files[i])
    # Back to the request's order of files within each node.
    return {node: [files[i] for i in range(len(files)) if chosen[i] == node] for node in groups}


def split_request(
    request_id: str,
    mjr: MetaJobRequest,
    files: Sequence[FileRef],
    strategy: SplitStrategy,
    *,
    cache_holders: Mapping[str, Sequence[str]] | None = None,
    max_files_per_job: int | None = None,
) -> list[ElementaryJob]:
    """The elementary jobs of request ``request_id`` over ``files`` (as
    :func:`~datasched.service.request.check_request` returns them), by ``strategy``.
    ``cache_holders``: for ``by-cache``, the nodes whose caches hold each file (by URL) now.
    ``max_files_per_job``: the administrator's cap, applied with the request's own."""
    cap = _cap(mjr, max_files_per_job)
    unique = list({f.url: f for f in reversed(files)}.values())[::-1]  # first of each URL
    if strategy is SplitStrategy.BY_HOST:
        groups = _by_host(unique)
    elif strategy is SplitStrategy.BY_CACHE:
        groups = _by_cache(unique, cache_holders or {})
    else:
        groups = {None: list(unique)} if unique else {}
    jobs: list[ElementaryJob] = []
    for node in sorted(groups, key=lambda n: (n is None, n or "")):
        members = groups[node]
        size = cap or len(members)
        for start in range(0, len(members), size):
            jobs.append(
                ElementaryJob(
                    request_id=request_id,
                    index=len(jobs),
                    files=tuple(members[start : start + size]),
                    work=mjr.work,
                    node=node,
                    user=mjr.username,
                    group=mjr.group or "",
                )
            )
    return jobs
