"""The ``datasched`` command line: simulate policies, find maximal loads, sweep, reproduce
the papers, run real analyses on Dask workers.

Every command explains itself with ``--help``. Bad input gets one line on stderr naming the
option (or the file's line and field) and the reason, exit code 2, no traceback, and nothing
is written. The root command is :data:`datasched.cli.app.app`; each module of this package
registers one group of commands on it.
"""

from __future__ import annotations

import datasched.cli.cosched
import datasched.cli.demo
import datasched.cli.grid
import datasched.cli.info
import datasched.cli.proof
import datasched.cli.request
import datasched.cli.runtime

# The command modules register their commands on ``app`` when imported, in the order
# ``--help`` lists them: the simulator's first, then the runtime's.
import datasched.cli.sim
import datasched.cli.study

# isort: split
# The service's commands come last: the client's, then the daemon and its administration.
import datasched.cli.catalog
import datasched.cli.client
import datasched.cli.demo_service
import datasched.cli.groups
import datasched.cli.serve
import datasched.cli.users
import datasched.cli.whatif  # noqa: F401
from datasched.cli.app import app

__all__ = ["app"]
