"""Input quoted back in an error: at most :data:`MAX_ECHO_BYTES` of it, and how much was left out.

Every error body, header and gRPC status message that quotes what a caller sent (a metric name, a
path, a label selector, a query parameter, a trigger's metadata) quotes it through :func:`echo`, so
that a 60,000-character name costs its sender the bytes, not the service an answer as large.
"""

from __future__ import annotations

# 1 KiB: any real name, path or selector a person reads in an error is shorter.
MAX_ECHO_BYTES = 1024


def echo(text: str, limit: int = MAX_ECHO_BYTES) -> str:
    """``text`` whole when its UTF-8 is at most ``limit`` bytes, else its first ``limit`` bytes (never a
    character cut in two) followed by ``... (N more bytes)``."""
    encoded = text.encode("utf-8", "surrogatepass")  # aiohttp's paths may hold lone surrogates
    if len(encoded) <= limit:
        return text
    kept = encoded[:limit].decode("utf-8", "ignore")
    cut = len(encoded) - len(kept.encode("utf-8"))
    return f"{kept}... ({cut} more bytes)"
