"""The command lines that docs/documents.md and docs/config.md show run as written: every
``syntaxnmt COMMAND --option`` names an option COMMAND has (or a config override), and the
features the pages describe are shown as commands, not only as Python calls."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from syntaxnmt.cli import build_parser, unknown_flags

ROOT = Path(__file__).resolve().parents[1]


def shown_commands(page: Path) -> list[str]:
    """The ``syntaxnmt ...`` lines of a page's indented code blocks and inline code."""
    text = page.read_text(encoding="utf-8")
    lines = [m.group(1) for m in re.finditer(r"^(?: {4}|\t)+(?:\$ )?(syntaxnmt \S.*)$", text, re.M)]
    lines += re.findall(r"`(syntaxnmt [a-z-]+ [^`]*)`", text)
    return [line.split("#")[0].split(" | ")[0].strip() for line in lines]


def command_options(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {s for a in sub._actions for s in a.option_strings}


@pytest.mark.parametrize("page", ["docs/documents.md", "docs/config.md"])
def test_the_pages_commands_use_options_their_commands_have(page):
    commands = shown_commands(ROOT / page)
    assert commands
    for line in commands:
        words = line.replace("[", " ").replace("]", " ").split()
        options = {w.split("=")[0] for w in words[2:] if re.match(r"^--?[A-Za-z]", w)}
        unknown = set(unknown_flags(sorted(options - command_options(words[1]))))
        assert not unknown, f"{page}: `{line}`: {words[1]} has no {', '.join(sorted(unknown))}"


def test_documents_md_shows_the_commands_of_its_features():
    commands = " ".join(shown_commands(ROOT / "docs/documents.md"))
    assert "syntaxnmt synthetic --documents" in commands
    assert "--context-src" in commands and "--context-tgt" in commands
    text = (ROOT / "docs/documents.md").read_text(encoding="utf-8")
    assert "as `context_src=`/`context_tgt=`" not in text  # the Python keywords were the only way shown
