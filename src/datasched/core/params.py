"""A policy's declared parameters (:class:`Param`): name, type, default, help, choices, once,
for the command line, the runtime, ``datasched policies --json`` and the service; the error a
bad value gets (:class:`ParamError`, naming the parameter); and :data:`DEFAULT`, which a
constructor writes instead of a default so that the declaration holds the only one
(:func:`fill_defaults`, :func:`check_defaults`). Part of the policy contract
(:mod:`datasched.core.policy`, which re-exports them).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT", "Param", "ParamError", "check_defaults", "fill_defaults"]


class ParamError(ValueError):
    """A policy parameter is unknown or has a bad value.

    ``param`` names the parameter (as declared: ``period_h``), ``reason`` says what is wrong
    with it in words a user reads after the parameter's name (``must be at least 0, got
    -1``), ``policy`` names the policy (empty where the raiser does not know it:
    :func:`datasched.policies.build_policy` fills it in). ``str()`` is ``"param: reason"``.
    A constructor that checks a rule across parameters raises it naming the parameter the
    rule blames, so a command line can point at the option the user typed.
    """

    def __init__(self, policy: str, param: str, reason: str) -> None:
        self.policy = policy
        self.param = param
        self.reason = reason
        super().__init__(f"{param}: {reason}")


class _Default:
    """The type of :data:`DEFAULT` (one instance; it pickles as itself)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()
"""A constructor's keyword default meaning "the default its :class:`Param` declares":
``def __init__(self, *, period_h: float = DEFAULT)``. The constructor fills it in
(:func:`fill_defaults`, applied to every policy class) and registration refuses any other
default (:func:`check_defaults`), so ``Policy()`` and ``build_policy(name)`` build the same
policy, and the default is written once. Typed ``Any``
so that the annotation says the parameter's real type."""


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a policy, declared once.

    ``kind`` is ``int``, ``float``, ``bool`` or ``str``, or ``object`` with ``parse`` for
    values that come from a file (a performance map). ``low``/``high`` bound numbers
    (``low_open``: strictly above ``low``); ``none_ok`` lets None through (an option that can
    be off). ``factory`` makes the default when it is not a plain value (``default`` then
    describes it). ``implies`` sets other parameters when this one is given (and they are
    not): giving ``replicate_after`` turns replication on; giving both with other values is
    refused (``build_policy``), for one of them would be ignored. ``option`` asks the command line
    for a named ``--option`` besides ``-P``.
    """

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    none_ok: bool = False
    parse: Callable[[str], Any] | None = None
    factory: Callable[[], Any] | None = None
    implies: tuple[tuple[str, Any], ...] = ()
    option: bool = True
    unit: str = ""
    """What the value counts, for help texts (``hours``, ``events``)."""

    def default_value(self) -> Any:
        """The value a policy gets when this parameter is not given: the factory's product,
        or the default."""
        return self.factory() if self.factory is not None else self.default

    @property
    def flag(self) -> str:
        """The named command-line option: ``--fairness-h`` for ``fairness_h``."""
        return "--" + self.name.replace("_", "-")

    def check(self, policy: str, value: Any) -> Any:
        """``value`` checked (and ints widened to floats); ParamError naming the parameter."""
        if value is None:
            if self.none_ok or self.default is None:
                return None
            raise ParamError(policy, self.name, "must be given")
        kind = self.kind
        if kind is object:
            return value
        if kind is bool:
            if not isinstance(value, bool):
                raise ParamError(policy, self.name, f"expected true or false, got {value!r}")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParamError(policy, self.name, f"expected a whole number, got {value!r}")
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ParamError(policy, self.name, f"expected a number, got {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise ParamError(policy, self.name, f"must be finite, got {value!r}")
        elif kind is str and not isinstance(value, str):
            raise ParamError(policy, self.name, f"expected text, got {value!r}")
        if self.choices is not None and value not in self.choices:
            listed = ", ".join(map(str, self.choices))
            raise ParamError(policy, self.name, f"must be one of {listed}, got {value!r}")
        if kind in (int, float):
            if self.low is not None and (value <= self.low if self.low_open else value < self.low):
                relation = "above" if self.low_open else "at least"
                raise ParamError(policy, self.name, f"must be {relation} {self.low:g}, got {value}")
            if self.high is not None and value > self.high:
                raise ParamError(policy, self.name, f"must be at most {self.high:g}, got {value}")
        return value

    def from_text(self, policy: str, text: str) -> Any:
        """The value of ``text`` as typed on a command line (``-P name=text``), checked."""
        low = text.strip().lower()
        if self.none_ok and low in ("none", "off", "null"):
            return None
        value: Any
        if self.parse is not None:
            try:
                value = self.parse(text)
            except (OSError, ValueError) as exc:
                raise ParamError(policy, self.name, str(exc)) from exc
        elif self.kind is bool:
            if low not in _TRUE + _FALSE:
                raise ParamError(policy, self.name, f"expected true or false, got {text!r}")
            value = low in _TRUE
        elif self.kind is int:
            try:
                value = int(text)
            except ValueError:
                raise ParamError(
                    policy, self.name, f"expected a whole number, got {text!r}"
                ) from None
        elif self.kind is float:
            try:
                value = float(text)
            except ValueError:
                raise ParamError(policy, self.name, f"expected a number, got {text!r}") from None
        else:
            value = text
        return self.check(policy, value)

    def describe(self) -> dict[str, Any]:
        """The declaration as JSON (for ``datasched policies --json`` and the service)."""
        default = self.default
        if not (default is None or isinstance(default, bool | int | float | str)):
            default = str(default)
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.kind.__name__ if self.kind is not object else "file",
            "default": default,
            "help": self.help,
            "option": self.flag if self.option else None,
        }
        if self.choices is not None:
            out["choices"] = list(self.choices)
        if self.low is not None:
            out["minimum"] = self.low
            out["minimum_exclusive"] = self.low_open
        if self.high is not None:
            out["maximum"] = self.high
        if self.none_ok:
            out["nullable"] = True
        if self.unit:
            out["unit"] = self.unit
        return out


def fill_defaults(cls: type, params: Sequence[Param]) -> None:
    """Wrap ``cls``'s constructor so that each declared parameter it takes by keyword, when
    not given (or given as :data:`DEFAULT`), gets its :class:`Param`'s default. Called for
    every subclass of :class:`~datasched.core.policy.Policy` and of the grid's scheduler
    bases as it is defined, registered or not, so a direct call ``Policy()`` never sees
    :data:`DEFAULT`."""
    init = cls.__init__  # type: ignore[misc]
    if getattr(init, "__datasched_params__", None) == tuple(params):
        return  # inherited, already filling these
    signature = inspect.signature(init)
    keywords = {n for n, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY}
    filled_params = tuple(p for p in params if p.name in keywords)
    if not filled_params:
        return

    @functools.wraps(init)
    def filled(self: Any, *args: Any, **kwargs: Any) -> None:
        for p in filled_params:
            if kwargs.get(p.name, DEFAULT) is DEFAULT:
                kwargs[p.name] = p.default_value()
        init(self, *args, **kwargs)

    filled.__datasched_params__ = tuple(params)  # type: ignore[attr-defined]
    setattr(cls, "__init__", filled)  # noqa: B010 (mypy refuses assigning to a method)


def check_defaults(cls: type, params: Sequence[Param], what: str) -> None:
    """Refuse (TypeError naming the parameter) a constructor whose keyword-only parameters
    are not exactly the declared ones, or that gives one a default of its own: each must
    default to :data:`DEFAULT` (or have none), so its :class:`Param` holds the only default
    and the two cannot drift apart. The registries of cluster policies and grid schedulers
    call it; ``what`` names the class in the message (``policy 'delayed'``)."""
    signature = inspect.signature(cls.__init__)  # type: ignore[misc]
    taken = {n: p for n, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY}
    declared = {p.name for p in params}
    if set(taken) != declared:
        raise TypeError(
            f"{what}: declared parameters {sorted(declared)} are not the constructor's "
            f"keyword parameters {sorted(taken)}"
        )
    for name, p in taken.items():
        if p.default is not p.empty and p.default is not DEFAULT:
            raise TypeError(
                f"{what}: the constructor gives {name!r} a default of its own ({p.default!r}); "
                f"write `{name}: ... = DEFAULT` so that its Param's is the only one"
            )
