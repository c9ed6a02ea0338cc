"""The real runtime: the scheduling core driving Dask workers with per-node disk caches.

Needs the ``runtime`` extra (``pip install 'datasched[runtime]'``). Importing this package
imports nothing heavy; the modules are:

* :mod:`~datasched.runtime.dataset`, :mod:`~datasched.runtime.jobspec`,
  :mod:`~datasched.runtime.jobchecks`: datasets, catalogs, coffea filesets and jobs files;
* :mod:`~datasched.runtime.processor`: the analysis API, processors loaded and shipped;
  :mod:`~datasched.runtime.outputs`: accumulators and output files;
* :mod:`~datasched.runtime.engine` (with :mod:`~datasched.runtime.streams` and
  :mod:`~datasched.runtime.moves`), :mod:`~datasched.runtime.session`,
  :mod:`~datasched.runtime.reports`, :mod:`~datasched.runtime.timeline`: the master;
* :mod:`~datasched.runtime.worker`, :mod:`~datasched.runtime.events`,
  :mod:`~datasched.runtime.peers`, :mod:`~datasched.runtime.datamoves`,
  :mod:`~datasched.runtime.diskcache`, :mod:`~datasched.runtime.storage`: what runs on the
  workers;
* :mod:`~datasched.runtime.demodata`: the demo's data (the demo itself, which compares the
  runtime with the simulator, is :mod:`datasched.compare.demo`).
"""

from __future__ import annotations

__all__: list[str] = []
