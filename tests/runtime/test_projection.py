"""Reading only the branches a processor uses, on a 947-branch CMS NanoAOD file: flat arrays
read lazily (or only the ``columns`` named), NanoEvents read lazily by coffea, and the bytes
read per packet that each reports."""

from __future__ import annotations

from pathlib import Path

import awkward as ak
import pytest

from datasched.runtime.events import EventsError, ReadSpec, branch_bytes, open_events

NANO = str(
    Path(__file__).resolve().parent.parent / "data" / "nanoAOD_2015_CMS_Open_Data_ttbar.root"
)


def all_branches_bytes(start: int, stop: int) -> int:
    import uproot

    with uproot.open(NANO) as f:
        tree = f["Events"]
        return branch_bytes(tree, list(tree.keys()), start, stop)


def test_a_packet_reads_only_the_branches_it_uses() -> None:
    every = all_branches_bytes(0, 100)
    with open_events(NANO, NANO, "Events", ReadSpec(), 0, 100) as opened:
        assert len(opened.events.fields) == 947  # all there, none read yet
        pt = ak.sum(opened.events.Muon_pt)
        used = opened.bytes_read()
    assert used > 0
    assert every >= 10 * used  # the bar: at least 10x fewer bytes
    with open_events(NANO, NANO, "Events", ReadSpec(), 0, 100) as opened:
        ak.materialize(opened.events)  # a processor that reads everything
        assert opened.bytes_read() == every
        assert ak.sum(opened.events.Muon_pt) == pt


def test_columns_name_what_is_read() -> None:
    read = ReadSpec(columns=("Muon_pt", "Muon_eta*", "nMuon"))
    with open_events(NANO, NANO, "Events", read, 10, 60) as opened:
        assert set(opened.events.fields) == {"Muon_pt", "Muon_eta", "nMuon"}
        assert len(opened.events) == 50
        ak.materialize(opened.events)
        assert opened.bytes_read() < all_branches_bytes(10, 60) / 10


def test_nanoevents_are_lazy_and_carry_coffeas_metadata() -> None:
    pytest.importorskip("coffea", reason="the coffea extra is not installed")
    read = ReadSpec(dataset="ttbar", metadata={"xsec": 831.8}, schema="nanoaod")
    with open_events(NANO, "root://eos//ttbar.root", "Events", read, 20, 120) as opened:
        events = opened.events
        assert opened.bytes_read() == 0
        n_muons = int(ak.sum(ak.num(events.Muon.pt)))
        assert n_muons >= 0
        assert opened.bytes_read() > 0
        assert opened.bytes_read() < all_branches_bytes(20, 120) / 10
        meta = events.metadata
    assert meta["dataset"] == "ttbar"
    assert meta["xsec"] == 831.8
    assert meta["filename"] == "root://eos//ttbar.root"
    assert meta["treename"] == "Events"
    assert (meta["entrystart"], meta["entrystop"]) == (20, 120)
    assert meta["fileuuid"]


def test_a_wrong_tree_lists_the_files_trees() -> None:
    with (
        pytest.raises(EventsError, match=r"no tree 'events' \(its trees: Events\)"),
        open_events(NANO, NANO, "events", ReadSpec(), 0, 10),
    ):
        pass
