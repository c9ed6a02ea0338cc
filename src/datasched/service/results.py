"""A request's merged result, without running user code in the daemon.

Packet results are pickles made on workers. Unpickling may import and run any class the
pickle names, so the daemon unpickles with an allow-list: Python's containers and numbers,
numpy arrays, and hist/boost-histogram histograms (and the runtime's own accumulators).
That covers results made of histograms, numbers, arrays and mappings of them (coffea's
usual output); a result holding the user's own classes is refused with the class named,
and the client merges the packets itself (``GET .../result?packets=true``, which
``datasched result`` falls back to): user code then runs on the user's machine, never in
the daemon.

This is a guard against running user code by accident, not a sandbox for hostile pickles:
library functions on the allow-list still run on what a pickle gives them.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable
from typing import Any

from datasched.runtime.outputs import merge_all

__all__ = ["ResultRefused", "merge_packets", "safe_loads"]

_BUILTINS = frozenset(
    {
        "dict",
        "list",
        "set",
        "frozenset",
        "tuple",
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "bytearray",
        "bool",
        "slice",
        "range",
        "object",
    }
)
_ALLOWED = {
    "builtins": _BUILTINS,
    "collections": frozenset({"OrderedDict", "defaultdict", "Counter", "deque"}),
    "copyreg": frozenset({"_reconstructor"}),
    "numpy": frozenset({"ndarray", "dtype", "float64", "float32", "int64", "int32", "bool_"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy.core.numeric": frozenset({"_frombuffer"}),
    "numpy._core.numeric": frozenset({"_frombuffer"}),
}
_ALLOWED_PREFIXES = ("hist.", "boost_histogram.", "datasched.runtime.outputs")


class ResultRefused(ValueError):
    """A result the daemon does not unpickle; the message names the class."""


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = name in _ALLOWED.get(module, ()) or (
            module in ("hist", "boost_histogram") or module.startswith(_ALLOWED_PREFIXES)
        )
        if not allowed:
            raise ResultRefused(
                f"the result holds {module}.{name}, which the daemon does not unpickle "
                "(user code runs only on workers): fetch the packets and merge them locally"
            )
        return super().find_class(module, name)


def safe_loads(data: bytes) -> Any:
    """Unpickle ``data`` with the allow-list; :class:`ResultRefused` naming a class off it."""
    return _SafeUnpickler(io.BytesIO(data)).load()


def merge_packets(blobs: Iterable[bytes | None]) -> Any:
    """The merge of the packets' results (the runtime's merge, coffea's rules)."""
    return merge_all(safe_loads(b) for b in blobs if b is not None)
