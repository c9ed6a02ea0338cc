"""The policy registry: name -> Policy class, with entry-point plugins, and the one way to
build a policy from its declared parameters."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, TypeVar

from datasched.core.policy import Param, ParamError, Policy, check_defaults

__all__ = [
    "UnknownPolicyError",
    "available",
    "build_policy",
    "build_policy_from_text",
    "describe",
    "get_policy",
    "policy_options",
    "register",
]

ENTRY_POINT_GROUP = "datasched.policies"
_BUILTIN_MODULES = (
    "datasched.policies.ponce.fcfs",
    "datasched.policies.ponce.outoforder",
    "datasched.policies.ponce.delayed",
    "datasched.policies.ponce.adaptive",
    "datasched.policies.proof.policy",
    "datasched.policies.cosched.greedy",
    "datasched.policies.cosched.flow",
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
    """Class decorator: make a policy available by its ``name``.

    Checks that ``cls.params`` declares exactly the constructor's keyword parameters, each
    defaulting to :data:`~datasched.core.params.DEFAULT`: the declaration holds the only
    default, which the constructor fills in (:class:`~datasched.core.policy.Policy` makes it
    do so), so the policy a direct call builds is the one :func:`build_policy` builds.
    """
    if not cls.name:
        raise ValueError(f"{cls.__qualname__}: a registered policy needs a name")
    other = _registry.get(cls.name)
    if other is not None and other is not cls:
        raise ValueError(f"policy name {cls.name!r} is taken by {other.__qualname__}")
    check_defaults(cls, cls.params, f"policy {cls.name!r}")
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


def _declared(cls: type[Policy], policy: str, given: Mapping[str, Any]) -> dict[str, Param]:
    params = {p.name: p for p in cls.params}
    for name in given:
        if name not in params:
            has = ", ".join(params) or "none"
            raise ParamError(
                policy, name, f"policy {policy!r} has no such parameter (it has: {has})"
            )
    return params


def build_policy(name: str, **params: Any) -> Policy:
    """The named policy, its parameters checked against its declaration and every one not
    given set to its declared default (a performance map belongs to adaptive delay, and
    comes with it). UnknownPolicyError, or ParamError naming the parameter: one a value
    broke, one that implies another given a different value (``replicate_after`` with
    ``replication=False``), or the one a rule across parameters blames (the constructor
    raises that one; a plain ValueError from a constructor, which names no parameter, is
    blamed on ``params``, the policy's parameters as a whole)."""
    cls = get_policy(name)
    declared = _declared(cls, name, params)
    values: dict[str, Any] = {}
    for p in declared.values():
        if p.name in params:
            values[p.name] = p.check(name, params[p.name])
    for p in declared.values():
        if p.name in params:
            for implied, value in p.implies:
                if implied not in params:
                    values[implied] = value
                elif values[implied] != value:  # one of the two would be ignored
                    raise ParamError(
                        name,
                        p.name,
                        f"sets {implied}={value!r}; not with {implied}={values[implied]!r}",
                    )
    try:
        return cls(**values)  # the ones not given: from the declaration (see register)
    except ParamError as exc:
        if exc.policy == name:
            raise
        raise ParamError(name, exc.param, exc.reason) from exc
    except ValueError as exc:
        raise ParamError(name, "params", str(exc)) from exc


def build_policy_from_text(name: str, texts: Mapping[str, str]) -> Policy:
    """:func:`build_policy` from values typed on a command line (``-P name=text``) or sent
    to the service as strings, each parsed by its declaration."""
    cls = get_policy(name)
    declared = _declared(cls, name, texts)
    return build_policy(name, **{k: declared[k].from_text(name, v) for k, v in texts.items()})


def describe(name: str) -> dict[str, Any]:
    """A policy's declaration as JSON: name, paper section, summary, parameters."""
    cls = get_policy(name)
    return {
        "name": cls.name,
        "section": cls.section,
        "summary": cls.summary,
        "params": [p.describe() for p in cls.params],
    }


def policy_options() -> dict[str, Param]:
    """Every parameter asking for a named command-line option, by name, across the
    registry (the first declaration of a name speaks for all). Two policies declaring one
    name with different kinds is an error: one option cannot parse both."""
    out: dict[str, Param] = {}
    for cls in available().values():
        for p in cls.params:
            if not p.option:
                continue
            known = out.get(p.name)
            if known is None:
                out[p.name] = p
            elif known.kind is not p.kind:
                raise TypeError(
                    f"parameter {p.name!r} is a {known.kind.__name__} in one policy and a "
                    f"{p.kind.__name__} in {cls.name!r}"
                )
    return out
