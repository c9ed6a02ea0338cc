"""The dashboard's tests' service: users ann and bob (physics) and root (administrator), a
dataset of two files of 40 events, the stand-in language and runner of tests/svc_support.py
(packets of 5 events, bob's jobs held running until cancelled) with a gate that can stop
every job half way, so that a browser sees progress before completion."""

from __future__ import annotations

import threading

from datasched.service.api.deps import ServiceState
from datasched.service.app import build_state
from datasched.service.catalog import Catalog
from datasched.service.contracts import FileRef, PacketDone
from datasched.service.store.db import Store
from datasched.service.users import add_user
from svc_support import FakeLanguage, FakeRunner

REQUEST = "title: dimuons\nprocessor: p\ninput:\n  - catalog: year=2004\n"
"""A request for both files: two elementary jobs, 80 events."""


HALF_WAY = 20
"""Where a closed gate stops each file: after its first 20 of 40 events."""


class GatedRunner(FakeRunner):
    """The stand-in runner; while ``gate`` is clear, no packet past entry ``HALF_WAY`` of a
    file is reported (the job waits, running)."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.gate = threading.Event()
        self.gate.set()

    def _report(self, packet: PacketDone) -> None:
        if packet.start >= HALF_WAY:
            self.gate.wait(timeout=30)
        super()._report(packet)


def dashboard_service(store: Store, *, delay_s: float = 0.0) -> tuple[ServiceState, dict[str, str]]:
    """The service over ``store`` and the users' tokens."""
    with store.session() as s:
        tokens = {
            "ann": add_user(s, "ann", "physics"),
            "bob": add_user(s, "bob", "physics"),
            "root": add_user(s, "root", "admins", admin=True),
        }
    Catalog(store).put(
        "auau200",
        [FileRef(f"/star/auau/{i}.root", 40, 4000, "T") for i in range(2)],
        {"year": 2004, "system": "AuAu", "energy": 200},
    )
    runner = GatedRunner(packet=5, delay_s=delay_s, hold_users=frozenset({"bob"}))
    return build_state(store, FakeLanguage(), runner=runner, period_s=0.05), tokens
