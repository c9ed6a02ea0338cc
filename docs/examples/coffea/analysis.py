"""A coffea processor as a coffea user writes it, for docs/runtime.md ("From coffea"): it runs
unchanged under coffea's own Runner and under `datasched run`, on the demo data
(`datasched demo-data data/`) with coffea's NanoAODSchema."""

import awkward as ak
import hist
from coffea import processor


class MyProcessor(processor.ProcessorABC):
    def __init__(self, min_pt=3.0):
        self.min_pt = min_pt

    def process(self, events):
        dataset = events.metadata["dataset"]
        muons = events.Muon[events.Muon.pt > self.min_pt]
        pt = hist.Hist.new.StrCat([], growth=True, name="dataset").Reg(40, 0, 200, name="pt").Weight()
        pt.fill(dataset=dataset, pt=ak.flatten(muons.pt))
        two = muons[ak.num(muons) >= 2]
        mass = hist.Hist.new.StrCat([], growth=True, name="dataset").Reg(60, 60, 120, name="m").Double()
        mass.fill(dataset=dataset, m=(two[:, 0] + two[:, 1]).mass)
        cutflow = processor.defaultdict_accumulator(int)
        cutflow[dataset] += len(events)
        return {"pt": pt, "mass": mass, "cutflow": cutflow}

    def postprocess(self, accumulator):
        pass
