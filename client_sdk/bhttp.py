"""Binary HTTP messages (Thomson and Wood, RFC 9292): the known-length form, with padding.

What a sealed batch carries inside its OHTTP encapsulation (client_sdk/ohttp.py): the request
``POST https:///v1/reports`` with one header (``content-type: application/msgpack``) and the
batch bytes as content, and the collector's answer (status, a few headers, the body).

Encoding (RFC 9292 §3): every length and integer is a QUIC variable-length integer (RFC 9000
§16: 1, 2, 4 or 8 bytes, the top two bits giving the length). A known-length request is
framing indicator 0, the control data (method, scheme, authority, path, each length-prefixed),
the header section, the content and the trailer section, each length-prefixed; a response is
framing indicator 1, informational (1xx) responses, the final status, then the same three
sections. Padding is zero bytes after the message (§3.8): decoders read a message truncated
after any section as if the rest were empty, and refuse non-zero padding.

Field names go on the wire in lower case (RFC 9292 §3.6); header values are bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["BinaryHTTPError", "Request", "Response", "decode_request", "decode_response",
           "encode_request", "encode_response", "encode_varint", "request_head"]

KNOWN_LENGTH_REQUEST = 0
KNOWN_LENGTH_RESPONSE = 1
MAX_VARINT = (1 << 62) - 1

Fields = tuple[tuple[str, bytes], ...]


class BinaryHTTPError(ValueError):
    """A byte string that is not a known-length Binary HTTP message of the expected kind."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A Binary HTTP request: control data, header fields (lower-case names), content."""

    method: str
    scheme: str
    authority: str
    path: str
    headers: Fields = ()
    content: bytes = b""

    def header(self, name: str) -> bytes | None:
        """The first value of header ``name`` (any case), or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)


@dataclasses.dataclass(frozen=True)
class Response:
    """A Binary HTTP final response: status, header fields (lower-case names), content."""

    status: int
    headers: Fields = ()
    content: bytes = b""

    def header(self, name: str) -> bytes | None:
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)


# --- varints (RFC 9000 §16) -------------------------------------------------------------------------
def encode_varint(n: int) -> bytes:
    """The shortest QUIC variable-length encoding of ``n`` (0 <= n < 2^62)."""
    if n < 0 or n > MAX_VARINT:
        raise ValueError(f"{n} does not fit a QUIC variable-length integer")
    if n < 0x40:
        return bytes((n,))
    if n < 0x4000:
        return (0x4000 | n).to_bytes(2, "big")
    if n < 0x4000_0000:
        return (0x8000_0000 | n).to_bytes(4, "big")
    return (0xC000_0000_0000_0000 | n).to_bytes(8, "big")


class _Reader:
    """Reads varints and length-prefixed strings; ``eof`` tells a truncated message apart."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    @property
    def eof(self) -> bool:
        return self.pos >= len(self.data)

    def varint(self) -> int:
        if self.eof:
            raise BinaryHTTPError("the message ends inside a varint")
        first = self.data[self.pos]
        size = 1 << (first >> 6)
        if self.pos + size > len(self.data):
            raise BinaryHTTPError("the message ends inside a varint")
        value = int.from_bytes(self.data[self.pos:self.pos + size], "big") & ((1 << (8 * size - 2)) - 1)
        self.pos += size
        return value

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise BinaryHTTPError(f"a length of {n} runs past the end of the message")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self) -> bytes:
        return self.take(self.varint())

    def section(self) -> bytes:
        """A length-prefixed section; at the end of a truncated message, an empty one."""
        return b"" if self.eof else self.string()


def _fields(headers: Sequence[tuple[str, bytes | str]]) -> bytes:
    out = bytearray()
    for name, value in headers:
        raw_name = name.lower().encode("ascii")
        raw_value = value.encode("latin-1") if isinstance(value, str) else bytes(value)
        out += encode_varint(len(raw_name)) + raw_name + encode_varint(len(raw_value)) + raw_value
    return encode_varint(len(out)) + bytes(out)


def _parse_fields(section: bytes) -> Fields:
    reader, out = _Reader(section), []
    while not reader.eof:
        name = reader.string()
        value = reader.string()
        try:
            text = name.decode("ascii")
        except UnicodeDecodeError:
            raise BinaryHTTPError("a field name is not ASCII") from None
        if not text or text != text.lower():
            raise BinaryHTTPError(f"field name {text[:40]!r} is empty or not lower case")
        out.append((text, value))
    return tuple(out)


def _pad(message: bytes, padded_length: int | None) -> bytes:
    if padded_length is None:
        return message
    if padded_length < len(message):
        raise ValueError(f"cannot pad a {len(message)}-byte message to {padded_length} bytes")
    return message + bytes(padded_length - len(message))


def _check_padding(reader: _Reader) -> None:
    rest = reader.data[reader.pos:]
    if rest.count(0) != len(rest):
        raise BinaryHTTPError("non-zero bytes after the message (padding must be zeros)")


# --- requests ----------------------------------------------------------------------------------------
def request_head(request: Request) -> bytes:
    """The encoding of ``request`` before its content: framing indicator, control data, header section."""
    out = bytearray(encode_varint(KNOWN_LENGTH_REQUEST))
    for part in (request.method, request.scheme, request.authority, request.path):
        raw = part.encode("ascii")
        out += encode_varint(len(raw)) + raw
    out += _fields(request.headers)
    return bytes(out)


def encode_request(request: Request, padded_length: int | None = None) -> bytes:
    """Known-length encoding of ``request``, zero-padded to ``padded_length`` bytes if given."""
    out = bytearray(request_head(request))
    out += encode_varint(len(request.content)) + request.content
    out += encode_varint(0)  # no trailers
    return _pad(bytes(out), padded_length)


def decode_request(data: bytes) -> Request:
    """A known-length request (possibly truncated after any section, possibly zero-padded)."""
    reader = _Reader(data)
    if reader.varint() != KNOWN_LENGTH_REQUEST:
        raise BinaryHTTPError("not a known-length Binary HTTP request (framing indicator 0)")
    try:
        method, scheme, authority, path = (reader.string().decode("ascii") for _ in range(4))
    except UnicodeDecodeError:
        raise BinaryHTTPError("request control data is not ASCII") from None
    headers = _parse_fields(reader.section())
    content = reader.section()
    _parse_fields(reader.section())  # trailers: read (and checked), not used
    _check_padding(reader)
    return Request(method, scheme, authority, path, headers, content)


# --- responses ---------------------------------------------------------------------------------------
def encode_response(response: Response, padded_length: int | None = None) -> bytes:
    """Known-length encoding of a final ``response``, zero-padded to ``padded_length`` if given."""
    if not 200 <= response.status <= 599:
        raise ValueError(f"a final response has a status in 200-599, not {response.status}")
    out = bytearray(encode_varint(KNOWN_LENGTH_RESPONSE))
    out += encode_varint(response.status)
    out += _fields(response.headers)
    out += encode_varint(len(response.content)) + response.content
    out += encode_varint(0)
    return _pad(bytes(out), padded_length)


def decode_response(data: bytes) -> Response:
    """A known-length response; informational (1xx) responses before the final one are skipped."""
    reader = _Reader(data)
    if reader.varint() != KNOWN_LENGTH_RESPONSE:
        raise BinaryHTTPError("not a known-length Binary HTTP response (framing indicator 1)")
    while True:
        status = reader.varint()
        if 100 <= status <= 199:
            _parse_fields(reader.string())
            continue
        if not 200 <= status <= 599:
            raise BinaryHTTPError(f"status {status} is not a final HTTP status")
        break
    headers = _parse_fields(reader.section())
    content = reader.section()
    _parse_fields(reader.section())
    _check_padding(reader)
    return Response(status, headers, content)
