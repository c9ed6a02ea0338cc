"""What sets the two engines side by side: the simulator's prediction of a real run, and the
runtime demo that shows both. The only package that imports both :mod:`datasched.sim` and
:mod:`datasched.runtime`; neither of them imports the other."""

from __future__ import annotations

__all__: list[str] = []
