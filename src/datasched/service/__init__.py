"""The datasched service: a master daemon, its store, the request language, the catalog and
the runner (see :mod:`datasched.service.contracts`)."""
