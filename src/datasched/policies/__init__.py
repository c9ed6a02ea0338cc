"""Scheduling policies, registered by name.

Built-in policies register themselves on import; third-party packages add theirs through the
entry-point group ``datasched.policies`` (each entry point names a :class:`Policy` subclass).
"""

from __future__ import annotations

from datasched.policies.registry import (
    UnknownPolicyError,
    available,
    get_policy,
    make_policy,
    register,
)

__all__ = ["UnknownPolicyError", "available", "get_policy", "make_policy", "register"]
