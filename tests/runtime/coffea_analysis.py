"""Processors as a coffea user writes them (coffea.processor.ProcessorABC, NanoEvents), run
unchanged by the runtime tests and by coffea's own Runner; loaded by path, so not a test
module."""

from __future__ import annotations

from typing import Any

import awkward as ak
import hist
import numpy as np
from coffea import processor


class MuonAnalysis(processor.ProcessorABC):  # type: ignore[misc]  # coffea has no type information: its base class is Any
    """NanoAOD: muon pt and the dimuon mass per dataset, a cutflow, the files seen."""

    def __init__(self, min_pt: float = 3.0) -> None:
        self.min_pt = min_pt

    def process(self, events: Any) -> dict[str, Any]:
        dataset = events.metadata["dataset"]
        muons = events.Muon[events.Muon.pt > self.min_pt]
        pt = (
            hist.Hist.new.StrCat([], growth=True, name="dataset")
            .Reg(40, 0, 200, name="pt")
            .Weight()
        )
        pt.fill(dataset=dataset, pt=ak.flatten(muons.pt))
        two = muons[ak.num(muons) >= 2]
        pair = two[:, 0] + two[:, 1]
        mass = (
            hist.Hist.new.StrCat([], growth=True, name="dataset").Reg(30, 0, 150, name="m").Double()
        )
        mass.fill(dataset=dataset, m=pair.mass)
        cutflow = processor.defaultdict_accumulator(int)
        cutflow[f"{dataset}/events"] += len(events)
        cutflow[f"{dataset}/muons"] += int(ak.sum(ak.num(muons)))
        return {
            "pt": pt,
            "mass": mass,
            "cutflow": cutflow,
            "files": {events.metadata["filename"]},
            "xsec": {(dataset, events.metadata.get("xsec"))},
        }

    def postprocess(self, accumulator: Any) -> None:
        pass  # coffea's convention: None leaves the result as it is


class HZZAnalysis(processor.ProcessorABC):  # type: ignore[misc]  # coffea has no type information: its base class is Any
    """A flat ntuple through coffea's BaseSchema: the leading muon's pt."""

    def process(self, events: Any) -> dict[str, Any]:
        dataset = events.metadata["dataset"]
        px, py = events.Muon_Px, events.Muon_Py
        lead = ak.firsts(np.sqrt(px**2 + py**2))
        h = (
            hist.Hist.new.StrCat([], growth=True, name="dataset")
            .Reg(50, 0, 250, name="pt")
            .Double()
        )
        h.fill(dataset=dataset, pt=ak.drop_none(lead))
        n = processor.defaultdict_accumulator(int)
        n[dataset] += len(events)
        return {"lead_pt": h, "events": n}


class EventIds(processor.ProcessorABC):  # type: ignore[misc]  # coffea has no type information: its base class is Any
    """NanoAOD's event ids of every event seen, and the count of events seen: a set that
    equals the dataset's ids with a count equal to its events means every event once."""

    def process(self, events: Any) -> dict[str, Any]:
        ids = zip(
            events.run.to_list(),
            events.luminosityBlock.to_list(),
            events.event.to_list(),
            strict=True,
        )
        muons = events.Muon
        return {
            "ids": set(ids),
            "n": len(events),
            "muons": int(ak.sum(ak.num(muons))),
            "mass_sum": float(ak.sum(muons.mass)),  # a NanoAOD candidate: pt, eta, phi, mass
        }


class MuonCount(processor.ProcessorABC):  # type: ignore[misc]  # coffea has no type information: its base class is Any
    """Events and muons of files without NanoAOD's event ids (read with
    ``error_missing_event_ids`` off)."""

    def process(self, events: Any) -> dict[str, Any]:
        return {"n": len(events), "events": set(events.event.to_list())}
