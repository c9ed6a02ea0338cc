"""The routers of the service's API (``/api/v1``), one module per topic."""
