"""Every relative link of the README and of docs/*.md leads somewhere: to a file of the
repository, and, where it names a heading (``page.md#a-heading``), to a heading of that page,
by GitHub's rule for a heading's anchor. Links to the web are not followed (no network)."""

from __future__ import annotations

import re
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target "title") and ![alt](target); the target stops at a space or the closing
# parenthesis (the docs use no parentheses inside their link targets).
_INLINE = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_CODE_SPAN = re.compile(r"`[^`]*`")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def _prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((n, line))
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: markup dropped, lower case, punctuation other
    than hyphens and underscores removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of a page's headings; a repeated heading's get -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in _prose(page.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return frozenset(found)


def links(page: Path) -> list[tuple[int, str]]:
    """The page's link targets outside code, with their line numbers."""
    found = []
    for n, line in _prose(page.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)
        m = _REFERENCE.match(line)
        found += [(n, m.group(1))] if m else []
        found += [(n, t) for t in _INLINE.findall(line)]
    return found


def broken(page: Path) -> list[str]:
    """What is wrong with the page's relative links, one line each."""
    problems = []
    for n, target in links(page):
        if _EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{n}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif not dest.is_relative_to(ROOT):
            problems.append(f"{where}: outside the repository")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            problems.append(f"{where}: no such heading")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_a_file_and_a_heading(page: Path) -> None:
    assert broken(page) == []


def test_the_check_finds_what_is_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "other.md").write_text(
        "# A `code` heading, with: punctuation!\n\n## Twice\n## Twice\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n"
        "[ok](other.md) [ok](other.md#a-code-heading-with-punctuation) [ok](#page)\n"
        "[ok](other.md#twice-1) [web](https://example.org/x.md) `[code](nowhere.md)`\n"
        "[gone](missing.md) [bad](other.md#nowhere) ![img](pic.png)\n"
        "[ref]: also-missing.md\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken(page) == [
        "page.md:4: missing.md: no such file",
        "page.md:4: other.md#nowhere: no such heading",
        "page.md:4: pic.png: no such file",
        "page.md:5: also-missing.md: no such file",
    ]


def test_github_slugs() -> None:
    assert slug("Set-up: two commands") == "set-up-two-commands"
    assert slug("The `--trace` file (CSV)") == "the---trace-file-csv"
    assert slug("[Linked](x.md) heading") == "linked-heading"
