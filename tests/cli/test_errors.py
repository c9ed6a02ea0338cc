"""Errors as the README promises them: an unusable ``--scheduler``, an output that cannot be
written and a malformed YAML file each get one line (at most two for YAML) naming the option
or the file's line and column, exit code 2, and nothing written; and the small things a new
user sees in ``--help``, ``datasched policies`` and the demo's timelines."""

from __future__ import annotations

import io
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from datasched.cli import app
from datasched.cli import info as cli_info
from datasched.cli.app import plain_flags
from datasched.policies import available
from datasched.sim import parallel
from runtime_support import free_port

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the command line with its path (``("reproduce", "ponce")``)."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


ALL_COMMANDS = list(_commands(typer.main.get_command(app)))


def _one_error_line(result: Any, prefix: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return str(lines[0])


# -- --scheduler ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jobs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A jobs file over a small demo dataset: what ``run`` checks before it connects."""
    pytest.importorskip("uproot")
    from datasched.runtime.demodata import write_demo_dataset

    root = tmp_path_factory.mktemp("jobs")
    write_demo_dataset(root / "data", n_events=200, n_files=1)
    path = root / "jobs.yaml"
    path.write_text(
        f"catalog: {root / 'data' / 'catalog.yaml'}\n"
        "jobs:\n"
        "  - id: a\n"
        "    dataset: zmumu\n"
        "    processor: datasched.runtime.demodata:DimuonMass\n"
        f"    output: {root / 'out' / 'a.pkl'}\n"
    )
    return path


def _scheduler_args(path: tuple[str, ...], tmp_path: Path, jobs_file: Path) -> list[str]:
    """What each command that takes --scheduler needs besides it to get that far."""
    extra = {
        ("run",): [str(jobs_file)],
        ("serve",): ["--db", str(tmp_path / "s.db")],
        ("perf-map",): ["--out", str(tmp_path / "o" / "m.json")],
    }
    if path in extra:
        return [*path, *extra[path]]
    return [*path, "--out", str(tmp_path / "o")]


SCHEDULER_COMMANDS = sorted(
    path for path, cmd in ALL_COMMANDS if any("--scheduler" in p.opts for p in cmd.params)
)


def test_the_commands_that_take_a_scheduler_are_the_ones_we_know() -> None:
    # A new one is added here once it is known to check --scheduler at once.
    assert SCHEDULER_COMMANDS == [
        ("demo-sim",),
        ("perf-map",),
        ("reproduce", "grid"),
        ("reproduce", "ponce"),
        ("reproduce", "romosan"),
        ("run",),
        ("serve",),
        ("sweep",),
    ]


@pytest.mark.parametrize("path", SCHEDULER_COMMANDS, ids=" ".join)
def test_a_refused_scheduler_is_one_line_at_once_in_every_command(
    path: tuple[str, ...], tmp_path: Path, jobs_file: Path
) -> None:
    if path == ("serve",):
        pytest.importorskip("uvicorn")
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    args = [*_scheduler_args(path, tmp_path, jobs_file), "--scheduler", address]
    result = runner.invoke(app, args)
    line = _one_error_line(result, f"error: --scheduler: {address}: nothing listens there")
    assert "connection refused" in line
    assert result.stdout == ""
    assert not (tmp_path / "o").exists()
    assert not (tmp_path / "s.db").exists()


def test_a_scheduler_host_that_does_not_resolve_is_named(jobs_file: Path) -> None:
    result = runner.invoke(app, ["run", str(jobs_file), "--scheduler", "tcp://head.invalid:8786"])
    _one_error_line(result, "error: --scheduler: tcp://head.invalid:8786: host 'head.invalid'")


def test_a_scheduler_that_does_not_answer_is_one_line_after_the_timeout(
    jobs_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server that accepts the connection and never answers: the timeout (short here) ends
    # the wait, in run as in the simulating commands.
    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT_S", 0.3)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        result = runner.invoke(app, ["run", str(jobs_file), "--scheduler", address])
    _one_error_line(result, f"error: --scheduler: no Dask scheduler answered at {address}")
    assert "within 0.3 s" in result.stderr


# -- outputs that cannot be written --------------------------------------------------------


def _unwritable_dir() -> Path | None:
    """A directory this process may not write in (root passes permission bits: then a
    read-only system directory), or None where there is none to test with."""
    for candidate in (Path("/sys"), Path("/proc/sys")):
        try:
            probe = candidate / f".datasched-test-{os.getpid()}"
            probe.touch()
        except OSError:
            return candidate
        probe.unlink()
    return None


def _path_cases() -> list[tuple[list[str], str]]:
    # {f}: a regular file; {t}: the test's directory. The command, and the option named.
    cases = [
        (["demo-data", "/dev/null/x"], "DIR: /dev/null is not a directory"),
        (["demo-data", "{f}"], "DIR: {f} exists and is not a directory"),
        (["demo-data", "{f}/sub"], "DIR: {f} is not a directory"),
        (["trace", "generate", "--jobs", "5", "--out", "{f}/t.csv"], "--out: {f} is not a"),
        (["trace", "generate", "--jobs", "5", "--out", "{t}"], "--out: {t} is a directory"),
        (["sim", "--jobs", "20", "--trace-log", "{f}/x.jsonl"], "--trace-log: {f} is not a"),
        (["sweep", "--jobs", "20", "--out", "{f}/sub"], "--out: {f} is not a directory"),
        (["perf-map", "--out", "/dev/null/x/m.json"], "--out: /dev/null is not a directory"),
        (["demo", "--out", "{f}"], "--out: {f} exists and is not a directory"),
        (["demo", "--data", "/dev/null/x"], "--data: /dev/null is not a directory"),
        (["proof-sim", "--report", "{f}"], "--report: {f} exists and is not a directory"),
        (["reproduce", "ponce", "--quick", "--out", "{f}/r"], "--out: {f} is not a directory"),
    ]
    blocked = _unwritable_dir()
    if blocked is not None:
        cases.append(
            (["demo-data", f"{blocked}/d"], f"DIR: cannot write in {blocked}: Permission denied")
        )
        cases.append(
            (
                ["sim", "--jobs", "20", "--trace-log", f"{blocked}/x.jsonl"],
                f"--trace-log: cannot write in {blocked}",
            )
        )
    return cases


@pytest.mark.parametrize(
    ("args", "expected"), _path_cases(), ids=[" ".join(a) for a, _ in _path_cases()]
)
def test_an_output_that_cannot_be_written_is_one_line_and_nothing_is_written(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("mine\n")
    before = sorted(tmp_path.rglob("*"))
    filled = [a.format(f=plain, t=tmp_path) for a in args]
    result = runner.invoke(app, filled)
    _one_error_line(result, "error: " + expected.format(f=plain, t=tmp_path))
    assert plain.read_text() == "mine\n"
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "option", [["--report", "{f}"], ["--packets", "{f}/p.csv"], ["--trace-log", "{f}/t.jsonl"]]
)
def test_run_refuses_its_outputs_before_it_starts(
    option: list[str], jobs_file: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("mine\n")
    args = ["run", str(jobs_file), *(a.format(f=plain) for a in option)]
    _one_error_line(runner.invoke(app, args), f"error: {option[0]}: {plain}")
    assert plain.read_text() == "mine\n"
    assert not (jobs_file.parent / "out").exists()


# -- malformed YAML ------------------------------------------------------------------------

BAD_INDENT = "jobs:\n  - id: a\n    dataset: zmumu\n   processor: x\n"


def _at_most_two_lines_with_place(result: Any, name: str, line: int, column: int) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert name in lines[0]
    assert f"line {line}, column {column}" in result.stderr


def test_a_jobs_file_with_bad_indentation_is_one_line_with_line_and_column(
    tmp_path: Path,
) -> None:
    pytest.importorskip("uproot")
    path = tmp_path / "jobs.yaml"
    path.write_text(BAD_INDENT)
    result = runner.invoke(app, ["run", str(path)])
    _at_most_two_lines_with_place(result, "jobs.yaml", 4, 4)
    assert "not valid YAML" in result.stderr


def test_a_malformed_catalog_is_one_line_with_line_and_column(tmp_path: Path) -> None:
    pytest.importorskip("uproot")
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("datasets:\n  z:\n    files: [a.root\n")
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"catalog: {catalog}\njobs:\n  - id: a\n    dataset: z\n")
    # The same reader serves `catalog import` and `request check --catalog`.
    _at_most_two_lines_with_place(runner.invoke(app, ["run", str(jobs)]), "catalog.yaml", 4, 1)


def test_a_malformed_request_is_one_line_with_line_and_column(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    path = tmp_path / "request.yaml"
    path.write_text(BAD_INDENT)
    result = runner.invoke(app, ["request", "check", str(path)])
    _at_most_two_lines_with_place(result, "request.yaml", 4, 4)


# -- small things --------------------------------------------------------------------------


def test_no_flag_shows_a_bool_placeholder_in_any_help() -> None:
    # What --help prints in an option's type column, for every option of every command
    # (rendering each help page would take seconds); then two pages for real.
    root = typer.main.get_command(app)
    plain_flags(root)
    flags = 0
    for path, command in _commands(root):
        ctx = typer.Context(command, info_name=" ".join(path) or "datasched")
        for param in [*command.params, command.get_help_option(ctx)]:
            if param is None or not getattr(param, "is_flag", False):
                continue
            flags += 1
            shown = param.display_type_rich(ctx) or ""
            assert "bool" not in shown.lower(), (path, param.opts, shown)
    assert flags > len(ALL_COMMANDS) + 10  # --help of each, and the others
    for args in (["run", "--help"], ["--help"]):
        text = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
        assert "<bool>" not in text
        assert re.search(r"--help\s+Show this message", text)
        if args[0] == "run":
            assert re.search(r"--skip-bad-files\s+Skip files", text)


def test_no_help_shows_a_python_type_or_a_cut_default_at_80_columns() -> None:
    # Metavars say what to type (DIR, KEY=VALUE), never a Python type (<list[Path]>), and
    # no help text is cut with an ellipsis: a long unbroken default or example wraps only at
    # spaces. Every page, rendered at 80 columns.
    pages = 0
    for path, _ in ALL_COMMANDS:
        text = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}).stdout
        assert "list[" not in text, (path, text)
        assert "dict[" not in text, (path, text)
        assert "…" not in text, (path, text)
        pages += 1
    assert pages > 30


def test_policies_fit_80_columns_without_cutting_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(cli_info, "out", Console(file=buffer, width=80, color_system=None))
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    names = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert set(available()) <= names


def test_the_readme_lists_every_registered_policy() -> None:
    readme = (REPO / "README.md").read_text()
    listing = re.search(r"The policies are (.*?)\)\s*;", readme, re.S)
    assert listing is not None
    listed = set(re.findall(r"`([a-z-]+)`", listing.group(1)))
    assert set(available()) <= listed, set(available()) - listed


def test_demo_help_and_readme_give_the_same_time() -> None:
    demo_help = " ".join(
        runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "200"}).stdout.split()
    )
    said = re.search(r"\((about [^)]+?)\)", demo_help)
    assert said is not None, demo_help
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"({said.group(1)})" in readme
    assert re.findall(r"runs `datasched demo` .*?\((about [^)]+)\)", readme) == [said.group(1)]


def test_the_timelines_title_and_legend_do_not_overlap() -> None:
    pytest.importorskip("matplotlib")
    from datasched.runtime.reports import PacketStat, RunReport
    from datasched.runtime.timeline import timeline_figure

    def report(name: str, n_workers: int) -> RunReport:
        sources = ["cache", "peer", "tertiary", "staged", "direct"]
        packets = [
            PacketStat(
                job="a",
                node=f"w{i % n_workers}",
                url="f.root",
                start=0,
                stop=10,
                source=sources[i % len(sources)],
                bytes_from_tertiary=0,
                bytes_from_peer=0,
                read_s=1.0,
                compute_s=1.0,
                t_start=0.5 * i,
            )
            for i in range(12)
        ]
        workers = [f"w{i}" for i in range(n_workers)]
        return RunReport(policy=name, makespan_s=8.0, jobs=[], packets=packets, workers=workers)

    runs = {name: report(name, 4) for name in ("farm", "out-of-order", "dask map")}
    fig = timeline_figure(runs, title="the same jobs three ways, on one time axis")
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    title = fig._suptitle.get_window_extent(renderer)
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert not title.overlaps(box)
    for ax in fig.axes:  # nor a panel (its title and tick labels included)
        panel = ax.get_tightbbox(renderer)
        assert not panel.overlaps(title)
        assert not panel.overlaps(box)


def test_what_users_typed_and_servers_sent_is_printed_as_it_is() -> None:
    """Never read as Rich markup or emoji codes: a request's title "[/bold]" broke every
    administrator's `status`, one with "[reverse]...[/reverse]" restyled it, and ":fire:" in
    an option's value came back as an emoji."""
    from datasched.cli.client import _requests_table
    from datasched.cli.common import out

    title = "[/bold][reverse]x[/reverse]:fire:"
    row = {"id": "r1", "owner": "eve", "state": "queued", "title": title, "created": "2026-11-28"}
    with out.capture() as captured:
        out.print(_requests_table([row]), width=200)
    assert title in captured.get()
    result = runner.invoke(app, ["sim", "--policy", ":fire:"])
    assert result.exit_code == 2
    assert "':fire:'" in result.output
    result = runner.invoke(
        app, ["sweep", "--policies", "farm", "--loads", "0.1:abc:3", "--out", "o"]
    )
    assert result.exit_code == 2
    assert "0.1:abc:3" in result.output


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["sim", "--jobs", "1000000000"], "--jobs"),
        (["sim", "--nodes", "100000000", "--jobs", "10"], "--nodes"),
        (["sim", "--slots", "1000000000", "--jobs", "10"], "--slots"),
        (["scale", "--policy", "farm", "--nodes", "10,10000000", "--jobs", "10"], "--nodes"),
    ],
)
def test_sizes_past_what_memory_holds_are_refused_before_anything_runs(
    args: list[str], field: str
) -> None:
    """They filled the machine's memory until the kernel killed them, Ctrl-C unheeded."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {field}: "), result.output
    assert "more than the" in result.output
