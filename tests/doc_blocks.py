"""Fenced blocks of README.md and docs/*.md, and how tests/test_docs.py treats each.

The convention (README "Documentation"): a block whose info string is ``sh`` or ``python``
runs, in order per file, from a fresh copy of the repository; ``sh no-run`` and
``python no-run`` are only checked (bash -n; compile(); for ``ldpt`` commands, that the
subcommand and every option exist); any other info string (``text``, ``toml``, ``console``,
none) is not code and is skipped.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click

FENCE = re.compile(r"^```(.*)$")
RUNNABLE = ("sh", "python")
#: The `ldpt` command as docs write it (relative to the repository root, like the README).
LDPT = ".venv/bin/ldpt"


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, whether it runs, and its text."""

    path: Path
    line: int            # 1-based line of the opening fence
    language: str        # first word of the info string ('' when there is none)
    no_run: bool
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and not self.no_run

    @property
    def checked_only(self) -> bool:
        return self.language in RUNNABLE and self.no_run


def doc_files(root: Path) -> list[Path]:
    """README.md and every docs/*.md, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file.

    Fences must start at the margin: an indented one (inside a list) would silently escape
    the docs test, so it is an error, as is an unclosed fence.
    """
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            if lines[i].lstrip().startswith("```"):
                raise ValueError(f"{path.name}:{i + 1}: an indented fence; start code blocks at the margin")
            i += 1
            continue
        words = opening.group(1).split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            body.append(lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{path.name}:{i + 1}: the fence opened here is never closed")
        out.append(Block(path, i + 1, words[0] if words else "", "no-run" in words[1:],
                         "\n".join(body) + "\n"))
        i = j + 1
    return out


def ldpt_commands(script: str) -> Iterator[list[str]]:
    """The argument lists of every `ldpt` invocation in a shell script (synopses included).

    Continuation lines are joined, comments dropped; a command ends at ``&&``, ``||``, ``;``,
    ``&``, a redirection (``>``, ``>>``, ``<``) or the end of the line. Synopsis brackets (``[--top N]``) and alternatives
    (``--format table|csv|json``, ``[--window D | --since D]``) are how docs write options and
    are tolerated (a real pipe only adds words that are not options).
    """
    joined = script.replace("\\\n", " ")
    for raw in joined.splitlines():
        try:
            tokens = shlex.split(raw, comments=True)
        except ValueError:
            tokens = raw.split()
        current: list[str] | None = None
        for tok in tokens:
            if tok in ("&&", "||", ";", "&") or re.fullmatch(r"\d?(>>?|<)(&\d)?", tok):  # a redirect ends it too
                if current is not None:
                    yield current
                current = None
            elif current is None and tok.split("/")[-1] == "ldpt":
                current = [tok]
            elif current is not None:
                current.append(tok)
        if current is not None:
            yield current


def check_ldpt_command(group: click.Group, argv: list[str]) -> list[str]:
    """Problems with one documented `ldpt` command line: its path, subcommand and options."""
    problems = []
    if argv[0] != LDPT:
        problems.append(f"write {LDPT!r}, not {argv[0]!r} (the README installs into .venv)")
    cmd: click.Command = group
    words = [w.strip("[]") for w in argv[1:]]
    names = ["ldpt"]
    while isinstance(cmd, click.Group) and words and not words[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), words[0])
        if sub is None:
            return problems + [f"{' '.join(names)} has no subcommand {words[0]!r}"]
        names.append(words.pop(0))
        cmd = sub
    known = {opt for p in cmd.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}
    known |= {"--help", "-h"}
    for word in words:
        for part in word.split("|"):
            option = part.strip("[]").split("=")[0]
            if option.startswith("--") and option not in known:
                problems.append(f"{' '.join(names)} has no option {option}")
    return problems
