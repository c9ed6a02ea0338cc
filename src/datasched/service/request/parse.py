"""A request's text, by its content type, into a :class:`MetaJobRequest`."""

from __future__ import annotations

from datasched.service.contracts import FieldError, MetaJobRequest, RequestInvalid
from datasched.service.request.xml_form import parse_xml
from datasched.service.request.yaml_form import parse_yaml

__all__ = ["MAX_REQUEST_BYTES", "XML_TYPES", "YAML_TYPES", "form_of", "parse_request"]

MAX_REQUEST_BYTES = 1 << 20
"""The default size limit of a request (1 MiB): a request names its files by query or
wildcard; a list of files goes in a file list on storage."""
XML_TYPES = frozenset({"application/xml", "text/xml"})
YAML_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml", "text/x-yaml"})


def form_of(content_type: str) -> str | None:
    """``"xml"``, ``"yaml"`` or None for a content type (parameters such as ``charset``
    ignored)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in XML_TYPES:
        return "xml"
    if media in YAML_TYPES:
        return "yaml"
    return None


def parse_request(
    text: str | bytes, content_type: str, *, max_bytes: int = MAX_REQUEST_BYTES
) -> MetaJobRequest:
    """The request in ``text``, XML (``application/xml``, ``text/xml``) or YAML
    (``application/yaml``, ``text/yaml``, ``application/x-yaml``), checked for syntax only
    (see :func:`~datasched.service.request.check_request` for the rest). Raises
    :class:`RequestInvalid` with every problem found, each naming its field."""
    form = form_of(content_type)
    if form is None:
        known = ", ".join(sorted(XML_TYPES | YAML_TYPES))
        raise RequestInvalid(
            [FieldError("content-type", f"expected one of {known}, got {content_type!r}")]
        )
    data = text.encode("utf-8", errors="surrogatepass") if isinstance(text, str) else bytes(text)
    if len(data) > max_bytes:
        raise RequestInvalid([FieldError("body", f"at most {max_bytes} bytes, got {len(data)}")])
    if form == "xml":
        return parse_xml(text if isinstance(text, str) else data)
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestInvalid(
            [FieldError("body", f"not UTF-8 text: {exc.reason} at byte {exc.start}")]
        ) from exc
    return parse_yaml(decoded)
