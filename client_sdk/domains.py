"""Large categorical domains declared compactly: numbered (``ids``) or read from a file.

```toml
[metrics.app_id]
kind = "categorical"
categories = { ids = 1000000 }          # the values 0 .. 999999 (ints, or their decimal strings)

[metrics.app]
kind = "categorical"
categories = { file = "apps.txt" }      # one value per line (UTF-8, LF), relative to this file
                                        # optional: sha256 = "<hex>" pins the file's content
```

A numbered domain's value i has index i: nothing is listed, on disk, in memory or on the wire
(``GET /v1/registry`` publishes ``{"ids": d}``), and its fingerprint hashes ``{"ids": d}``.

A file domain is exactly the metric whose ``categories`` list the file's lines: same values,
same index order, **same fingerprint** (a registry may move a long inline list to a file and
keep its stored data). ``GET /v1/registry`` publishes ``{"file", "size", "sha256"}`` instead of
the values; SDKs fetch the list once from ``GET /v1/registry/domains/{metric}`` (gzip, cached by
its digest) and check it against ``sha256`` before use. The digest is SHA-256 of the
*domain text*: the values joined with "\\n", plus a final "\\n" (``domain_text``), which is
also exactly what the domains endpoint serves.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

if TYPE_CHECKING:
    from pathlib import Path

#: Largest numbered domain (indices are int64 on the collector; a sketch is sized by d).
MAX_IDS = 10_000_000
#: A canonical decimal id: no sign, no leading zeros, no spaces.
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
#: Keys of the two compact declarations.
IDS, FILE, SHA256 = "ids", "file", "sha256"


class NumberedDomain(Sequence[str]):
    """The domain "0", "1", ..., "d−1" without listing it: value i (int or decimal string) has
    index i. Behaves as the tuple of those strings (len, indexing, iteration, ``in``)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [str(j) for j in range(*i.indices(self.size))]
        j = i + self.size if i < 0 else i
        if not 0 <= j < self.size:
            raise IndexError(f"index {i} outside a domain of {self.size} ids")
        return str(j)

    def __iter__(self) -> Iterator[str]:
        return map(str, range(self.size))

    def __contains__(self, value: object) -> bool:
        return self.index_of(value) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NumberedDomain) and other.size == self.size

    def __hash__(self) -> int:
        return hash(("ids", self.size))

    def __repr__(self) -> str:
        return f"NumberedDomain({self.size})"

    def index_of(self, value: object) -> int | None:
        """The index of an id given as its canonical decimal string (``canonical_value`` turns
        ints into those), None for anything else."""
        if not isinstance(value, str) or len(value) > 19 or not _DECIMAL.fullmatch(value):
            return None
        i = int(value)
        return i if i < self.size else None

    def index_map(self) -> NumberedIndex:
        return NumberedIndex(self)


class NumberedIndex:
    """The value -> index map of a numbered domain (the ``dict.get``/``[]``/``in`` it needs)."""

    __slots__ = ("domain",)

    def __init__(self, domain: NumberedDomain) -> None:
        self.domain = domain

    def get(self, key: str, default: Any = None) -> Any:
        i = self.domain.index_of(key)
        return default if i is None else i

    def __getitem__(self, key: str) -> int:
        i = self.domain.index_of(key)
        if i is None:
            raise KeyError(key)
        return i

    def __contains__(self, key: object) -> bool:
        return self.domain.index_of(key) is not None

    def __len__(self) -> int:
        return self.domain.size


# A NamedTuple rather than a frozen dataclass: alike for its users, without the methods a dataclass
# compiles as its module loads (~0.8 ms of every registry's first load, `ldpt estimate`'s too: issue 32).
class DomainSource(NamedTuple):
    """How a categorical metric's domain was declared when not inline: ``ids`` (numbered) or
    ``file`` (its path as written, and the digest of its content; ``pinned`` when the registry
    wrote ``sha256`` itself)."""

    kind: str                  # IDS or FILE
    size: int
    file: str | None = None
    sha256: str | None = None
    pinned: bool = False

    def declaration(self) -> dict[str, Any]:
        """The TOML value of ``categories`` as written."""
        if self.kind == IDS:
            return {IDS: self.size}
        out: dict[str, Any] = {FILE: self.file}
        if self.pinned:
            out[SHA256] = self.sha256
        return out

    def published(self) -> dict[str, Any]:
        """What ``GET /v1/registry`` publishes instead of the values."""
        if self.kind == IDS:
            return {IDS: self.size}
        from pathlib import Path

        return {FILE: Path(self.file or "").name, "size": self.size, SHA256: self.sha256}


def parse_declaration(raw: dict[str, Any], base_dir: Path | None,
                      fail: Callable[[str], Exception]) -> tuple[Sequence[str], DomainSource]:
    """(values, source) of ``categories = {ids = d}`` or ``{file = "...", sha256 = "..."}``."""
    keys = set(raw)
    if keys == {IDS}:
        size = raw[IDS]
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_IDS:
            raise fail(f"ids = {size!r} is not allowed; use an integer from 2 to {MAX_IDS:,} (the values "
                       "0 .. ids-1)")
        return NumberedDomain(size), DomainSource(IDS, size)
    if FILE in keys and keys <= {FILE, SHA256}:
        name, pin = raw[FILE], raw.get(SHA256)
        if not isinstance(name, str) or not name:
            raise fail("file must be a path (relative to the registry file)")
        if pin is not None and (not isinstance(pin, str) or not re.fullmatch(r"[0-9a-f]{64}", pin)):
            raise fail("sha256 must be 64 lowercase hex digits (`sha256sum FILE`)")
        if base_dir is None:
            raise fail("categories.file needs a registry read from a file (load_registry), to find the "
                       "domain file beside it")
        values, digest = read_domain_file(base_dir / name, fail)
        if pin is not None and pin != digest:
            raise fail(f"{name}: its content has sha256 {digest}, the registry pins {pin}; the file "
                       "changed (a changed domain is a new metric: update the pin deliberately)")
        return values, DomainSource(FILE, len(values), name, digest, pin is not None)
    raise fail("categories is a list of values, {ids = N} (the values 0 .. N-1) or {file = \"values.txt\"} "
               "(one value per line)")


def domain_text(values: Sequence[str]) -> str:
    """The canonical text of a listed domain: its values joined with "\\n", plus a final "\\n"."""
    return "\n".join(values) + "\n"


def domain_digest(values: Sequence[str]) -> str:
    """SHA-256 (hex) of ``domain_text(values)`` as UTF-8."""
    return hashlib.sha256(domain_text(values).encode("utf-8")).hexdigest()


def values_from_text(text: str, where: str, fail: Callable[[str], Exception]) -> tuple[str, ...]:
    """The values of a domain file's text: one per LF-terminated line (the last "\\n" optional);
    ``fail(message)`` for a CR, an empty line, or a value given twice (naming the line)."""
    if "\r" in text:
        line = text.count("\n", 0, text.index("\r")) + 1
        raise fail(f"{where}: line {line} has a carriage return; use LF line endings (one value per line)")
    body = text[:-1] if text.endswith("\n") else text
    values = body.split("\n") if body else []
    if "" in values:
        raise fail(f"{where}: line {values.index('') + 1} is empty; every line is one value")
    unique = set(values)
    if len(unique) != len(values):
        seen: set[str] = set()
        line = next(i for i, v in enumerate(values, 1) if v in seen or seen.add(v))
        raise fail(f"{where}: line {line} repeats the value {values[line - 1][:80]!r}")
    return tuple(values)


def read_domain_file(path: Path, fail: Callable[[str], Exception]) -> tuple[tuple[str, ...], str]:
    """(values, sha256 of the domain text) of a domain file; ``fail`` names what is wrong."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise fail(f"{path}: no such file (categories.file is relative to the registry file)") from None
    except OSError as exc:
        raise fail(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise fail(f"{path}: line {line} is not UTF-8") from None
    values = values_from_text(text, str(path), fail)
    canonical = raw if raw.endswith(b"\n") else raw + b"\n"
    return values, hashlib.sha256(canonical).hexdigest() if values else ""
