"""What the tests of sandboxed user code share: the account jobs run as, and whether a
sandbox can be made here.

Sandboxed tests need bubblewrap (Debian's ``bubblewrap``). Without it they skip, unless
``DATASCHED_REQUIRE_SANDBOX=1`` (CI), which makes them fail. As root, jobs run as an account
without privileges, ``datasched-test``, made here if this machine has none.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from typing import Any

import pytest

from datasched.sandbox.confine import Confinement, sandbox_problem

__all__ = ["TEST_ACCOUNT", "confinement", "job_account", "require_sandbox"]

TEST_ACCOUNT = "datasched-test"


def require_sandbox() -> None:
    """Skip (or, with ``DATASCHED_REQUIRE_SANDBOX=1``, fail) where no sandbox can be made."""
    problem = sandbox_problem()
    if problem is None:
        return
    if os.environ.get("DATASCHED_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"a sandbox is required (DATASCHED_REQUIRE_SANDBOX=1): {problem}")
    pytest.skip(problem)


def job_account() -> str | None:
    """The account sandboxed jobs run as: as root, :data:`TEST_ACCOUNT` (made if missing);
    else None (the tests' own account, which is not the daemon's in a real deployment)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(TEST_ACCOUNT)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                TEST_ACCOUNT,
            ],
            check=True,
            capture_output=True,
        )
    return TEST_ACCOUNT


def confinement(**kw: Any) -> Confinement:
    """A sandbox for the tests (bubblewrap required), as :func:`job_account`."""
    require_sandbox()
    return Confinement(run_as=job_account(), **kw)
