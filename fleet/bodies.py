"""Read a request body with a hard cap on its decompressed size.

Reports may arrive gzip-compressed (``Content-Encoding: gzip``). Decompression is
streamed and stops as soon as the output passes the cap, so a gzip bomb costs
at most ``cap`` bytes of memory before it is refused.
"""

from __future__ import annotations

import zlib

from django.http import HttpRequest

CHUNK_BYTES = 64 * 1024


class BodyError(Exception):
    """A body that cannot be accepted. ``status`` is 413 (too large), 400, 411 or 415."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def read_capped_body(request: HttpRequest, cap: int) -> bytes:
    """Return the decompressed body of ``request``, at most ``cap`` bytes.

    Raises BodyError(413) past the cap (checked on Content-Length first, then while
    reading and while decompressing), BodyError(400) on a corrupt gzip stream or bytes
    after its end, BodyError(411) without a Content-Length (a chunked upload: WSGI would
    hand Django an empty body), BodyError(415) on an encoding other than identity/gzip.
    """
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", ""):
        raise BodyError(415, f"unsupported Content-Encoding {encoding!r}; use gzip or none")
    declared = (request.headers.get("Content-Length") or "").strip()
    if not (declared.isascii() and declared.isdecimal()) or len(declared) > 18:
        # isdigit() accepts "²", which int() refuses; 18 digits is past any cap
        raise BodyError(411, "Content-Length required (chunked uploads are not accepted)")
    # A compressed body larger than the cap can only decompress to more than the cap
    # (gzip never shrinks below ~0.1% overhead on incompressible data; allow 1%).
    wire_cap = cap + cap // 100 + 1024 if encoding == "gzip" else cap
    if int(declared) > wire_cap:
        raise BodyError(413, f"body larger than {cap} bytes")
    if encoding == "gzip":
        return _gunzip_capped(request, cap, wire_cap)
    return _read_raw(request, cap)


def _read_raw(request: HttpRequest, cap: int) -> bytes:
    data = bytearray()
    while chunk := request.read(CHUNK_BYTES):
        data += chunk
        if len(data) > cap:
            raise BodyError(413, f"body larger than {cap} bytes")
    return bytes(data)


def _gunzip_capped(request: HttpRequest, cap: int, wire_cap: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16+: gzip header and trailer
    out = bytearray()
    read = 0
    try:
        while chunk := request.read(CHUNK_BYTES):
            read += len(chunk)
            if read > wire_cap:
                raise BodyError(413, f"body larger than {cap} bytes")
            _inflate(inflater, chunk, out, cap)
        out += inflater.flush()
    except zlib.error as exc:
        raise BodyError(400, f"corrupt gzip body: {exc}") from None
    if len(out) > cap:
        raise BodyError(413, f"body larger than {cap} bytes after decompression")
    if not inflater.eof:
        raise BodyError(400, "truncated gzip body")
    if inflater.unused_data:  # another member or garbage: the agent sends exactly one
        raise BodyError(400, "data after the end of the gzip stream")
    return bytes(out)


def _inflate(inflater: zlib._Decompress, chunk: bytes, out: bytearray, cap: int) -> None:
    data = chunk
    while data:
        # max_length bounds each step's output, so memory never exceeds cap + 1 byte.
        out += inflater.decompress(data, cap + 1 - len(out))
        if len(out) > cap:
            raise BodyError(413, f"body larger than {cap} bytes after decompression")
        data = inflater.unconsumed_tail


def drain(request: HttpRequest, limit: int) -> None:
    """Read and drop what is left of ``request``'s body, at most ``limit`` bytes, before a
    refusal is answered. A refusal sent while the proxy in front (deploy/Caddyfile) is still
    uploading the body makes gunicorn close the connection under it, and the agent gets the
    proxy's 502 instead of the 401/403/429 that tells it what to do. Never raises."""
    try:
        remaining = limit
        while remaining > 0 and (chunk := request.read(min(CHUNK_BYTES, remaining))):
            remaining -= len(chunk)
    except Exception:  # a refusal must still be answered, whatever the stream does
        return
