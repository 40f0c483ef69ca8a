"""Docs that cannot drift: every CLI command has help text and is documented under docs/."""

from __future__ import annotations

from pathlib import Path

import click

from cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def iter_commands(group: click.Group, prefix: str = "ldpt"):
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}"
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from iter_commands(cmd, path)


def test_every_command_has_help_and_is_documented():
    docs = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    docs += (ROOT / "README.md").read_text(encoding="utf-8")
    missing_help, undocumented = [], []
    for path, cmd in iter_commands(main):
        if not (cmd.help or "").strip():
            missing_help.append(path)
        if path not in docs:
            undocumented.append(path)
    assert not missing_help, f"commands without help: {missing_help}"
    assert not undocumented, f"commands not mentioned in docs/: {undocumented}"


def test_every_option_has_help():
    for path, cmd in iter_commands(main):
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name not in ("help", "version"):
                assert (param.help or "").strip(), f"{path} {param.opts[0]} has no help"
