"""A synthetic collision dataset and the demo analysis: the dimuon mass, a Z peak over a
falling background (what a physicist's first look at muon data shows).

The files are shaped like a slimmed CMS NanoAOD, so that a coffea processor runs on them
unchanged with coffea's ``NanoAODSchema`` (docs/runtime.md, "From coffea"): a TTree ``Events``
with NanoAOD's event ids ``run``, ``luminosityBlock`` and ``event`` (the global event number,
so tests can check that every event was read exactly once), the collections ``Muon`` and
``Electron`` as NanoAOD stores them (``nMuon`` counting ``Muon_pt``, ``Muon_eta``,
``Muon_phi``, ``Muon_mass``, ``Muon_charge``, sorted by decreasing pt; the same for
``Electron``), and the missing transverse momentum ``MET_pt``, ``MET_phi``.

The muons are drawn from the seed's own stream, the electrons and the MET from a second one:
adding them left the muons, and so every result of the demo's analysis, as they were.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import awkward as ak
import hist
import numpy as np
import uproot

# yaml and xml are imported where the files are written, not here: this module is also the
# demo's processor, imported at each sandbox's start, where they cost about 40 ms of its 0.5 s.
from datasched._files import atomic_path, atomic_write_bytes

__all__ = [
    "DimuonMass",
    "demo_dataset_is_current",
    "plot_mass",
    "write_demo_dataset",
    "write_examples",
]

Z_MASS = 91.1876
"""GeV, PDG."""
Z_WIDTH = 2.4952
"""GeV, PDG: the Breit–Wigner (Cauchy) full width of the generated Z peak."""
MUON_MASS = 0.10566
"""GeV."""
Z_FRACTION = 0.3
"""Share of Z→μμ events; the rest is background."""
MASS_RESOLUTION = 1.5
"""GeV: the Gaussian detector smearing of a Z's mass."""
ELECTRON_MASS = 0.000511
"""GeV."""
EVENTS_PER_LUMI = 1_000
"""Events of a luminosity block (``luminosityBlock`` counts from 1 in each run)."""
LUMIS_PER_RUN = 50
"""Luminosity blocks of a run (``run`` counts from 1)."""


def _z_muons(
    rng: np.random.Generator, n: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(pt, eta, phi)`` of the first muon of ``n`` Z decays (each shape ``(n,)``); the
    second has the same pt, ``eta2 = 2*boost - eta`` and ``phi + π``, which the caller sets.

    The Z decays at rest in the transverse plane, back to back, then is boosted along the
    beam (adds ``boost`` to both rapidities, which keeps the pair's mass for massless muons).
    """
    mass = Z_MASS + Z_WIDTH / 2 * rng.standard_cauchy(n)
    mass = np.clip(mass + rng.normal(0.0, MASS_RESOLUTION, n), 40.0, 200.0)
    eta_rest = rng.uniform(-1.2, 1.2, n)
    pt = mass / 2 / np.cosh(eta_rest)
    phi = rng.uniform(-np.pi, np.pi, n)
    boost = rng.normal(0.0, 0.6, n)
    return pt, np.stack([eta_rest + boost, boost - eta_rest]), phi


def _events(
    rng: np.random.Generator, more: np.random.Generator, n: int, first: int
) -> dict[str, Any]:
    """``n`` events numbered from ``first``: Z→μμ (two opposite-charge muons) or background
    (0–4 muons of random charge, a falling exponential pt spectrum, so mostly low masses).
    The muons come from ``rng``; the electrons (background only: 0–3 soft ones) and the
    MET (small in Z events, which have no neutrino) from ``more``."""
    is_z = rng.random(n) < Z_FRACTION
    counts = np.where(is_z, 2, rng.poisson(0.8, n).clip(0, 4))
    total = int(counts.sum())
    pt = rng.exponential(12.0, total) + 3.0
    eta = rng.uniform(-2.4, 2.4, total)
    phi = rng.uniform(-np.pi, np.pi, total)
    charge = rng.choice(np.array([-1, 1]), total)
    z_idx = np.flatnonzero(is_z)
    if z_idx.size:
        i0 = (np.cumsum(counts) - counts)[z_idx]
        z_pt, z_eta, z_phi = _z_muons(rng, z_idx.size)
        pt[i0], pt[i0 + 1] = z_pt, z_pt
        eta[i0], eta[i0 + 1] = z_eta[0], z_eta[1]
        phi[i0], phi[i0 + 1] = z_phi, z_phi + np.pi
        charge[i0], charge[i0 + 1] = -1, 1
    phi = np.mod(phi + np.pi, 2 * np.pi) - np.pi
    muons = _collection(counts, pt, eta, phi, MUON_MASS, charge)
    n_el = more.poisson(0.15, n).clip(0, 3)
    n_el_total = int(n_el.sum())
    electrons = _collection(
        n_el,
        _nano_float(more.exponential(10.0, n_el_total) + 5.0),
        _nano_float(more.uniform(-2.5, 2.5, n_el_total)),
        _nano_float(more.uniform(-np.pi, np.pi, n_el_total)),
        ELECTRON_MASS,
        more.choice(np.array([-1, 1]), n_el_total),
    )
    event = np.arange(first, first + n, dtype=np.int64)
    lumi = event // EVENTS_PER_LUMI
    return {
        "run": (1 + lumi // LUMIS_PER_RUN).astype(np.uint32),
        "luminosityBlock": (1 + lumi % LUMIS_PER_RUN).astype(np.uint32),
        "event": event,
        "Muon": muons,
        "Electron": electrons,
        "MET_pt": _nano_float(np.where(is_z, more.exponential(8.0, n), more.exponential(20.0, n))),
        "MET_phi": _nano_float(more.uniform(-np.pi, np.pi, n)),
    }


NANO_MANTISSA_BITS = 10
"""Mantissa bits kept of the electrons' and MET's floats, as NanoAOD keeps most of its floats
(the muons keep all 23, as the demo always wrote them)."""


def _nano_float(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``x`` as float32 rounded to :data:`NANO_MANTISSA_BITS` bits of mantissa: NanoAOD's lossy
    float storage, which also lets the branches compress (the files stay small)."""
    bits = x.astype(np.float32).view(np.uint32)
    drop = 23 - NANO_MANTISSA_BITS
    half = np.uint32(1 << (drop - 1))
    rounded = (bits + half) & np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    out: np.ndarray[Any, Any] = rounded.view(np.float32)
    return out


def _collection(
    counts: np.ndarray[Any, Any],
    pt: np.ndarray[Any, Any],
    eta: np.ndarray[Any, Any],
    phi: np.ndarray[Any, Any],
    mass: float,
    charge: np.ndarray[Any, Any],
) -> ak.Array:
    """A jagged NanoAOD collection (``pt``, ``eta``, ``phi``, ``mass``, ``charge``; ``counts``
    per event), each event's particles sorted by decreasing pt, as NanoAOD sorts them."""
    particles = ak.unflatten(
        ak.zip(
            {
                "pt": pt.astype(np.float32),
                "eta": eta.astype(np.float32),
                "phi": phi.astype(np.float32),
                "mass": np.full(pt.size, mass, np.float32),
                "charge": charge.astype(np.int32),
            }
        ),
        counts,
    )
    return particles[ak.argsort(particles["pt"], axis=1, ascending=False, stable=True)]


def _check_count(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")


def write_demo_dataset(
    directory: Path, n_events: int = 200_000, n_files: int = 20, seed: int = 1
) -> Path:
    """Write ``n_files`` ROOT files ``part-000.root``… (tree ``Events``) holding ``n_events``
    events in all, and ``catalog.yaml`` naming them dataset ``zmumu`` with per-file counts (so
    it loads without opening the files); returns the catalog's path.

    Deterministic per ``seed`` (the arrays; ROOT files also hold write times). Each file is
    written to a temporary name and renamed; an old catalog is removed first and the new
    one written last, so no catalog ever names a missing or half-written file."""
    _check_count("n_files", n_files, 1)
    _check_count("n_events", n_events, n_files)
    _check_count("seed", seed, 0)
    directory.mkdir(parents=True, exist_ok=True)
    catalog = directory / "catalog.yaml"
    catalog.unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    more = np.random.default_rng([seed, 1])
    files = []
    first = 0
    for i in range(n_files):
        n = n_events // n_files + (1 if i < n_events % n_files else 0)
        data = _events(rng, more, n, first)
        path = directory / f"part-{i:03d}.root"
        _write_tree(data, path)
        files.append({"url": path.name, "n_events": n, "n_bytes": path.stat().st_size})
        first += n
    doc = {"datasets": {"zmumu": {"tree": "Events", "files": files}}}
    import yaml

    atomic_write_bytes(catalog, yaml.safe_dump(doc, sort_keys=False).encode())
    return catalog


EXAMPLE_JOBS = """\
# Two overlapping analyses of the demo dataset, as the README's `datasched run` reads them
# (written by `datasched demo-data`; edit freely: it is not written again while it exists).
catalog: catalog.yaml                      # relative to this file
defaults:
  processor: datasched.runtime.demodata:DimuonMass
jobs:
  - id: zpeak-1
    dataset: zmumu
    events: [0, {a}]
    output: results/zpeak-1.pkl
  - id: zpeak-2
    dataset: zmumu
    events: [{b}, {c}]   # half of it is zpeak-1's: cached by then
    output: results/zpeak-2.root
    submit_s: 1
"""
"""The example jobs file :func:`write_examples` writes (events as fractions of the data)."""

EXAMPLE_REQUEST = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- A request of the demo's files, as the README's `datasched submit` sends it (written by
     `datasched demo-data`; the daemon's roots, given to serve, must hold this directory). -->
<job name="dimuon mass, demo files">
  <processor name="datasched.runtime.demodata:DimuonMass" tree="Events"/>
  <input URL="file:{directory}/part-*.root"/>
</job>
"""
"""The example request :func:`write_examples` writes."""


def write_examples(directory: Path, n_events: int) -> list[Path]:
    """Write ``jobs.yaml`` and ``request.xml`` over the demo dataset in ``directory`` (of
    ``n_events`` events), each unless it exists (a user's edits are kept); returns those
    written. Both use the files :func:`write_demo_dataset` writes there, so the README's
    ``datasched run`` and ``datasched submit`` lines run as shown."""
    from xml.sax.saxutils import escape

    texts = {
        "jobs.yaml": EXAMPLE_JOBS.format(
            a=int(n_events * 0.3), b=int(n_events * 0.15), c=int(n_events * 0.45)
        ),
        "request.xml": EXAMPLE_REQUEST.format(
            directory=escape(str(directory.resolve()), {'"': "&quot;"})
        ),
    }
    written = []
    for name, text in texts.items():
        path = directory / name
        if not path.exists():
            atomic_write_bytes(path, text.encode())
            written.append(path)
    return written


CURRENT_BRANCHES = frozenset(
    {"run", "luminosityBlock", "event", "nMuon", "Muon_pt", "nElectron", "MET_pt"}
)
"""Branches every file of the current demo dataset has: older versions of the demo wrote
files without NanoAOD's event ids, on which a coffea processor with ``NanoAODSchema`` fails."""


def demo_dataset_is_current(catalog: Path) -> bool:
    """Whether ``catalog`` names a demo dataset this version wrote: dataset ``zmumu`` whose
    files all exist with the sizes listed, the first holding :data:`CURRENT_BRANCHES`.

    A directory written by an older version (or damaged) is written again by the demo rather
    than used, so that the docs' examples run on it as written."""
    import yaml

    try:
        doc = yaml.safe_load(catalog.read_text())
        files = doc["datasets"]["zmumu"]["files"]
        for f in files:
            if (catalog.parent / f["url"]).stat().st_size != f["n_bytes"]:
                return False
        with uproot.open(catalog.parent / files[0]["url"]) as root:
            names = set(root["Events"].keys())
    except (OSError, KeyError, TypeError, IndexError, ValueError, yaml.YAMLError):
        return False
    return names >= CURRENT_BRANCHES


def _write_tree(data: dict[str, Any], path: Path) -> None:
    """``data`` as TTree ``Events`` of ``path``, written atomically."""
    with atomic_path(path) as tmp, uproot.recreate(tmp) as f:
        # mktree + extend: since uproot 5.7, f[name] = {...} would write an RNTuple. A
        # collection (a jagged record) becomes NanoAOD's branches: nMuon, Muon_pt, ...
        f.mktree(
            "Events",
            {
                name: (a.type.content if isinstance(a, ak.Array) else a.dtype)
                for name, a in data.items()
            },
        )
        f["Events"].extend(data)


def _mass_hist() -> hist.Hist[Any]:
    return hist.Hist.new.Reg(60, 60, 120, name="mass", label="m(μμ) [GeV]").Double()


def _flat(a: ak.Array) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = ak.to_numpy(ak.flatten(a, axis=1))
    return out


class DimuonMass:
    """The demo processor: the invariant mass of each event's leading opposite-charge muon
    pair (the leading muon and the highest-pt muon of opposite charge), histogrammed in
    60–120 GeV. Keeps no state, so any split of the events into packets merges to the same
    result.

    Written on the muons' flat arrays with numpy (one pass, no per-event Python): a packet
    of a few thousand events then costs a few milliseconds, not the tens that a chain of
    jagged-array operations costs in call overhead alone."""

    def process(self, events: ak.Array) -> dict[str, Any]:
        """``{"mass": hist, "n_events": events seen, "n_pairs": pairs found (any mass)}``."""
        counts = ak.to_numpy(ak.num(events["Muon_pt"], axis=1)).astype(np.int64)
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        charge = _flat(events["Muon_charge"])
        # Muons are sorted by pt: the first of an event leads; its partner is the first
        # later muon of opposite charge (the minimum index of the candidates; ``total``
        # where there is none).
        lead = np.repeat(offsets[:-1], counts)
        index = np.arange(total)
        candidate = np.where((index != lead) & (charge != charge[lead]), index, total)
        starts = offsets[:-1][counts > 0]
        second = np.minimum.reduceat(candidate, starts) if starts.size else np.zeros(0, np.int64)
        paired = second < total
        i0, i1 = starts[paired], second[paired]
        pt, eta, phi = (
            np.stack([x[i0], x[i1]]).astype(np.float64)
            for x in (_flat(events[f"Muon_{k}"]) for k in ("pt", "eta", "phi"))
        )
        px, py, pz = pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)
        e = np.sqrt(px**2 + py**2 + pz**2 + MUON_MASS**2)
        m2 = e.sum(0) ** 2 - px.sum(0) ** 2 - py.sum(0) ** 2 - pz.sum(0) ** 2
        mass = np.sqrt(np.clip(m2, 0.0, None))
        h = _mass_hist()
        h.fill(mass=mass)
        return {"mass": h, "n_events": len(events), "n_pairs": int(mass.size)}

    def postprocess(self, accumulator: Any) -> Any:
        """The merged result, unchanged."""
        return accumulator


def plot_mass(h: hist.Hist[Any], path: Path) -> Path:
    """The dimuon-mass histogram ``h`` as a PNG at ``path`` (written atomically); returns it.

    In the style HEP users know, with mplhep (a step histogram with its statistical errors,
    the axis labels at the ends, an experiment-style label) where it is installed; plain
    matplotlib otherwise. Uses matplotlib's Agg canvas directly, without pyplot, and the
    style only inside a context, so it changes no global state and keeps no figure alive."""
    from contextlib import nullcontext

    from matplotlib import style
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    try:
        import mplhep as hep
    except ImportError:
        hep = None
    axis = h.axes[0]
    widths = np.unique(np.round(axis.widths, 9))
    ylabel = f"Pairs / {widths[0]:g} GeV" if widths.size == 1 else "Pairs / bin"
    with style.context(hep.style.CMS) if hep is not None else nullcontext():
        fig = Figure(figsize=(10, 8) if hep is not None else (6, 4))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        if hep is not None:
            hep.histplot(h, ax=ax, histtype="errorbar", color="black", label="synthetic data")
            hep.histplot(h, ax=ax, histtype="fill", alpha=0.3, label="_")
            hep.label.exp_label(
                exp="datasched",
                text="demo",
                data=True,
                ax=ax,
                loc=0,
                rlabel=f"{int(h.sum()):,} pairs",
            )
            ax.legend(loc="upper right")
        else:
            ax.stairs(h.values(), axis.edges, fill=True, alpha=0.6)
            ax.set_title(f"dimuon mass, {int(h.sum()):,} pairs")
        ax.set_xlabel(axis.label or "m(μμ) [GeV]")
        ax.set_ylabel(ylabel)
        ax.set_xlim(axis.edges[0], axis.edges[-1])
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=80 if hep is not None else 100)
    atomic_write_bytes(path, buf.getvalue())
    return path
