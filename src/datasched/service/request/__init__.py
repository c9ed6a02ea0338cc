"""The request language of the service: STAR's meta-job requests (MJR) in XML (the paper's
Appendix A, and STAR's later ``<job>`` form) and an equivalent YAML, parsed
(:func:`parse_request`), checked against the catalog and storage (:func:`check_request`)
and split into elementary job requests (:func:`split_request`); :func:`accept_request` does
the three in turn, as the service takes a submission. See
docs/service-requests.md for the language, with examples, and its XML Schema.

Pure Python: no web framework and no database; user code is never run here.
"""

from __future__ import annotations

from datasched.service.contracts import FieldError, RequestInvalid
from datasched.service.request.accept import accept_request
from datasched.service.request.checks import COMMAND_VARIABLES, CodeCheck, check_request
from datasched.service.request.offline import DatasetsCatalog
from datasched.service.request.parse import MAX_REQUEST_BYTES, form_of, parse_request
from datasched.service.request.render import to_xml, to_yaml
from datasched.service.request.split import split_request
from datasched.service.request.xml_form import schema_text

__all__ = [
    "COMMAND_VARIABLES",
    "MAX_REQUEST_BYTES",
    "CodeCheck",
    "DatasetsCatalog",
    "FieldError",
    "RequestInvalid",
    "accept_request",
    "check_request",
    "form_of",
    "parse_request",
    "schema_text",
    "split_request",
    "to_xml",
    "to_yaml",
]
