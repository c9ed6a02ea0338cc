"""The command lines shown in README.md and docs/*.md: found in their console blocks, each
with the page and the section it is in (used by tests/cli/test_doc_examples.py).

A console block is a fenced block marked ``console``, ``bash`` or ``sh``. In ``console``
blocks a command follows a prompt (``$`` as a user, ``#`` as root) and may go on over lines
ending in a backslash; the lines without a prompt are the commands' output. ``bash`` and
``sh`` blocks hold commands alone, without prompts or output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"console", "bash", "sh", "shell"}


@dataclass(frozen=True)
class Example:
    page: str  # README.md, docs/cli.md
    section: str  # the anchor of the heading above it: from-coffea
    line: int
    command: str  # without its prompt and its trailing comment, continuations joined
    output: tuple[str, ...] = ()  # the lines a console block shows after it

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.command}"


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _strip_comment(command: str) -> str:
    """The command without a trailing ``# comment`` (a ``#`` after a space, outside quotes)."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command.rstrip()


def examples_of(path: Path) -> list[Example]:
    page = path.relative_to(REPO).as_posix()
    found: list[Example] = []
    section = ""
    language: str | None = None
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if raw.startswith("```"):
            language = None if language is not None else (raw[3:].strip() or "text")
            continue
        if language is None:
            if raw.startswith("#"):
                section = anchor(raw.lstrip("#"))
            continue
        if language not in LANGUAGES:
            continue
        line = raw.strip()
        is_prompt = language == "console" and re.match(r"[$#] ", line) is not None
        if not pending and not is_prompt and language == "console" and found and found[-1].line:
            last = found[-1]
            if last.page == page and last.section == section and last.line > 0 and line:
                found[-1] = Example(
                    last.page, last.section, last.line, last.command, (*last.output, raw)
                )
            continue
        if pending:
            pending.append(line)
        elif is_prompt:
            pending, start = [line[2:]], number
        elif language != "console" and line and not line.startswith("#"):
            pending, start = [line], number
        else:
            continue
        if pending[-1].endswith("\\"):
            pending[-1] = pending[-1][:-1].rstrip()
            continue
        command = _strip_comment(" ".join(pending))
        found.append(Example(page, section, start, " ".join(command.split())))
        pending = []
    return found


def all_examples() -> list[Example]:
    return [e for page in PAGES for e in examples_of(page)]
