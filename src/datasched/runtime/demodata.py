"""A synthetic collision dataset and the demo analysis: the dimuon mass, a Z peak over a
falling background (what a physicist's first look at muon data shows)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import awkward as ak
import hist
import numpy as np
import uproot
import yaml

__all__ = ["DimuonMass", "plot_mass", "write_demo_dataset"]

Z_MASS = 91.1876
Z_WIDTH = 2.4952
MUON_MASS = 0.10566
Z_FRACTION = 0.3


def _events(rng: np.random.Generator, n: int, first: int) -> dict[str, Any]:
    """``n`` events: Z->mumu (two opposite-charge muons) or background (0-4 muons)."""
    is_z = rng.random(n) < Z_FRACTION
    counts = np.where(is_z, 2, rng.poisson(0.8, n).clip(0, 4))
    total = int(counts.sum())
    pt = rng.exponential(12.0, total) + 3.0
    eta = rng.uniform(-2.4, 2.4, total)
    phi = rng.uniform(-np.pi, np.pi, total)
    charge = rng.choice(np.array([-1, 1]), total)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    z_idx = np.flatnonzero(is_z)
    if z_idx.size:
        # A Z at rest in the transverse plane decaying back to back, with a Breit-Wigner
        # mass smeared by the detector, boosted along the beam.
        mass = Z_MASS + Z_WIDTH / 2 * rng.standard_cauchy(z_idx.size)
        mass = np.clip(mass + rng.normal(0, 1.5, z_idx.size), 40.0, 200.0)
        theta_eta = rng.uniform(-1.2, 1.2, z_idx.size)
        p = mass / 2
        pt_z = p / np.cosh(theta_eta)
        phi0 = rng.uniform(-np.pi, np.pi, z_idx.size)
        boost = rng.normal(0, 0.6, z_idx.size)
        i0 = starts[z_idx]
        pt[i0], pt[i0 + 1] = pt_z, pt_z
        eta[i0], eta[i0 + 1] = theta_eta + boost, -theta_eta + boost
        phi[i0], phi[i0 + 1] = phi0, np.mod(phi0 + 2 * np.pi, 2 * np.pi) - np.pi
        charge[i0], charge[i0 + 1] = -1, 1
    return {
        "event": np.arange(first, first + n, dtype=np.int64),
        "Muon_pt": ak.unflatten(pt.astype(np.float32), counts),
        "Muon_eta": ak.unflatten(eta.astype(np.float32), counts),
        "Muon_phi": ak.unflatten(np.mod(phi + np.pi, 2 * np.pi).astype(np.float32) - np.pi, counts),
        "Muon_charge": ak.unflatten(charge.astype(np.int32), counts),
    }


def write_demo_dataset(
    directory: Path, n_events: int = 200_000, n_files: int = 20, seed: int = 1
) -> Path:
    """Write ``n_files`` ROOT files (tree ``Events``) and ``catalog.yaml`` (dataset
    ``zmumu``, with per-file counts); returns the catalog's path. Deterministic per seed.
    The catalog is written last, so it never names a file that is not complete."""
    if n_files < 1:
        raise ValueError(f"n_files: must be at least 1, got {n_files}")
    if n_events < n_files:
        raise ValueError(f"n_events: must be at least n_files ({n_files}), got {n_events}")
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files = []
    first = 0
    for i in range(n_files):
        n = n_events // n_files + (1 if i < n_events % n_files else 0)
        data = _events(rng, n, first)
        path = directory / f"part-{i:03d}.root"
        tmp = directory / f".part-{i:03d}.{secrets.token_hex(4)}.tmp"
        try:
            with uproot.recreate(tmp) as f:
                f.mktree(
                    "Events",
                    {
                        "event": np.int64,
                        "Muon_pt": data["Muon_pt"].type.content,
                        "Muon_eta": data["Muon_eta"].type.content,
                        "Muon_phi": data["Muon_phi"].type.content,
                        "Muon_charge": data["Muon_charge"].type.content,
                    },
                    counter_name=lambda _: "nMuon",
                )
                f["Events"].extend(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        files.append({"url": path.name, "n_events": n, "n_bytes": path.stat().st_size})
        first += n
    catalog = directory / "catalog.yaml"
    doc = {"datasets": {"zmumu": {"tree": "Events", "files": files}}}
    tmp = directory / f".catalog.{secrets.token_hex(4)}.tmp"
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    os.replace(tmp, catalog)
    return catalog


def _mass_hist() -> hist.Hist[Any]:
    return hist.Hist.new.Reg(60, 60, 120, name="mass", label="m(μμ) [GeV]").Double()


class DimuonMass:
    """The demo processor: the invariant mass of the leading opposite-charge muon pair."""

    def process(self, events: ak.Array) -> dict[str, Any]:
        mu = events[ak.num(events["Muon_pt"]) >= 2]
        pt, eta, phi = mu["Muon_pt"][:, :2], mu["Muon_eta"][:, :2], mu["Muon_phi"][:, :2]
        charge = mu["Muon_charge"][:, :2]
        opposite = ak.to_numpy(charge[:, 0] * charge[:, 1] < 0)
        pt_np = ak.to_numpy(pt).astype(np.float64)[opposite]
        eta_np = ak.to_numpy(eta).astype(np.float64)[opposite]
        phi_np = ak.to_numpy(phi).astype(np.float64)[opposite]
        px, py = pt_np * np.cos(phi_np), pt_np * np.sin(phi_np)
        pz = pt_np * np.sinh(eta_np)
        e = np.sqrt(px**2 + py**2 + pz**2 + MUON_MASS**2)
        m2 = e.sum(1) ** 2 - px.sum(1) ** 2 - py.sum(1) ** 2 - pz.sum(1) ** 2
        mass = np.sqrt(np.clip(m2, 0, None))
        h = _mass_hist()
        h.fill(mass=mass)
        return {"mass": h, "n_events": len(events), "n_pairs": int(mass.size)}

    def postprocess(self, accumulator: Any) -> Any:
        return accumulator


def plot_mass(h: hist.Hist[Any], path: Path) -> Path:
    """The dimuon-mass histogram as a PNG (written atomically)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    edges = h.axes[0].edges
    ax.stairs(h.values(), edges, fill=True, alpha=0.6)
    ax.set_xlabel(h.axes[0].label)
    ax.set_ylabel("pairs per GeV")
    ax.set_title(f"dimuon mass, {int(h.sum()):,} pairs")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)
    return path
