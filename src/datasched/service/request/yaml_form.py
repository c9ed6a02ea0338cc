"""The YAML form of a meta-job request: the same fields as the XML form, in YAML's words::

    username: einstein
    title: my_program
    command: program_name -r
    stdout: /home/einstein/output/output.log
    inputs:
      - path: filelist:/usr/local/prog_input/my_data.list
        machine: node0.physics.wayne.edu
      - dataset: {query: "year=2004 system=AuAu"}
        n_files: 10

Read with YAML's safe loader (``yaml.safe_load``'s, or libyaml's where PyYAML has it: no
Python objects), after counting its aliases: a document that refers to anchors more than
:data:`MAX_ALIASES` times, or whose expansion holds more than :data:`MAX_NODES` values, is
refused (the "billion laughs" of YAML). Unknown keys are refused, each named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from datasched.service.contracts import CommandWork, InputSpec, MetaJobRequest, ProcessorWork
from datasched.service.request.fields import FILELIST, Errors, strip_file_scheme

__all__ = ["INPUT_KEYS", "MAX_ALIASES", "MAX_NODES", "PROCESSOR_KEYS", "TOP_KEYS", "parse_yaml"]

MAX_ALIASES = 64
MAX_NODES = 100_000
TOP_KEYS = (
    "username",
    "title",
    "description",
    "group",
    "policy",
    "split",
    "max_files_per_job",
    "command",
    "stdin",
    "stdout",
    "stderr",
    "processor",
    "inputs",
    "output",
)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (several times faster), else PyYAML's own."""
PROCESSOR_KEYS = ("name", "schema", "tree", "columns", "args")
INPUT_KEYS = ("path", "machine", "dataset", "n_files")


def _load(text: str, errs: Errors) -> Any:
    try:
        aliases = sum(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=_LOADER))
        if aliases > MAX_ALIASES:
            errs.add("body", f"at most {MAX_ALIASES} aliases (*name), got {aliases}")
            return None
        doc = yaml.load(text, Loader=_LOADER)  # a safe loader: no Python objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        errs.add("body", f"not valid YAML{line}: {problem}")
        return None
    except (RecursionError, ValueError, UnicodeError) as exc:
        errs.add("body", f"not readable YAML: {type(exc).__name__}")
        return None
    # Aliases are shared objects; what a reader walks is their expansion: count it.
    budget = MAX_NODES
    stack = [doc]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            errs.add("body", f"at most {MAX_NODES} values once aliases are expanded")
            return None
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return doc


def _unknown(doc: Mapping[Any, Any], known: tuple[str, ...], where: str, errs: Errors) -> None:
    for key in doc:
        if key not in known:
            field = f"{where}.{key}" if where else str(key)
            errs.add(field, f"unknown key (expected {', '.join(known)})")


def parse_yaml(text: str) -> MetaJobRequest:
    """The request in ``text`` (a YAML document); :class:`RequestInvalid` with every
    problem found otherwise."""
    errs = Errors()
    doc = _load(text, errs)
    errs.raise_if_any()
    if not isinstance(doc, Mapping):
        errs.add("body", f"expected a mapping of {', '.join(TOP_KEYS)}")
        errs.raise_if_any()
    request = _build(doc, errs)
    errs.raise_if_any()
    assert request is not None
    return request


def _where(value: Any) -> Any:
    return strip_file_scheme(value) if isinstance(value, str) else value


def _build(doc: Mapping[Any, Any], errs: Errors) -> MetaJobRequest | None:
    _unknown(doc, TOP_KEYS, "", errs)
    username = errs.name("username", doc["username"], what="user name") if "username" in doc else ""
    title = errs.text("title", doc.get("title", ""), limit=256)
    description = errs.text("description", doc.get("description", ""))
    group = errs.name("group", doc["group"], what="group") if "group" in doc else None
    policy = errs.name("policy", doc["policy"], what="policy") if "policy" in doc else None
    split = errs.split("split", doc["split"]) if "split" in doc else None
    max_files = None
    if "max_files_per_job" in doc:
        max_files = errs.positive_int("max_files_per_job", doc["max_files_per_job"])

    work: CommandWork | ProcessorWork | None = None
    streams = [k for k in ("stdin", "stdout", "stderr") if k in doc]
    if ("command" in doc) == ("processor" in doc):
        errs.add("command", "expected one of command or processor")
    elif "command" in doc:
        command = doc["command"]
        if not isinstance(command, str) or not command.strip():
            errs.add("command", f"expected a command line, got {command!r}")
        else:
            locs = {k: errs.location(k, _where(doc[k])) for k in streams}
            work = CommandWork(
                command.strip(), locs.get("stdin"), locs.get("stdout"), locs.get("stderr")
            )
    else:
        work = _processor(doc["processor"], errs)
        for key in streams:
            errs.add(key, "only with a command (a processor's result goes to output)")

    raw_inputs = doc.get("inputs")
    inputs: list[InputSpec | None] = []
    if not isinstance(raw_inputs, list) or not raw_inputs:
        errs.add("inputs", "expected a non-empty list of inputs")
    else:
        inputs = [_input(item, i, errs) for i, item in enumerate(raw_inputs)]
    output = None
    if "output" in doc:
        output = errs.location("output", _where(doc["output"]))
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


def _processor(spec: Any, errs: Errors) -> ProcessorWork | None:
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, Mapping):
        errs.add("processor", "expected a mapping with name (module:attr or file.py:attr)")
        return None
    _unknown(spec, PROCESSOR_KEYS, "processor", errs)
    ref = errs.processor("processor.name", spec.get("name"))
    schema = spec.get("schema", "none")
    if not isinstance(schema, str):
        errs.add("processor.schema", f"expected a schema name, got {schema!r}")
    tree = spec.get("tree")
    if tree is not None and (not isinstance(tree, str) or not tree.strip()):
        errs.add("processor.tree", f"expected a tree name, got {tree!r}")
    columns = spec.get("columns")
    if columns is not None:
        if isinstance(columns, str):
            columns = columns.split()
        if (
            not isinstance(columns, list)
            or not columns
            or not all(
                isinstance(c, str) and c and not any(s.isspace() for s in c) for c in columns
            )
        ):
            errs.add("processor.columns", "expected a list of branch names or globs")
            columns = None
        else:
            columns = tuple(columns)
    raw_args = spec.get("args", {})
    args: dict[str, Any] = {}
    if not isinstance(raw_args, Mapping):
        errs.add("processor.args", "expected a mapping of argument names to values")
    else:
        for name, value in raw_args.items():
            if not isinstance(name, str) or not name.isidentifier():
                errs.add(f"processor.args.{name}", "expected an argument name")
            else:
                args[name] = errs.arg(f"processor.args.{name}", value)
    if ref is None or not isinstance(schema, str):
        return None
    return ProcessorWork(ref, schema.strip() or "none", args, tree, columns)


def _input(item: Any, i: int, errs: Errors) -> InputSpec | None:
    field = f"inputs[{i}]"
    if isinstance(item, str):
        item = {"path": item}
    if not isinstance(item, Mapping):
        errs.add(field, "expected a mapping with path, or dataset: {query: ...}")
        return None
    _unknown(item, INPUT_KEYS, field, errs)
    n_files = errs.positive_int(f"{field}.n_files", item["n_files"]) if "n_files" in item else None
    machine = None
    if "machine" in item:
        machine = errs.name(f"{field}.machine", item["machine"], what="host")
    if ("path" in item) == ("dataset" in item):
        errs.add(field, "expected exactly one of path or dataset")
        return None
    if "dataset" in item:
        dataset = item["dataset"]
        if not isinstance(dataset, Mapping):
            errs.add(f"{field}.dataset", "expected {query: ...}")
            return None
        _unknown(dataset, ("query",), f"{field}.dataset", errs)
        query = dataset.get("query")
        if not isinstance(query, str) or not query.strip():
            errs.add(f"{field}.dataset.query", f"expected a catalog query, got {query!r}")
            return None
        if "machine" in item:
            errs.add(f"{field}.machine", "only with a path: the catalog knows where its files are")
            return None
        return InputSpec(catalog=query.strip(), n_files=n_files)
    path = item["path"]
    if isinstance(path, str) and path.startswith(FILELIST):
        path = FILELIST + strip_file_scheme(path[len(FILELIST) :].strip())
    elif isinstance(path, str):
        path = strip_file_scheme(path)
    loc = errs.location(f"{field}.path", path)
    return InputSpec(path=loc, machine=machine, n_files=n_files) if loc else None
