"""The request language's syntax: the paper's Appendix A, STAR's ``<job>`` form and the YAML
form mean the same; every malformed field is named; hostile XML and YAML are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from datasched.service.contracts import (
    CommandWork,
    InputSpec,
    MetaJobRequest,
    ProcessorWork,
    RequestInvalid,
    SplitStrategy,
)
from datasched.service.request import parse_request, schema_text, to_xml, to_yaml

DATA = Path(__file__).parents[1] / "data" / "service"
XML = "application/xml"
YAML = "application/yaml"


def fields_of(text: str | bytes, content_type: str) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as info:
        parse_request(text, content_type)
    return {e.field: e.reason for e in info.value.errors}


def test_the_papers_appendix_a_parses_as_printed() -> None:
    # As printed, with the paper's "<? Xml" declaration and attributes over several lines.
    mjr = parse_request((DATA / "appendix_a.xml").read_bytes(), XML)
    assert mjr == MetaJobRequest(
        username="einstein",
        title="my_program",
        description="a_simple_sample",
        # <stdin name="-r "> holds the command's arguments (the paper's Appendix A).
        work=CommandWork("program_name -r", stdout="/home/user/einstein/output/output.log"),
        # <input name path machine> names a file listing the data files, on node0.
        inputs=(
            InputSpec(
                path="filelist:/usr/local/prog_input/my_data.list",
                machine="node0.physics.wayne.edu",
            ),
        ),
    )


JOB_XML = """<?xml version="1.0" encoding="UTF-8"?>
<job username="einstein" name="muons" description="dimuon mass" maxFilesPerProcess="10"
     simulateSubmission="false" split="by-host" policy="out-of-order" group="heavy-ions">
  <command>root4star -q -b myMacro.C\\(\\"$FILELIST\\"\\)</command>
  <stdout URL="file:/star/out/$JOBID.out"/>
  <stderr URL="file:/star/out/$JOBID.err"/>
  <input URL="catalog:star.bnl.gov?year=2004,system=AuAu" nFiles="40"/>
  <input catalog="year=2005 system=CuCu"/>
  <input URL="file:/star/data/*.MuDst.root" machine="rcas6001"/>
  <input URL="filelist:/star/u/einstein/files.list"/>
  <input URL="root://xrd.bnl.gov//star/a.root"/>
</job>
"""

JOB_YAML = r"""
username: einstein
title: muons
description: dimuon mass
max_files_per_job: 10
split: by-host
policy: out-of-order
group: heavy-ions
command: root4star -q -b myMacro.C\(\"$FILELIST\"\)
stdout: /star/out/$JOBID.out
stderr: file:/star/out/$JOBID.err
inputs:
  - dataset: {query: "year=2004 system=AuAu"}
    n_files: 40
  - dataset: {query: year=2005 system=CuCu}
  - path: /star/data/*.MuDst.root
    machine: rcas6001
  - filelist:/star/u/einstein/files.list
  - path: root://xrd.bnl.gov//star/a.root
"""


def test_star_job_form_and_yaml_give_the_same_request() -> None:
    from_xml = parse_request(JOB_XML, XML)
    from_yaml = parse_request(JOB_YAML, YAML)
    assert from_xml == from_yaml
    assert from_xml.max_files_per_job == 10
    assert from_xml.split is SplitStrategy.BY_HOST
    assert from_xml.inputs[0] == InputSpec(catalog="year=2004 system=AuAu", n_files=40)
    assert from_xml.inputs[3].path == "filelist:/star/u/einstein/files.list"
    assert isinstance(from_xml.work, CommandWork)
    assert from_xml.work.command == r"root4star -q -b myMacro.C\(\"$FILELIST\"\)"


def test_processor_requests_in_both_forms() -> None:
    xml = """<job username="u"><processor name="analysis.dimuon:Dimuon" schema="nanoaod"
      tree="Events" columns="Muon_pt Muon_eta"><arg name="bins" type="int">50</arg>
      <arg name="scale" type="float">1.5</arg><arg name="label">mu mu</arg>
      <arg name="mc" type="bool">true</arg></processor>
      <input catalog="dataset=zmumu"/><output toURL="file:/out/result.pkl"/></job>"""
    yaml_text = """username: u
processor:
  name: analysis.dimuon:Dimuon
  schema: nanoaod
  tree: Events
  columns: [Muon_pt, Muon_eta]
  args: {bins: 50, scale: 1.5, label: mu mu, mc: true}
inputs: [{dataset: {query: dataset=zmumu}}]
output: /out/result.pkl
"""
    a, b = parse_request(xml, XML), parse_request(yaml_text, "text/yaml; charset=utf-8")
    assert a == b
    assert a.work == ProcessorWork(
        "analysis.dimuon:Dimuon",
        "nanoaod",
        {"bins": 50, "scale": 1.5, "label": "mu mu", "mc": True},
        "Events",
        ("Muon_pt", "Muon_eta"),
    )
    assert parse_request(to_xml(a), XML) == a == parse_request(to_yaml(a), YAML)


MINIMAL = '<job><command>ls</command><input URL="file:/d/a.root"/>{}</job>'


@pytest.mark.parametrize(
    ("xml", "field"),
    [
        (
            '<job maxFilesPerProcess="ten"><command>ls</command><input catalog="a=b"/></job>',
            "job.maxFilesPerProcess",
        ),
        (
            '<job maxFilesPerProcess="0"><command>ls</command><input catalog="a=b"/></job>',
            "job.maxFilesPerProcess",
        ),
        (
            '<job minFilesPerProcess="2"><command>ls</command><input catalog="a=b"/></job>',
            "job.minFilesPerProcess",
        ),
        ('<job split="by-moon"><command>ls</command><input catalog="a=b"/></job>', "job.split"),
        (
            '<job simulateSubmission="true"><command>ls</command><input catalog="a=b"/></job>',
            "job.simulateSubmission",
        ),
        ('<job><command>ls</command><input catalog="a=b" nFiles="-3"/></job>', "input[0].nFiles"),
        (
            '<job><command>ls</command><input catalog="a=b"/><input URL="x" catalog="y"/></job>',
            "input[1]",
        ),
        (
            '<job><command>ls</command><input catalog="a=b"/><input name="l.list"/></job>',
            "input[1].path",
        ),
        ("<job><command>ls</command></job>", "input"),
        ('<job><input catalog="a=b"/></job>', "processor"),
        ('<job><command>ls</command><command>ls</command><input catalog="a=b"/></job>', "command"),
        ('<job><command>ls</command><input catalog="a=b"/><banana/></job>', "banana"),
        ('<job><command>ls</command><stdout/><input catalog="a=b"/></job>', "stdout"),
        ('<job><processor name="not a ref"/><input catalog="a=b"/></job>', "processor.name"),
        (
            '<job><processor name="m:f"><arg name="n" type="int">x</arg></processor>'
            '<input catalog="a=b"/></job>',
            "processor.arg[0]",
        ),
        (
            '<job><processor name="m:f"/><stdout URL="file:/o"/><input catalog="a=b"/></job>',
            "stdout",
        ),
        (
            '<job username="two words"><command>ls</command><input catalog="a=b"/></job>',
            "job.username",
        ),
        ('<job><command>ls</command><input catalog="a=b" machine="n1"/></job>', "input[0].machine"),
        ('<process command="ls" colour="red"><input catalog="a=b"/></process>', "process.colour"),
        ("<request/>", "body"),
    ],
)
def test_every_malformed_xml_field_is_named(xml: str, field: str) -> None:
    assert field in fields_of(xml, XML)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("command: ls\ninputs: [/a]\ncolour: red\n", "colour"),
        ("command: ls\ninputs: [{path: /a, nfiles: 2}]\n", "inputs[0].nfiles"),
        ("command: ls\ninputs: [{path: /a, n_files: 0}]\n", "inputs[0].n_files"),
        ("command: ls\ninputs: []\n", "inputs"),
        ("command: ls\ninputs: [{dataset: {query: ''}}]\n", "inputs[0].dataset.query"),
        ("command: ls\ninputs: [{dataset: {name: x}}]\n", "inputs[0].dataset.name"),
        ("inputs: [/a]\n", "command"),
        ("command: ls\nprocessor: m:f\ninputs: [/a]\n", "command"),
        ("processor: {name: m:f, args: {x: [1, 2]}}\ninputs: [/a]\n", "processor.args.x"),
        ("processor: {name: m:f, colour: 1}\ninputs: [/a]\n", "processor.colour"),
        ("command: ls\nsplit: sideways\ninputs: [/a]\n", "split"),
        ("command: ls\nmax_files_per_job: true\ninputs: [/a]\n", "max_files_per_job"),
        ("- just\n- a list\n", "body"),
        ("command: [unclosed\n", "body"),
    ],
)
def test_every_malformed_yaml_field_is_named(text: str, field: str) -> None:
    assert field in fields_of(text, YAML)


def test_every_error_is_reported_not_only_the_first() -> None:
    xml = (
        '<job maxFilesPerProcess="x" split="no"><command>ls</command>'
        '<input catalog="a=b" nFiles="0"/><input/></job>'
    )
    assert {"job.maxFilesPerProcess", "job.split", "input[0].nFiles", "input[1]"} <= set(
        fields_of(xml, XML)
    )
    yaml_text = "command: ''\nsplit: no\ninputs: [{path: /a, n_files: -1}, {what: 1}]\nx: 1\n"
    assert {"command", "split", "inputs[0].n_files", "inputs[1].what", "x"} <= set(
        fields_of(yaml_text, YAML)
    )


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol">
<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<job name="&lol4;"><command>ls</command><input catalog="a=b"/></job>"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE job [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<job><command>&xxe;</command><input catalog="a=b"/></job>"""
EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE job SYSTEM "http://127.0.0.1:9/job.dtd">
<job><command>ls</command><input catalog="a=b"/></job>"""


@pytest.mark.parametrize("xml", [BILLION_LAUGHS, EXTERNAL, EXTERNAL_DTD])
def test_dtds_and_entities_are_refused_never_expanded(xml: str) -> None:
    errors = fields_of(xml, XML)
    assert list(errors) == ["body"]
    assert "DTD" in errors["body"]
    assert "root:" not in errors["body"]  # nothing of /etc/passwd


def test_yaml_alias_bombs_are_refused() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    lines.append("command: ls\ninputs: [/x]")
    errors = fields_of("\n".join(lines), YAML)
    assert list(errors) == ["body"]
    assert "aliases" in errors["body"]
    # Few aliases, but an expansion of 10^6 values:
    few = ["a: &a [" + ", ".join(["x"] * 100) + "]"]
    few.append("b: &b [" + ", ".join(["*a"] * 30) + "]")
    few.append("c: [" + ", ".join(["*b"] * 33) + "]")
    errors = fields_of("\n".join(few), YAML)
    assert list(errors) == ["body"]
    assert "expanded" in errors["body"]


def test_content_type_and_size() -> None:
    assert list(fields_of("x", "text/plain")) == ["content-type"]
    with pytest.raises(RequestInvalid) as info:
        parse_request(b"<job/>" + b" " * 100, XML, max_bytes=50)
    assert info.value.errors[0].field == "body"
    assert list(fields_of(b"command: \xff\n", YAML)) == ["body"]


def test_the_published_schema_is_the_one_validating() -> None:
    doc = Path(__file__).parents[2] / "docs" / "service-requests.xsd"
    assert doc.read_text(encoding="utf-8") == schema_text()


def test_schema_location_hints_are_not_followed(tmp_path: Path) -> None:
    strict = tmp_path / "strict.xsd"
    strict.write_text(
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
        '<xs:element name="other"/></xs:schema>'
    )
    xml = (
        '<job xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:noNamespaceSchemaLocation="{strict.as_uri()}">'
        '<command>ls</command><input catalog="a=b"/></job>'
    )
    assert parse_request(xml, XML).inputs[0].catalog == "a=b"


def test_the_documented_examples_parse_and_agree() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "service-requests.md").read_text()
    blocks = doc.split("```")
    xml = [b.removeprefix("xml\n") for b in blocks if b.startswith("xml\n")]
    yaml_blocks = [b.removeprefix("yaml\n") for b in blocks if b.startswith("yaml\n")]
    assert len(xml) == 3
    assert len(yaml_blocks) == 2
    parsed_xml = [parse_request(x, XML) for x in xml]
    parsed_yaml = [parse_request(y, YAML) for y in yaml_blocks]
    # The <job> example and the first YAML one are the same request; so are the processors.
    assert parsed_xml[1] == parsed_yaml[0]
    assert parsed_xml[2] == parsed_yaml[1]


def test_xml_text_and_bytes_in_any_declared_encoding() -> None:
    doc = '<?xml version="1.0" encoding="ISO-8859-1"?><job name="Réaction"><command>ls</command>'
    doc += '<input catalog="a=b"/></job>'
    assert parse_request(doc, XML).title == "Réaction"
    assert parse_request(doc.encode("latin-1"), XML).title == "Réaction"
