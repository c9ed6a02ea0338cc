"""The semantic checks: inputs resolve, paths stay under the roots (``..`` and symbolic
links included), the command and the processor resolve without running user code."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from datasched.service.contracts import (
    CommandWork,
    FieldError,
    FileRef,
    InputSpec,
    MetaJobRequest,
    ProcessorWork,
)
from datasched.service.request import check_request


class FakeCatalog:
    """Two datasets by metadata; ``query`` raises on an unknown keyword as the contract says."""

    def __init__(self) -> None:
        self.files = {
            "root://x//auau/0.root": FileRef("root://x//auau/0.root", 100, 1000, "Events", "auau"),
            "root://x//auau/1.root": FileRef("root://x//auau/1.root", 50, 500, "Events", "auau"),
        }

    def query(self, query: str) -> list[FileRef]:
        if "colour" in query:
            raise ValueError("'colour': no dataset has this keyword")
        return list(self.files.values()) if "AuAu" in query else []

    def file(self, url: str) -> FileRef | None:
        return self.files.get(url)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    for name in ("a.root", "b.root", "c.txt"):
        (tmp_path / "data" / name).write_bytes(b"x" * 10)
    (tmp_path / "out").mkdir()
    exe = tmp_path / "bin" / "analyse"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def request(*inputs: InputSpec, command: str = "ls -l $FILELIST", **kw: str) -> MetaJobRequest:
    work = CommandWork(command, stdout=kw.pop("stdout", None), stderr=kw.pop("stderr", None))
    return MetaJobRequest(username="u", work=work, inputs=inputs, **kw)  # type: ignore[arg-type]


def fields(mjr: MetaJobRequest, root: Path, **kw: object) -> dict[str, str]:
    _, errors = check_request(mjr, FakeCatalog(), roots=[root], **kw)  # type: ignore[arg-type]
    return {e.field: e.reason for e in errors}


def test_inputs_resolve_to_files_each_once(root: Path) -> None:
    listing = root / "files.list"
    listing.write_text(f"# the data\n{root}/data/b.root\ndata/a.root\n\n")
    mjr = request(
        InputSpec(path="data/*.root", machine="node1"),
        InputSpec(path="filelist:files.list"),
        InputSpec(catalog="year=2004 system=AuAu", n_files=1),
        InputSpec(path="root://x//auau/1.root"),
    )
    files, errors = check_request(mjr, FakeCatalog(), roots=[root])
    assert errors == []
    assert [f.url for f in files] == [
        str(root / "data/a.root"),
        str(root / "data/b.root"),
        "root://x//auau/0.root",
        "root://x//auau/1.root",
    ]
    assert files[0].cached_on == ("node1",)
    assert files[0].n_bytes == 10


def test_unresolvable_inputs_are_named(root: Path) -> None:
    mjr = request(
        InputSpec(path="data/*.nothing"),
        InputSpec(path="data/missing.root"),
        InputSpec(catalog="year=1999"),
        InputSpec(catalog="colour=red"),
        InputSpec(path="root://elsewhere//f.root"),
        InputSpec(path="filelist:none.list"),
    )
    errors = fields(mjr, root)
    assert set(errors) == {
        f"input[{i}].{k}" for i, k in enumerate(["path"] * 2 + ["catalog"] * 2 + ["path"] * 2)
    }
    assert "colour" in errors["input[3].catalog"]


def test_paths_are_confined_to_the_roots(
    root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.root").write_bytes(b"s")
    (root / "data" / "link.root").symlink_to(outside / "secret.root")
    (root / "escape").symlink_to(outside)
    mjr = request(
        InputSpec(path="../" + outside.name + "/secret.root"),
        InputSpec(path="data/link.root"),
        InputSpec(path="data/*.root"),  # the link is among the matches
        InputSpec(path="escape/*.root"),
        InputSpec(path="/etc/passwd"),
        stdout="../out.log",
        stderr="escape/err.log",
        output="/tmp/elsewhere/result.pkl",
    )
    errors = fields(mjr, root)
    for field in (
        "input[0].path",
        "input[1].path",
        "input[2].path",
        "input[3].path",
        "input[4].path",
        "stdout",
        "stderr",
        "output",
    ):
        assert "outside the configured roots" in errors[field], field
    _, unrooted = check_request(request(InputSpec(path="/d/a.root")), None, roots=[])
    assert "no storage roots" in unrooted[0].reason


def test_outputs_must_be_writable(root: Path) -> None:
    ok = request(InputSpec(path="data/a.root"), stdout="out/new/dir/job.log", output="out/r.pkl")
    assert fields(ok, root) == {}
    bad = request(InputSpec(path="data/a.root"), stdout="out", output="root://x//r.pkl")
    errors = fields(bad, root)
    assert "is a directory" in errors["stdout"]
    assert "local path" in errors["output"]
    if os.geteuid() != 0:  # root writes anywhere
        (root / "ro").mkdir(mode=0o500)
        errors = fields(request(InputSpec(path="data/a.root"), stdout="ro/log"), root)
        assert "not writable" in errors["stdout"]


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("ls -l $FILELIST $INPUTFILE0 ${JOBID}", None),
        ("bin/analyse --in $FILELIST", None),
        ('root4star -q -b myMacro.C\\(\\"$FILELIST\\"\\)', "not found"),  # escaped: no operator
        ("ls; rm -rf /", "shell operators"),
        ("ls | wc", "shell operators"),
        ("ls > out", "shell operators"),
        ("echo `id`", "shell operators"),
        ("echo $(id)", "shell operators"),
        ("echo $HOME", "variables"),
        ("ls 'unclosed", "words"),
        ("no-such-program-here", "not found"),
        ("/bin/ls", "outside the configured roots"),
        ("data/c.txt", "not an executable"),
        ("ls\nrm x", "one command line"),
    ],
)
def test_the_command_is_one_executable_without_a_shell(
    root: Path, command: str, problem: str | None
) -> None:
    errors = fields(request(InputSpec(path="data/a.root"), command=command), root)
    if problem is None:
        assert errors == {}
    else:
        assert problem in errors["command"]


def test_shell_lines_only_where_allowed(root: Path) -> None:
    mjr = request(InputSpec(path="data/a.root"), command="ls | wc -l")
    assert fields(mjr, root, allow_shell=True) == {}


def processor_request(ref: str) -> MetaJobRequest:
    return MetaJobRequest(
        username="u",
        work=ProcessorWork(ref, tree="Events"),
        inputs=(InputSpec(catalog="system=AuAu"),),
    )


def test_a_processor_is_found_without_running_it(root: Path) -> None:
    marker = root / "ran"
    (root / "proc.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef processor(e): pass\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (root / "pkg" / "mod.py").write_text("def f(e): pass\n")
    loaded_before = set(sys.modules)
    for ref in ("proc.py", "proc.py:processor", "pkg.mod:f", "datasched.runtime.processor:ship"):
        assert fields(processor_request(ref), root) == {}, ref
    assert not marker.exists()  # nothing of the user's ran
    # No module was loaded for them (other tests may have loaded processors before).
    assert not [m for m in set(sys.modules) - loaded_before if "datasched_user" in m or m == "pkg"]
    for ref, problem in (
        ("missing.py:f", "no file"),
        ("../outside.py:f", "outside"),
        ("pkg.nomod:f", "no module"),
        ("no_such_package_xyz:f", "no module"),
    ):
        assert problem in fields(processor_request(ref), root)["processor"], ref


def test_a_check_that_needs_the_code_is_the_callers_and_runs_last(root: Path) -> None:
    (root / "proc.py").write_text("def processor(e): pass\n")
    seen: list[str] = []

    def code_check(work: ProcessorWork) -> FieldError | None:
        seen.append(work.processor)
        return FieldError("processor", "does not load") if "nothing" in work.processor else None

    assert fields(processor_request("proc.py"), root, code_check=code_check) == {}
    errors = fields(processor_request("proc.py:nothing"), root, code_check=code_check)
    assert errors["processor"] == "does not load"
    # Not asked while anything else is wrong: a missing file is reported, nothing is loaded.
    errors = fields(processor_request("missing.py:f"), root, code_check=code_check)
    assert "no file" in errors["processor"]
    assert seen == ["proc.py", "proc.py:nothing"]


def test_a_processor_needs_event_counts(root: Path) -> None:
    mjr = MetaJobRequest(
        username="u",
        work=ProcessorWork("proc.py", tree="T"),
        inputs=(InputSpec(path="data/a.root"),),
    )
    (root / "proc.py").write_text("def processor(e): pass\n")
    assert "catalog it first" in fields(mjr, root)["input[0].path"]
    files, errors = check_request(mjr, None, roots=[root], count_events=lambda url, tree: 7)
    assert errors == []
    assert files[0].n_events == 7
    assert files[0].tree == "T"


def test_another_users_files_are_not_read_in_a_daemon_of_several_users(root: Path) -> None:
    """Every user's job runs as the same account, so a path into another user's directory
    (an input, a file list, an argument, stdin, the executable) would read what their jobs
    wrote there, readable by that account alone. Refused unless readable by everyone; one's
    own directory and shared data are read as before."""
    for d in (root, root / "data"):
        d.chmod(0o755)
    for f in (root / "data").iterdir():
        f.chmod(0o644)
    bob = root / "bob"
    bob.mkdir(mode=0o755)
    secret = bob / "secret.root"
    secret.write_bytes(b"x" * 10)
    secret.chmod(0o600)  # as a job writes its outputs (umask 077)
    carol = root / "carol"
    carol.mkdir(mode=0o700)
    behind = carol / "open.root"
    behind.write_bytes(b"x" * 10)
    behind.chmod(0o644)  # readable, but in a directory closed to others
    mine = root / "u"
    mine.mkdir(mode=0o700)
    own = mine / "own.root"
    own.write_bytes(b"x" * 10)
    own.chmod(0o600)
    for path in (secret, behind):
        errors = fields(request(InputSpec(path=str(path))), root, user_dirs=True)
        assert "neither in your own directory nor readable by everyone" in errors["input[0].path"]
        errors = fields(request(command=f"cat {path}"), root, user_dirs=True)
        assert "neither in your own directory" in errors["command"]
        listing = mine / "list.txt"
        listing.write_text(f"{path}\n")
        errors = fields(request(InputSpec(path=f"filelist:{listing}")), root, user_dirs=True)
        assert "neither in your own directory" in errors["input[0].path"]
    shared = root / "data" / "a.root"
    for path in (own, shared):
        assert fields(request(InputSpec(path=str(path))), root, user_dirs=True) == {}
        assert fields(request(command=f"cat {path}"), root, user_dirs=True) == {}
    # A daemon of one user (no user directories) reads whatever is under its roots.
    assert fields(request(InputSpec(path=str(secret))), root) == {}
    # A system file named as an argument is not the roots' business.
    assert (
        fields(
            request(InputSpec(path=str(shared)), command="cat /etc/hostname"), root, user_dirs=True
        )
        == {}
    )


def test_a_command_job_binds_no_other_users_file(root: Path) -> None:
    """What the runner makes of a request's command: a file of another user's named as an
    argument or stdin fails the job naming the field; one's own is bound read-only."""
    from datasched.sandbox.confine import Confinement
    from datasched.service.command_jobs import command_job
    from datasched.service.contracts import ElementaryJob

    root.chmod(0o755)
    bob = root / "bob"
    bob.mkdir(mode=0o755)
    secret = bob / "secret.txt"
    secret.write_text("bob's")
    secret.chmod(0o600)
    mine = root / "u"
    mine.mkdir(mode=0o700)
    own = mine / "notes.txt"
    own.write_text("mine")
    kw = {"roots": [root], "user_dirs": True, "confinement": Confinement(bwrap=False)}

    def job(work: CommandWork) -> ElementaryJob:
        return ElementaryJob("r", 0, (), work, user="u")

    _, command = command_job(job(CommandWork(f"cat {own}")), **kw)  # type: ignore[arg-type]
    assert str(own) in command.readable
    for work in (CommandWork(f"cat {secret}"), CommandWork("cat", stdin=str(secret))):
        with pytest.raises(ValueError, match=r"process\.(command|stdin).*neither in your own"):
            command_job(job(work), **kw)  # type: ignore[arg-type]
