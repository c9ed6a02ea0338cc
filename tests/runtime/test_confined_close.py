"""A confined worker's close ends its process and leaves the reaping to asyncio, which
started it: reaped there, it is not reaped twice, and asyncio logs no "Unknown child
process" on the daemon's terminal (datasched.runtime.confined)."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from datasched.runtime.confined import ConfinedWorker
from datasched.sandbox.confine import Confinement

# The child alone: its descendants (bubblewrap's nanny and worker) are waited for apart,
# by polling, and a descendant that outlives its parent waits to be reaped by another.
CHILD = "import time; time.sleep(60)"


async def _start_and_close(n: int) -> list[int | None]:
    codes = []
    for i in range(n):
        w = ConfinedWorker(
            "tls://127.0.0.1:1", str(i), confine=Confinement(), nthreads=1, memory_limit="1GiB"
        )
        w.process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, start_new_session=True
        )
        await asyncio.sleep(0.1)
        proc = w.process
        await w.close()
        codes.append(proc.returncode)
        assert w.process is None
    return codes


def test_closing_ends_the_tree_without_asyncio_losing_its_child(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        codes = asyncio.run(_start_and_close(8))
    assert all(code is not None for code in codes)  # reaped, by asyncio
    assert 255 not in codes  # not the placeholder asyncio reports for a child lost
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]
