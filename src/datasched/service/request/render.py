"""A parsed request written back as text: XML (STAR's ``<job>`` form) or YAML. Reading
what these write gives the same :class:`MetaJobRequest` (tested as a property), so a
request can be stored, shown and resubmitted in either form."""

from __future__ import annotations

from typing import Any
from xml.etree.ElementTree import Element, SubElement, indent, tostring

import yaml

from datasched.service.contracts import CommandWork, InputSpec, MetaJobRequest
from datasched.service.request.fields import FILELIST

__all__ = ["to_xml", "to_yaml"]


def _url(path: str) -> str:
    """A location as an XML ``URL``: ``file:`` before it, which reading takes off again
    (so that a path that happens to begin with ``catalog:`` stays a path)."""
    return path if path.startswith(FILELIST) else f"file:{path}"


def _arg_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def _arg_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def to_xml(request: MetaJobRequest) -> str:
    """The request as a ``<job>`` document (UTF-8, with its declaration)."""
    attrs: dict[str, str] = {}
    for key, value in (
        ("username", request.username),
        ("name", request.title),
        ("description", request.description),
        ("group", request.group),
        ("policy", request.policy),
        ("split", request.split.value if request.split else None),
        ("maxFilesPerProcess", str(request.max_files_per_job or "") or None),
    ):
        if value:
            attrs[key] = value
    job = Element("job", attrs)
    work = request.work
    if isinstance(work, CommandWork):
        SubElement(job, "command").text = work.command
        for tag in ("stdin", "stdout", "stderr"):
            where = getattr(work, tag)
            if where is not None:
                SubElement(job, tag, {"URL": _url(where)})
    else:
        proc = {"name": work.processor}
        if work.schema != "none":
            proc["schema"] = work.schema
        if work.tree is not None:
            proc["tree"] = work.tree
        if work.columns is not None:
            proc["columns"] = " ".join(work.columns)
        elem = SubElement(job, "processor", proc)
        for name, value in work.processor_args.items():
            SubElement(elem, "arg", {"name": name, "type": _arg_type(value)}).text = _arg_text(
                value
            )
    for spec in request.inputs:
        SubElement(job, "input", _input_attrs(spec))
    if request.output is not None:
        SubElement(job, "output", {"toURL": _url(request.output)})
    indent(job)
    body = tostring(job, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def _input_attrs(spec: InputSpec) -> dict[str, str]:
    attrs: dict[str, str] = {}
    if spec.catalog is not None:
        attrs["catalog"] = spec.catalog
    elif spec.path is not None:
        attrs["URL"] = _url(spec.path)
    if spec.machine is not None:
        attrs["machine"] = spec.machine
    if spec.n_files is not None:
        attrs["nFiles"] = str(spec.n_files)
    return attrs


def to_yaml(request: MetaJobRequest) -> str:
    """The request as a YAML document."""
    doc: dict[str, Any] = {}
    for key, value in (
        ("username", request.username),
        ("title", request.title),
        ("description", request.description),
        ("group", request.group),
        ("policy", request.policy),
        ("split", request.split.value if request.split else None),
        ("max_files_per_job", request.max_files_per_job),
    ):
        if value:
            doc[key] = value
    work = request.work
    if isinstance(work, CommandWork):
        doc["command"] = work.command
        for key in ("stdin", "stdout", "stderr"):
            if getattr(work, key) is not None:
                doc[key] = getattr(work, key)
    else:
        proc: dict[str, Any] = {"name": work.processor}
        if work.schema != "none":
            proc["schema"] = work.schema
        if work.tree is not None:
            proc["tree"] = work.tree
        if work.columns is not None:
            proc["columns"] = list(work.columns)
        if work.processor_args:
            proc["args"] = dict(work.processor_args)
        doc["processor"] = proc
    inputs = []
    for spec in request.inputs:
        item: dict[str, Any] = {}
        if spec.catalog is not None:
            item["dataset"] = {"query": spec.catalog}
        elif spec.path is not None:
            item["path"] = spec.path
        if spec.machine is not None:
            item["machine"] = spec.machine
        if spec.n_files is not None:
            item["n_files"] = spec.n_files
        inputs.append(item)
    doc["inputs"] = inputs
    if request.output is not None:
        doc["output"] = request.output
    return str(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
