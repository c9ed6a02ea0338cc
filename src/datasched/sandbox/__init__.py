"""Where a user's code runs: a child process in a sandbox, never the process that asked.

The service runs what users send (an analysis processor, a STAR command) on the cluster's
workers, and checks a processor before it accepts a request. Neither the daemon nor a worker
imports that code or unpickles what it returns: each runs it in a child process, confined by
bubblewrap (new namespaces, an account without privileges, a clean environment, only the
job's own files, no network unless allowed, limits on memory, CPU time, wall time and
processes), and talks to it over a socket. What the child sends back is data: JSON and opaque
bytes, each bounded. See docs/security.md.

* :mod:`~datasched.sandbox.confine`: the confinement (:class:`Confinement`) and the
  bubblewrap command lines;
* :mod:`~datasched.sandbox.wire`: the messages between a child and its host;
* :mod:`~datasched.sandbox.child`: the program inside the sandbox;
* :mod:`~datasched.sandbox.host`: the host's side (a worker's, or the daemon's checks);
* :mod:`~datasched.sandbox.pool`: children kept between a job's packets;
* :mod:`~datasched.sandbox.run`: a command run once;
* :mod:`~datasched.sandbox.scratch`: sandboxes' scratch directories, and those of dead hosts
  removed.

Nothing here imports Dask or the service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasched.sandbox.confine import (
        Confinement,
        LimitReached,
        SandboxUnavailable,
        UserCode,
        sandbox_problem,
    )

__all__ = ["Confinement", "LimitReached", "SandboxUnavailable", "UserCode", "sandbox_problem"]


def __getattr__(name: str) -> Any:
    """The names above, from :mod:`~datasched.sandbox.confine` when first asked for: the
    program inside a sandbox imports this package, and every import there is paid at each
    sandbox's start (confine's own imports, ``subprocess`` and the rest, are about 18 ms)."""
    if name in __all__:
        from datasched.sandbox import confine

        return getattr(confine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
