"""What sets the two engines side by side: the simulator's prediction of a real run, and the
runtime demo that shows both. It sits above both :mod:`datasched.sim` and
:mod:`datasched.runtime` (as do the studies and the service); neither engine imports the
other (docs/design.md, "Layers")."""

from __future__ import annotations

__all__: list[str] = []
