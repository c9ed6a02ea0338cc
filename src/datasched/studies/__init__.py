"""The papers' studies: each paper's setup, runs, claims, figures and report, one
subpackage per paper, above both engines (docs/design.md, "Layout")."""

from __future__ import annotations

__all__: list[str] = []
