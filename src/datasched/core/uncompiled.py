"""Stands in for Cython's ``cython`` module where Cython is not installed: the modules of the
hot path that ask ``cython.compiled`` (core/intervals.py, core/cache.py, core/directory.py)
then run from their sources, as they do with Cython installed but not compiled
(docs/design.md, "The engines")."""

compiled = False
"""Never compiled: a compiled module's ``cython.compiled`` is Cython's own constant."""
