"""The XML form of a meta-job request: the STAR-Scheduler paper's ``<process>`` (Appendix A
of Mandapaka et al.) and STAR's later ``<job>``, parsed safely and validated against the
XML Schema shipped beside this module (``request.xsd``).

Parsing is ``defusedxml``'s: a document with a DTD (``<!DOCTYPE``), and so any entity,
internal (the "billion laughs") or external (``file:///etc/passwd``), is refused, never
expanded. Every violation of the schema, and every problem the schema cannot express, is a
:class:`~datasched.service.contracts.FieldError` naming where it is: ``job.maxFilesPerProcess``
(an attribute of the root), ``input[2].URL`` (the third ``<input>``), ``command`` (text).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
import xmlschema
from defusedxml import DefusedXmlException, DTDForbidden

from datasched.service.contracts import (
    CommandWork,
    InputSpec,
    MetaJobRequest,
    ProcessorWork,
)
from datasched.service.request.fields import (
    ARG_TYPES,
    FILELIST,
    Errors,
    join_location,
    parse_catalog_url,
    strip_file_scheme,
)

__all__ = ["MAX_DEPTH", "MAX_ELEMENTS", "ROOTS", "parse_xml", "schema", "schema_text"]

ROOTS = ("process", "job")
"""The root elements: the paper's and STAR's later form."""
MAX_DEPTH = 8
"""Deeper documents are refused before validation (a request is three levels deep)."""
MAX_ELEMENTS = 10_000

# The paper prints its declaration as ``<? Xml version="1.0" ...?>``, which no XML parser
# takes; only that declaration, at the very start, is read as the one it means.
_PAPER_DECL = re.compile(rb"\A(\xef\xbb\xbf)?\s*<\?\s*xml(?=\s)", re.IGNORECASE)
_PAPER_DECL_TEXT = re.compile(r"\A(\ufeff)?\s*<\?\s*xml(?=\s)", re.IGNORECASE)
_UNEXPECTED = re.compile(r"Unexpected child with tag '([^']+)'")
_ATTR_NAMED = (
    re.compile(r"attribute '?([A-Za-z_][\w.-]*)'?\s*="),
    re.compile(r"'([A-Za-z_][\w.-]*)' attribute not allowed"),
    re.compile(r"missing required attribute '([A-Za-z_][\w.-]*)'"),
)


def schema_text() -> str:
    """The XML Schema (XSD 1.0) of the request language, as published in the docs."""
    return resources.files(__package__).joinpath("request.xsd").read_text(encoding="utf-8")


@functools.cache
def schema() -> xmlschema.XMLSchema10:
    """The schema, loaded once (about a quarter of a second)."""
    return xmlschema.XMLSchema10(schema_text())


def _read(data: str | bytes, errs: Errors) -> Element | None:
    # Text is given to the parser as text: its declared encoding is then moot, as it should
    # be (the text is already decoded); bytes are decoded by their declaration.
    if isinstance(data, str):
        data = _PAPER_DECL_TEXT.sub("<?xml", data, count=1)
    else:
        data = _PAPER_DECL.sub(b"<?xml", data, count=1)
    try:
        root = SafeET.fromstring(data, forbid_dtd=True, forbid_entities=True)
    except DTDForbidden:
        errs.add("body", "a DTD (<!DOCTYPE ...>) is refused: no entity is ever expanded")
    except DefusedXmlException as exc:
        errs.add("body", f"refused: {type(exc).__name__} (entities are never expanded)")
    except ParseError as exc:
        errs.add("body", f"not well-formed XML: {exc}")
    except (ValueError, UnicodeError, RecursionError) as exc:
        errs.add("body", f"not readable XML: {type(exc).__name__}")
    else:
        return root
    return None


def _fields(root: Element) -> dict[int, str]:
    """Each element's field path: the root by its tag, children by tag and index."""
    names = {id(root): root.tag}
    counts: dict[str, int] = {}
    for child in root:
        i = counts.get(str(child.tag), 0)
        counts[str(child.tag)] = i + 1
        base = f"{child.tag}[{i}]" if child.tag in ("input", "arg") else str(child.tag)
        names[id(child)] = base
        args = 0
        for sub in child:
            suffix = f"{sub.tag}[{args}]" if sub.tag == "arg" else str(sub.tag)
            args += sub.tag == "arg"
            names[id(sub)] = f"{base}.{suffix}"
    return names


def _shape_ok(root: Element, errs: Errors) -> bool:
    """Not too deep and not too many elements, checked without recursion."""
    stack = [(root, 1)]
    n = 0
    while stack:
        elem, depth = stack.pop()
        n += 1
        if depth > MAX_DEPTH or n > MAX_ELEMENTS:
            errs.add("body", f"at most {MAX_DEPTH} levels and {MAX_ELEMENTS} elements")
            return False
        stack.extend((c, depth + 1) for c in elem)
    return True


def _validate(root: Element, errs: Errors) -> None:
    if root.tag not in ROOTS:
        errs.add("body", f"the root element is <process> or <job>, got <{root.tag}>")
        return
    names = _fields(root)
    # Location hints (xsi:schemaLocation) in a request are never followed: only our schema.
    for error in schema().iter_errors(root, use_location_hints=False):
        elem = error.elem
        field = names.get(id(elem), root.tag) if elem is not None else root.tag
        reason = " ".join(str(error.reason or error.message).split())
        child = _UNEXPECTED.search(reason)
        if child:
            field = child.group(1)
        for pattern in _ATTR_NAMED:
            m = pattern.search(reason)
            if m:
                field = f"{field}.{m.group(1)}"
                break
        errs.add(field, reason)


def parse_xml(data: str | bytes) -> MetaJobRequest:
    """The request in ``data`` (an XML document); :class:`RequestInvalid` with every
    problem found otherwise."""
    errs = Errors()
    root = _read(data, errs)
    if root is None or not _shape_ok(root, errs):
        errs.raise_if_any()
    assert root is not None
    _validate(root, errs)
    if root.tag not in ROOTS:
        errs.raise_if_any()
    # The rest is checked even where the schema found problems, so that every problem is
    # reported at once; a field the schema already named is not named twice.
    more = Errors()
    request = _build(root, more)
    named = {e.field for e in errs.items}
    errs.items.extend(e for e in more.items if e.field not in named)
    errs.raise_if_any()
    assert request is not None
    return request


def _one(children: Mapping[str, list[Element]], tag: str, errs: Errors) -> Element | None:
    elems = children.get(tag, [])
    if len(elems) > 1:
        errs.add(tag, f"at most one <{tag}>, got {len(elems)}")
    return elems[0] if elems else None


def _stream(elem: Element | None, tag: str, errs: Errors) -> str | None:
    """``<stdout>``/``<stderr>``/``<stdin URL=>``: a location, by URL or path + name."""
    if elem is None:
        return None
    a = elem.attrib
    if "URL" in a and ("path" in a or "name" in a):
        errs.add(tag, "give URL, or path and name, not both")
        return None
    if "URL" in a:
        return errs.location(f"{tag}.URL", strip_file_scheme(a["URL"]))
    where = join_location(a.get("path"), a.get("name"))
    if where is None:
        errs.add(tag, "expected URL, or path and name")
        return None
    return errs.location(f"{tag}.path", where)


def _input(elem: Element, i: int, errs: Errors) -> InputSpec | None:
    a = elem.attrib
    field = f"input[{i}]"
    kinds = [k for k in ("URL", "catalog", "path") if k in a]
    if "name" in a and "path" not in a:
        errs.add(f"{field}.path", "missing: the paper's input is a file list, by path and name")
        return None
    if len(kinds) != 1:
        errs.add(field, "expected exactly one of URL, catalog, or path and name")
        return None
    n_files = errs.positive_int(f"{field}.nFiles", a["nFiles"]) if "nFiles" in a else None
    machine = errs.name(f"{field}.machine", a["machine"], what="host") if "machine" in a else None
    path = catalog = None
    if "catalog" in a:
        catalog = a["catalog"].strip()
    elif "path" in a:
        if "name" not in a:
            errs.add(f"{field}.name", "missing: the paper's input is a file list, by path and name")
            return None
        path = FILELIST + str(join_location(a["path"], a["name"]))
    else:
        url = a["URL"].strip()
        if url.startswith("catalog:"):
            catalog = parse_catalog_url(url)
        elif url.startswith(FILELIST):
            path = FILELIST + strip_file_scheme(url[len(FILELIST) :].strip())
        else:
            path = strip_file_scheme(url)
    if catalog is not None:
        if not catalog:
            errs.add(f"{field}.catalog", "an empty query")
            return None
        if machine is not None:
            errs.add(f"{field}.machine", "only with a path: the catalog knows where its files are")
            return None
        return InputSpec(catalog=catalog, n_files=n_files)
    loc = errs.location(f"{field}.{'URL' if 'URL' in a else 'path'}", path)
    return InputSpec(path=loc, machine=machine, n_files=n_files) if loc else None


def _arg_value(elem: Element, field: str, errs: Errors) -> Any:
    kind = elem.attrib.get("type", "str")
    text = elem.text or ""
    if kind not in ARG_TYPES:
        errs.add(f"{field}.type", f"expected one of {', '.join(ARG_TYPES)}, got {kind!r}")
        return None
    if kind == "str":
        return text
    raw = text.strip()
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        errs.add(field, f"expected a {kind}, got {text!r}")
        return None
    if raw in ("true", "1"):
        return True
    if raw in ("false", "0"):
        return False
    errs.add(field, f"expected true or false, got {text!r}")
    return None


def _processor(elem: Element, errs: Errors) -> ProcessorWork | None:
    a = elem.attrib
    ref = errs.processor("processor.name", a.get("name"))
    args: dict[str, Any] = {}
    for i, arg in enumerate(elem.findall("arg")):
        field = f"processor.arg[{i}]"
        name = arg.attrib.get("name", "")
        if not name.isidentifier():
            errs.add(f"{field}.name", f"expected an argument name, got {name!r}")
        elif name in args:
            errs.add(f"{field}.name", f"{name!r} given twice")
        else:
            args[name] = _arg_value(arg, field, errs)
    columns: tuple[str, ...] | None = None
    if "columns" in a:
        columns = tuple(a["columns"].split())
        if not columns:
            errs.add("processor.columns", "expected branch names or globs, separated by spaces")
    tree = a.get("tree")
    if tree is not None and not tree.strip():
        errs.add("processor.tree", "an empty tree name")
    schema_name = a.get("schema", "none").strip() or "none"
    if ref is None:
        return None
    return ProcessorWork(ref, schema_name, args, tree, columns)


def _build(root: Element, errs: Errors) -> MetaJobRequest | None:
    a = root.attrib
    form = str(root.tag)
    children: dict[str, list[Element]] = {}
    for child in root:
        children.setdefault(str(child.tag), []).append(child)

    username = (
        errs.name(f"{form}.username", a["username"], what="user name") if "username" in a else ""
    )
    title_key = "title" if form == "process" else "name"
    title = errs.text(f"{form}.{title_key}", a.get(title_key, ""), limit=256)
    description = errs.text(f"{form}.description", a.get("description", ""))
    group = errs.name(f"{form}.group", a["group"], what="group") if "group" in a else None
    policy = errs.name(f"{form}.policy", a["policy"], what="policy") if "policy" in a else None
    split = errs.split(f"{form}.split", a["split"]) if "split" in a else None
    max_files = None
    if "maxFilesPerProcess" in a:
        max_files = errs.positive_int(f"{form}.maxFilesPerProcess", a["maxFilesPerProcess"])
    if a.get("simulateSubmission", "false").strip() in ("true", "1"):
        errs.add(
            f"{form}.simulateSubmission",
            "a simulated submission is `datasched request check`; the service runs what it takes",
        )

    commands = [e.text or "" for e in children.get("command", [])]
    if "command" in a:
        commands.insert(0, a["command"])
    processors = children.get("processor", [])
    work: CommandWork | ProcessorWork | None = None
    streams = {t: _one(children, t, errs) for t in ("stdin", "stdout", "stderr")}
    if len(commands) + len(processors) != 1:
        errs.add(
            "command" if commands else "processor",
            "expected one command or one processor"
            + (f", got {len(commands) + len(processors)}" if commands or processors else ""),
        )
    elif commands:
        work = _command(form, commands[0], streams, errs)
    else:
        work = _processor(processors[0], errs)
        for tag, elem in streams.items():
            if elem is not None:
                errs.add(tag, "only with a command (a processor's result goes to <output>)")

    inputs = [_input(e, i, errs) for i, e in enumerate(children.get("input", []))]
    if not inputs:
        errs.add("input", "missing: a request reads at least one <input>")
    out = _one(children, "output", errs)
    output = (
        errs.location("output.toURL", strip_file_scheme(out.attrib.get("toURL", "")))
        if out is not None
        else None
    )
    if errs or work is None:
        return None
    return MetaJobRequest(
        username=username or "",
        work=work,
        inputs=tuple(i for i in inputs if i is not None),
        title=title,
        description=description,
        output=output,
        policy=policy,
        split=split,
        group=group,
        max_files_per_job=max_files,
    )


def _command(
    form: str, command: str, streams: Mapping[str, Element | None], errs: Errors
) -> CommandWork | None:
    field = f"{form}.command" if form == "process" else "command"
    command = command.strip()
    if not command:
        errs.add(field, "an empty command")
        return None
    stdin_elem = streams["stdin"]
    stdin = None
    if stdin_elem is not None and "URL" not in stdin_elem.attrib:
        # The paper's <stdin>: name is the command's arguments, path its working directory
        # (the worker runs it in its own scratch directory, where its inputs are).
        args = " ".join(stdin_elem.attrib.get("name", "").split())
        command = f"{command} {args}" if args else command
    else:
        stdin = _stream(stdin_elem, "stdin", errs)
    return CommandWork(
        command,
        stdin=stdin,
        stdout=_stream(streams["stdout"], "stdout", errs),
        stderr=_stream(streams["stderr"], "stderr", errs),
    )
