"""Shared CLI plumbing: error translation, registry/store opening, output options."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from client_sdk.errors import LdptError

if TYPE_CHECKING:  # the registry (and numpy) load when a command needs them, not for `ldpt --help`
    from client_sdk.registry import MetricSpec, Registry

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT_FORMATS = ("table", "csv", "json")

#: True in the console script (``cli.main.run``), whose process ends with its one command: the
#: command's start-up imports are then frozen (``startup_imports``). False in process (tests,
#: ``CliRunner``), where the collector is left as it is.
FREEZE_STARTUP = False


@contextlib.contextmanager
def startup_imports() -> Iterator[None]:
    """Around a command's first imports (numpy, the query layer): in the console script the
    cyclic GC is paused while they run and what they made is frozen after — it lives until the
    process ends, so no collection of the command's own work traverses it again (~12 M
    instructions, ~1 % of a fresh `ldpt estimate`, issue 32). In process it does nothing."""
    if not FREEZE_STARTUP:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses NaN, which passes its bounds (NaN compares false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = click.FLOAT.convert(value, param, ctx)
        if rv != rv:
            self.fail(f"{value} is not a finite number.", param, ctx)
        return super().convert(rv, param, ctx)


class LdptGroup(click.Group):
    """A click group whose commands turn library errors into one clean line (exit 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LdptError as exc:
            raise click.ClickException(str(exc)) from None
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            raise click.Abort() from None
        except MemoryError:   # e.g. ldpt simulate --clients 10000000000: one value per client in memory
            raise click.ClickException("not enough memory for this run (ldpt simulate holds every "
                                       "client's value in memory: use fewer --clients)") from None
        except Exception as exc:  # never a traceback for users; LDPT_DEBUG=1 shows it
            if os.environ.get("LDPT_DEBUG"):
                raise
            raise click.ClickException(f"internal error: {type(exc).__name__}: {exc} "
                                       "(set LDPT_DEBUG=1 for the traceback)") from None

    def group(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", LdptGroup)
        return super().group(*args, **kwargs)


def output_options(func: F) -> F:
    """--format table|csv|json and --output FILE."""
    func = click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True),
                        help="Write to this file instead of standard output.")(func)
    func = click.option("--format", "fmt", type=click.Choice(OUTPUT_FORMATS), default="table",
                        show_default=True, help="Output format.")(func)
    return func


def validate_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A collector URL must say http:// or https:// (``127.0.0.1:8080`` alone is a common slip)."""
    if value is None:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep:
        raise click.BadParameter(f"{value!r} has no scheme; did you mean http://{value} ?")
    if scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise click.BadParameter(f"{value!r} is not an http:// or https:// URL (e.g. "
                                 "http://127.0.0.1:8080)")
    return value


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 window``, ``2 windows``, ``20,000 reports``: a count with thousands separators and the
    word in the number it takes."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Left-aligned text columns, header first (no pandas: small tables must print at once)."""
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in [header, *rows]) + "\n"


def load_metric(metrics_file: str, metric: str) -> tuple[Registry, MetricSpec]:
    """Load the registry file and look up one metric (errors name the file and metric)."""
    from client_sdk.registry import load_registry

    registry = load_registry(metrics_file)
    return registry, registry.get(metric)


def read_lines(path: str, what: str) -> list[str]:
    """The lines of a UTF-8 text file; errors name the file (one line, no traceback)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().splitlines()
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise click.ClickException(f"{path}: the {what} is not UTF-8 text") from None


def emit(text: str, output: str | None) -> None:
    """Write text to a file or stdout."""
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise click.ClickException(f"{output}: cannot write ({exc.strerror or exc})") from None
    else:
        click.echo(text, nl=not text.endswith("\n"))


def progress_shown(silent: bool) -> bool:
    """Progress goes to standard error when it is a terminal and --silent was not given
    (a pipe, a log file or a test's captured stream gets none)."""
    if silent:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(total: int, label: str, silent: bool) -> Any:
    """A click progress bar on stderr, or a no-op context when silent or not a terminal."""
    if not progress_shown(silent):
        return _NullBar()
    return click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True)


class _NullBar:
    def __enter__(self) -> "_NullBar":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


class Working:
    """For work whose length is not known in advance (a decode, a discovery): ``label ... 12 s``
    on standard error, redrawn every ``interval`` seconds by a daemon thread and erased at the
    end; nothing when silent or not a terminal. ``step(text)`` changes what it says."""

    def __init__(self, label: str, silent: bool, interval: float = 0.5) -> None:
        self.label, self.interval = label, interval
        self.shown = progress_shown(silent)
        self._stop = None
        self._thread = None

    def step(self, label: str) -> None:
        self.label = label

    def __enter__(self) -> "Working":
        if self.shown:
            import threading
            import time

            self._stop = threading.Event()
            start = time.monotonic()

            def run() -> None:
                while not self._stop.wait(self.interval):
                    sys.stderr.write(f"\r{self.label} ... {time.monotonic() - start:.0f} s\x1b[K")
                    sys.stderr.flush()

            self._thread = threading.Thread(target=run, name="ldpt-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
