"""The service's web dashboard: server-rendered pages and HTML fragments (Jinja2 templates
and a small script, all package data; no build step, nothing fetched from elsewhere) over
the same store, runner and tokens as the API. See docs/service-dashboard.md."""

from __future__ import annotations

from datasched.service.dashboard.routes import router

__all__ = ["router"]
