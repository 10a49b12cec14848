"""The elastic driver's wire format: one request, one answer, over a TCP connection to horo-run.

A message is a JSON header and an opaque payload (the committed state, already serialised by the
framework; sent from a list of buffers without joining them), each length-prefixed:

    u32 header length | header (UTF-8 JSON) | u64 payload length | payload

The header carries the job's secret, so a stray connection is refused before anything is read
into memory; nothing received is ever unpickled by the driver.
"""
import json
import struct

_HEADER_LENGTH = struct.Struct("!I")
_PAYLOAD_LENGTH = struct.Struct("!Q")
MAX_HEADER_BYTES = 1 << 20


class WireError(ConnectionError):
    pass


def send_message(sock, header, payload=b""):
    """`payload`: bytes-like, or a list of bytes-like parts sent one after the other."""
    parts = [memoryview(p).cast("B") for p in (payload if isinstance(payload, list) else [payload])]
    head = json.dumps(header).encode()
    sock.sendall(_HEADER_LENGTH.pack(len(head)) + head + _PAYLOAD_LENGTH.pack(sum(p.nbytes for p in parts)))
    for part in parts:
        if part.nbytes:
            sock.sendall(part)


def _read_exactly(sock, count, buf=None):
    buf = bytearray(count) if buf is None else buf
    view = memoryview(buf)
    got = 0
    while got < count:
        n = sock.recv_into(view[got:], count - got)
        if n == 0:
            raise WireError(f"connection closed after {got} of {count} bytes")
        got += n
    return buf


def recv_message(sock, accept=None, payload_buffer=None):
    """(header dict, payload bytearray); raises WireError on a short read or a malformed header.
    `accept(header)` runs before the payload is read, so it can refuse one (by raising);
    `payload_buffer(header, length)` may supply the bytearray of that length to read the payload into."""
    (head_len,) = _HEADER_LENGTH.unpack(_read_exactly(sock, _HEADER_LENGTH.size))
    if head_len > MAX_HEADER_BYTES:
        raise WireError(f"header of {head_len} bytes: not a horo elastic message")
    try:
        header = json.loads(bytes(_read_exactly(sock, head_len)))
    except ValueError as e:
        raise WireError(f"malformed header: {e}") from None
    if not isinstance(header, dict):
        raise WireError("malformed header: not an object")
    if accept is not None:
        accept(header)
    (payload_len,) = _PAYLOAD_LENGTH.unpack(_read_exactly(sock, _PAYLOAD_LENGTH.size))
    if not payload_len:
        return header, b""
    buf = payload_buffer(header, payload_len) if payload_buffer is not None else None
    return header, _read_exactly(sock, payload_len, buf)
