"""datasched._files: whole files or nothing, never a temporary file left behind."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import IO

import pytest

from datasched._files import atomic_path, atomic_write_bytes, atomic_write_text


class Boom(Exception):
    pass


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("fsync", [False, True])
def test_bytes_are_written_and_no_temporary_file_is_left(tmp_path: Path, fsync: bool) -> None:
    path = tmp_path / "out.bin"
    atomic_write_bytes(path, b"\x00\x01binary\xff", fsync=fsync)
    assert path.read_bytes() == b"\x00\x01binary\xff"
    assert names(tmp_path) == ["out.bin"]


def test_bytes_through_a_writer_replace_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"old content, longer than the new")

    def write(fh: IO[bytes]) -> None:
        fh.write(b"new ")
        fh.write(b"content")

    atomic_write_bytes(path, write)
    assert path.read_bytes() == b"new content"
    assert names(tmp_path) == ["out.bin"]


def test_missing_parents_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "out.bin"
    atomic_write_bytes(path, b"x")
    assert path.read_bytes() == b"x"


def test_a_writer_failing_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")

    def write(fh: IO[bytes]) -> None:
        fh.write(b"half of the new")
        raise Boom

    with pytest.raises(Boom):
        atomic_write_bytes(path, write)
    assert path.read_bytes() == b"old"
    assert names(tmp_path) == ["out.bin"]


def test_a_writer_failing_before_any_file_existed_leaves_nothing(tmp_path: Path) -> None:
    def write(fh: IO[bytes]) -> None:
        fh.write(b"half")
        raise Boom

    with pytest.raises(Boom):
        atomic_write_bytes(tmp_path / "out.bin", write)
    assert names(tmp_path) == []


def test_text_writer_failing_midway_leaves_no_temporary(tmp_path: Path) -> None:
    def write(fh: IO[str]) -> None:
        fh.write("half")
        raise Boom

    with pytest.raises(Boom):
        atomic_write_text(tmp_path / "out.txt", write)
    assert names(tmp_path) == []
    atomic_write_text(tmp_path / "out.txt", "a\r\nb\n")  # newline="": written as given
    assert (tmp_path / "out.txt").read_bytes() == b"a\r\nb\n"


def test_atomic_path_renames_on_success_and_removes_on_error(tmp_path: Path) -> None:
    path = tmp_path / "out.root"
    with atomic_path(path) as tmp:
        assert tmp.parent == tmp_path
        assert tmp.name != path.name
        tmp.write_bytes(b"whole")
        assert not path.exists()
    assert path.read_bytes() == b"whole"

    def write_half() -> None:
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"half")
            raise Boom

    with pytest.raises(Boom):
        write_half()
    assert path.read_bytes() == b"whole"
    assert names(tmp_path) == ["out.root"]


def test_temporary_names_are_unique_per_call(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    with atomic_path(path) as first, atomic_path(path) as second:
        assert first != second
        first.write_bytes(b"1")
        second.write_bytes(b"2")
    assert path.read_bytes() == b"1"  # the outer block ends last: the last rename wins
    assert names(tmp_path) == ["index.json"]


def test_threads_writing_one_file_never_collide(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                atomic_write_text(path, f"writer {i}\n" * 100)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    lines = set(path.read_text().splitlines())
    assert len(lines) == 1
    assert lines.pop().startswith("writer ")
    assert names(tmp_path) == ["index.json"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_permissions_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "out.bin", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o644
