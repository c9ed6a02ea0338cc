"""Test configuration: a Hypothesis profile without deadlines (CI machines are noisy)."""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("ci", deadline=None, max_examples=100)
settings.load_profile("ci")
