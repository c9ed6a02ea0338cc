"""Properties of the request parser: no input crashes it (only RequestInvalid), and a valid
request written as XML and as YAML reads back as the same request."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datasched.service.contracts import (
    CommandWork,
    InputSpec,
    MetaJobRequest,
    ProcessorWork,
    RequestInvalid,
    SplitStrategy,
)
from datasched.service.request import parse_request, to_xml, to_yaml

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Generating a whole request costs more than parsing it: fewer of them.
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.text(string.ascii_letters + string.digits + "_-.", min_size=1, max_size=12)
idents = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
free_text = st.text(
    st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs"), exclude_characters="\ufffe\uffff"
    ),
    max_size=30,
).map(str.strip)
paths = st.lists(names, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
queries = st.lists(
    st.tuples(idents, names).map(lambda kv: f"{kv[0]}={kv[1]}"), min_size=1, max_size=3
).map(" ".join)

inputs = st.one_of(
    st.builds(
        InputSpec,
        path=st.one_of(paths, paths.map(lambda p: p + "/*.root"), paths.map("filelist:".__add__)),
        machine=st.none() | names,
        n_files=st.none() | st.integers(1, 10**6),
    ),
    st.builds(InputSpec, catalog=queries, n_files=st.none() | st.integers(1, 10**6)),
)
commands = st.builds(
    CommandWork,
    command=st.lists(names, min_size=1, max_size=4).map(" ".join),
    stdin=st.none() | paths,
    stdout=st.none() | paths,
    stderr=st.none() | paths,
)
args = st.dictionaries(
    idents,
    st.one_of(
        st.integers(-(10**9), 10**9),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        free_text,
    ),
    max_size=3,
)
processors = st.builds(
    ProcessorWork,
    processor=st.one_of(
        st.tuples(idents, idents).map(":".join),
        st.tuples(paths, idents).map(lambda t: f"{t[0]}.py:{t[1]}"),
    ),
    schema=st.sampled_from(["none", "nanoaod"]),
    processor_args=args,
    tree=st.none() | names,
    columns=st.none() | st.lists(names, min_size=1, max_size=3).map(tuple),
)
requests = st.builds(
    MetaJobRequest,
    username=st.just("") | names,
    work=commands | processors,
    inputs=st.lists(inputs, min_size=1, max_size=4).map(tuple),
    title=free_text,
    description=free_text,
    output=st.none() | paths,
    policy=st.none() | names,
    split=st.none() | st.sampled_from(list(SplitStrategy)),
    group=st.none() | names,
    max_files_per_job=st.none() | st.integers(1, 1000),
)


@FEW
@given(requests)
def test_a_request_written_as_xml_and_as_yaml_reads_back_the_same(mjr: MetaJobRequest) -> None:
    assert parse_request(to_xml(mjr), "application/xml") == mjr
    assert parse_request(to_yaml(mjr), "application/yaml") == mjr


def _parses_or_refuses(data: str | bytes, content_type: str) -> None:
    try:
        parse_request(data, content_type)
    except RequestInvalid as exc:
        refused = exc
    else:
        return
    assert refused.errors
    assert all(e.field and e.reason for e in refused.errors)


@FAST
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_no_text_crashes_the_parser(data: str | bytes) -> None:
    for content_type in ("application/xml", "application/yaml", "text/html"):
        _parses_or_refuses(data, content_type)


xml_like = st.recursive(
    st.sampled_from(["ls", "&amp;", "<!-- c -->", "<![CDATA[x]]>", "&#0;", "&lol;"]),
    lambda inner: st.builds(
        lambda tag, attrs, body: f"<{tag}{attrs}>{body}</{tag}>",
        st.sampled_from(["job", "process", "input", "command", "processor", "arg", "x"]),
        st.sampled_from(["", ' URL="file:/a"', ' catalog="a=b"', ' nFiles="x"', ' name="m:f"']),
        st.lists(inner, max_size=3).map("".join),
    ),
    max_leaves=12,
)


@FAST
@given(xml_like, st.sampled_from(["", '<?xml version="1.0"?>', "<!DOCTYPE job>"]))
def test_no_xml_shaped_text_crashes_the_parser(body: str, prolog: str) -> None:
    _parses_or_refuses(prolog + body, "text/xml")


@FEW
@given(requests, st.integers(0, 400), st.sampled_from(["xml", "yaml"]))
def test_a_damaged_request_is_refused_or_read_never_a_crash(
    mjr: MetaJobRequest, cut: int, form: str
) -> None:
    text = to_xml(mjr) if form == "xml" else to_yaml(mjr)
    damaged = text[:cut] + text[cut + 7 :]
    _parses_or_refuses(damaged, f"application/{form}")
