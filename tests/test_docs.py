"""Docs that cannot drift: every CLI command has help text and is documented under docs/, and
every fenced shell or Python block of README.md and docs/*.md runs (or, marked no-run, parses
and names real `ldpt` commands and options) as written from a fresh checkout."""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from cli.main import main

from .doc_blocks import Block, blocks, check_ldpt_command, doc_files, ldpt_commands

ROOT = Path(__file__).resolve().parent.parent


def iter_commands(group: click.Group, prefix: str = "ldpt"):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # loads lazily registered subcommands (cli/main.py)
        cmd = group.get_command(ctx, name)
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


# --- every fenced block of README.md and docs/*.md runs as written (tests/doc_blocks.py) -------------

DOC_FILES = doc_files(ROOT)
#: How long one block may take (the README's `ldpt demo` takes ~15 s on 2 cores).
BLOCK_TIMEOUT = 600.0
#: How long a documented `ldpt serve` may take to print its listening line.
SERVER_START_TIMEOUT = 60.0
#: The port the docs write; the test starts the collector on a free one (--port 0) instead
#: and rewrites this port in the file's later blocks to the one the collector printed.
DOC_PORT = "8080"


def test_doc_blocks_parse_and_name_real_ldpt_commands():
    """Fast half of the convention: every sh/python block parses and its `ldpt` commands exist."""
    problems = []
    for path in DOC_FILES:
        for block in blocks(path):
            if block.language == "sh":
                syntax = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
                if syntax.returncode != 0:
                    problems.append(f"{block.where}: bash -n: {syntax.stderr.strip()}")
                for argv in ldpt_commands(block.text):
                    problems += [f"{block.where}: {p}" for p in check_ldpt_command(main, argv)]
            elif block.language == "python":
                try:
                    compile(block.text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                except SyntaxError as exc:
                    problems.append(f"{block.where}: {exc.msg} (block line {exc.lineno})")
            elif block.no_run:
                problems.append(f"{block.where}: 'no-run' only applies to sh and python blocks")
    assert not problems, "\n".join(problems)


def test_doc_block_parser_reads_the_convention(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```sh\necho 1\n```\n```python no-run\nx = (\n```\n```toml\na = 1\n```\n"
                    "```\nplain\n```\n", encoding="utf-8")
    found = blocks(page)
    assert [(b.language, b.no_run, b.runs, b.checked_only) for b in found] == [
        ("sh", False, True, False), ("python", True, False, True), ("toml", False, False, False),
        ("", False, False, False)]
    assert found[0].text == "echo 1\n" and found[0].line == 2
    page.write_text("```sh\necho never closed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="never closed"):
        blocks(page)
    page.write_text("- a list\n  ```sh\n  echo hidden\n  ```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="indented fence"):
        blocks(page)
    argv = list(ldpt_commands("ldpt estimate --top N \\\n  [--format table|csv|json] && .venv/bin/ldpt nope\n"))
    assert argv[0][:2] == ["ldpt", "estimate"] and argv[1] == [".venv/bin/ldpt", "nope"]
    assert check_ldpt_command(main, argv[0]) == ["write '.venv/bin/ldpt', not 'ldpt' (the README "
                                                 "installs into .venv)"]
    assert check_ldpt_command(main, argv[1]) == ["ldpt has no subcommand 'nope'"]
    assert check_ldpt_command(main, [".venv/bin/ldpt", "plan", "--bogus"]) == ["ldpt plan has no option --bogus"]


def fresh_checkout(dest: Path) -> Path:
    """The repository's tracked files (as in the working tree) copied to ``dest``, with .venv.

    ``.venv`` links to the virtual environment running the tests, so ``.venv/bin/ldpt`` and
    ``.venv/bin/python`` work as the README's install step leaves them.
    """
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return dest


def doc_env() -> dict[str, str]:
    """The environment blocks run in: no LDPT_* settings, and no `ldpt` on PATH (docs say .venv/bin)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_") and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(venv_bin).resolve())
    return env


def starts_server(block: Block) -> bool:
    return block.language == "sh" and any(argv[1:2] == ["serve"] for argv in ldpt_commands(block.text))


class DocServers:
    """Collectors started by documented `ldpt serve` blocks; all stopped when the file is done."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.procs: list[subprocess.Popen] = []
        self.port: str | None = None

    def start(self, block: Block) -> None:
        script = re.sub(rf"--port[ =]{DOC_PORT}\b", "--port 0", block.text)
        log = self.cwd / f".doc-server-{block.line}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=self.cwd, env=self.env,
                                    stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            found = re.search(r"listening on http://[^:\s]+:(\d+)", log.read_text(errors="replace"))
            if found:
                self.port = found.group(1)
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{block.where}: `ldpt serve` did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)

    def rewrite(self, text: str) -> str:
        """Point the docs' 127.0.0.1:8080 at the collector the file started."""
        if self.port is None:
            return text
        return re.sub(rf"(127\.0\.0\.1|localhost):{DOC_PORT}\b", rf"\g<1>:{self.port}", text)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_block(block: Block, text: str, cwd: Path, env: dict[str, str]) -> None:
    """Run one sh or python block in ``cwd``; fail with its output when it exits non-zero."""
    argv = ["bash", "-euo", "pipefail", "-c", text] if block.language == "sh" else \
        [str(cwd / ".venv" / "bin" / "python"), "-c", text]
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT:.0f} s (mark it no-run?)")
    if done.returncode != 0:
        pytest.fail(f"{block.where}: exit {done.returncode}\n--- block ---\n{text}--- stdout ---\n"
                    f"{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}")


@pytest.mark.e2e
@pytest.mark.parametrize("path", [p for p in DOC_FILES if any(b.runs for b in blocks(p))],
                         ids=lambda p: p.name)
def test_doc_blocks_run_as_written(path: Path, tmp_path: Path):
    """Each file's sh/python blocks run in order, from a fresh copy of the repository."""
    if not (Path(sys.prefix) / "bin" / "ldpt").exists():
        pytest.skip(f"the ldpt script is not installed in {sys.prefix} (pip install -e '.[dev]')")
    checkout = fresh_checkout(tmp_path / "checkout")
    before = files_under(checkout)
    env = doc_env()
    servers = DocServers(checkout, env)
    try:
        for block in blocks(checkout / path.relative_to(ROOT)):
            if not block.runs:
                continue
            if starts_server(block):
                servers.start(block)
            else:
                run_block(block, servers.rewrite(block.text), checkout, env)
    finally:
        servers.stop()
    # what following the page leaves in a checkout must not show up as untracked (issue 31:
    # country-truth.csv did): every new file is matched by .gitignore
    left = {f for f in files_under(checkout) - before if not f.startswith(".doc-server-")}  # the harness's logs
    unignored = not_ignored(sorted(left))
    assert not unignored, f"{path.name} leaves files .gitignore does not cover: {unignored[:10]}"


def files_under(root: Path) -> set[str]:
    """Relative paths of the files under ``root`` (the .venv link and bytecode caches aside)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and not p.relative_to(root).parts[0] == ".venv" and "__pycache__" not in p.parts}


def not_ignored(paths: list[str]) -> list[str]:
    """Those of ``paths`` (relative to the repository) that the repository's .gitignore does not match."""
    if not paths or shutil.which("git") is None or not (ROOT / ".git").exists():
        return []
    done = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-z"], cwd=ROOT,
                          input="\0".join(paths).encode(), capture_output=True)
    ignored = set(filter(None, done.stdout.decode().split("\0")))
    return [p for p in paths if p not in ignored]


# --- the repository explains itself ----------------------------------------------------------------

#: Notes that live outside the repository; a future maintainer will not have them.
OUTSIDE_NOTES = ("ldp-" + "facts", "../" + "shared", "ARCHI" + "TECTURE.md")


def test_no_file_cites_notes_outside_the_repository():
    """Comments and docs cite papers or docs/ pages (docs/math.md, docs/design.md), nothing else."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    offenders = []
    for name in filter(None, listed.stdout.decode().split("\0")):
        path = ROOT / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}: {note}" for note in OUTSIDE_NOTES if note in text]
    assert not offenders, "\n".join(offenders)


def test_math_citations_name_existing_sections():
    """Every `docs/math.md §n` citation points at a section heading that exists."""
    sections = set(re.findall(r"^## §(\d+) ", (ROOT / "docs" / "math.md").read_text(encoding="utf-8"), re.M))
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    dangling = []
    for name in filter(None, listed.stdout.decode().split("\0")):
        path = ROOT / name
        if path.suffix not in (".py", ".md") or not path.is_file():
            continue
        for cited in re.findall(r"math\.md(?:\)?) §(\d+(?:, §\d+)*)", path.read_text(encoding="utf-8")):
            dangling += [f"{name}: §{n}" for n in re.findall(r"\d+", cited) if n not in sections]
    assert sections and not dangling, "\n".join(dangling)


def _documented_default(cell: str) -> str:
    """A default as docs/operations.md's settings table writes it, unformatted for comparison."""
    cell = cell.strip().strip("`")
    return {"—": "None", '""': ""}.get(cell, cell)


def test_documented_setting_defaults_are_the_code_defaults():
    """Not only the names: the table's default of every setting is the one the collector uses
    (issue 23: the table said rate_limit 10.0 / burst 100.0 while the code had 2.0 / 60)."""
    from collector.config import SETTINGS

    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1].startswith("`LDPT_"):
            rows[cells[0].strip("`")] = cells[2]
    missing = [s.name for s in SETTINGS if s.name not in rows]
    assert not missing, f"settings missing from the table in docs/operations.md: {missing}"
    wrong = {s.name: (rows[s.name], s.default) for s in SETTINGS
             if _documented_default(rows[s.name]) != str(s.default)}
    assert not wrong, f"docs/operations.md: documented vs code defaults differ: {wrong}"


@pytest.mark.parametrize("path", ["token.txt", "myapp-state/secret", "ldpt.sqlite.writer-lock"])
def test_files_the_docs_create_are_ignored_by_git(path):
    """The query token, an SDK state directory (its secret) and the store's writer lock that
    following README.md and docs/ creates must never be committed by accident (issue 23)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT)
    assert done.returncode == 0, f"{path} is not in .gitignore"
