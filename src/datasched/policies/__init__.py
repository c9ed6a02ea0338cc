"""Scheduling policies, registered by name.

Built-in policies register themselves on import; third-party packages add theirs through the
entry-point group ``datasched.policies`` (each entry point names a
:class:`~datasched.core.policy.Policy` subclass). :func:`build_policy` is the one way to make
one: parameters checked against the policy's declaration, defaults (data included) applied.
"""

from __future__ import annotations

from datasched.policies.registry import (
    UnknownPolicyError,
    available,
    build_policy,
    build_policy_from_text,
    describe,
    get_policy,
    policy_options,
    register,
)

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
