"""Shared by the runtime tests (importable: ``tests`` is on the path)."""

from __future__ import annotations

import socket
from pathlib import Path

N_EVENTS = 12_000
N_FILES = 6


def reference_counts(catalog: Path, start: int, stop: int) -> list[float]:
    """The dimuon-mass histogram of events [start, stop), computed in this process."""
    from datasched.runtime.dataset import load_catalog, read_events
    from datasched.runtime.demodata import DimuonMass

    ds = load_catalog(catalog)["zmumu"]
    proc = DimuonMass()
    total = None
    for i, a, b in ds.locate(start, stop):
        f = ds.files[i]
        h = proc.process(read_events(f.url, f.tree, a, b))["mass"]
        total = h if total is None else total + h
    assert total is not None
    return [float(x) for x in total.values()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
