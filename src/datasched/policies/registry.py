"""The policy registry: name -> Policy class, with entry-point plugins."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, TypeVar

from datasched.core.scheduler import Policy

__all__ = ["UnknownPolicyError", "available", "get_policy", "make_policy", "register"]

ENTRY_POINT_GROUP = "datasched.policies"
_BUILTIN_MODULES = (
    "datasched.policies.fcfs",
    "datasched.policies.outoforder",
    "datasched.policies.delayed",
    "datasched.policies.adaptive",
)

_registry: dict[str, type[Policy]] = {}
_loaded = False

P = TypeVar("P", bound=type[Policy])


class UnknownPolicyError(ValueError):
    """No policy of that name; the message lists the known ones."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown policy {name!r} (known: {', '.join(known)})")


def register(cls: P) -> P:
    """Class decorator: make a policy available by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__}: a registered policy needs a name")
    other = _registry.get(cls.name)
    if other is not None and other is not cls:
        raise ValueError(f"policy name {cls.name!r} is taken by {other.__qualname__}")
    _registry[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        import_module(module)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            raise TypeError(f"entry point {ep.name!r} does not name a Policy subclass")
        register(cls)


def available() -> dict[str, type[Policy]]:
    """Every known policy, by name, in registration order."""
    _load()
    return dict(_registry)


def get_policy(name: str) -> type[Policy]:
    _load()
    try:
        return _registry[name]
    except KeyError:
        raise UnknownPolicyError(name, sorted(_registry)) from None


def make_policy(name: str, **params: Any) -> Policy:
    """An instance of the named policy with its parameters."""
    return get_policy(name)(**params)
