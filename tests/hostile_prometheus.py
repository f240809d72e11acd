"""A Prometheus that misbehaves, as its own process on loopback: ``python -m tests.hostile_prometheus MODE``.

It prints ``listening on http://127.0.0.1:PORT`` and serves ``/api/v1/query_range``. Queries starting
with ``count(`` (the trial's checks of kube-state-metrics, dcgm-exporter and the pools, and the
liveness queries) get a healthy answer: one series, 1 at every step of the range asked, so that
``serve --prometheus-url`` and ``report`` get past their checks. Every other query (the history
itself) gets the answer of ``MODE``:

- ``many_series``: a matrix of two million series, streamed (about 90 MB);
- ``huge_body``: 200 MB, series whose one label is 10 KB long;
- ``gzip_bomb``: the same 200 MB gzip-compressed, under a megabyte on the wire;
- ``body_50mb``: 50 MB, one series with five million samples;
- ``drip``: a valid start, then one byte every 50 ms, for ever;
- ``silent``: the request read, then no answer at all, for ever;
- ``deep``: a field nested 100,000 arrays deep;
- ``huge_number``: a timestamp of 5,000 digits;
- ``timeout``: HTTP 503, Prometheus's own "query timed out in expression evaluation".

The bodies are generated as they are sent: the server's own memory stays small.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator

from aiohttp import web

MODES = ("many_series", "huge_body", "gzip_bomb", "body_50mb", "drip", "silent", "deep", "huge_number", "timeout")
HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
TAIL = b"]}}"
MB = 1_000_000


def _seconds(step: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    match = re.fullmatch(r"([0-9.]+)([smhd]?)", step)
    if match is None:
        raise web.HTTPBadRequest(text=f"step {step!r}")
    return float(match.group(1)) * units[match.group(2) or "s"]


def healthy(request: web.Request) -> web.Response:
    start, end = float(request.query["start"]), float(request.query["end"])
    step = _seconds(request.query["step"])
    count = int((end - start) // step) + 1
    values = [[start + i * step, "1"] for i in range(count)]
    result = [{"metric": {}, "values": values}]
    return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": result}})


def _many_series() -> Iterator[bytes]:
    yield HEAD
    for block in range(2_000):
        yield b",".join(b'{"metric":{"i":"%d"},"values":[[1,"1"]]}' % (block * 1000 + i) for i in range(1000)) + (
            b"," if block < 1_999 else b""
        )
    yield TAIL


def _huge_body() -> Iterator[bytes]:
    yield HEAD
    pad = b"x" * 10_000
    for i in range(20_000):
        yield (b"," if i else b"") + b'{"metric":{"pad":"%s","i":"%d"},"values":[]}' % (pad, i)
    yield TAIL


def _gzip_bomb() -> Iterator[bytes]:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip format
    for chunk in _huge_body():
        if compressed := compressor.compress(chunk):
            yield compressed
    yield compressor.flush()


def _body_50mb() -> Iterator[bytes]:
    yield HEAD + b'{"metric":{},"values":['
    sample = b'[1700000000,"1"],'
    block = sample * (MB // len(sample))
    for _ in range(50):
        yield block
    yield b'[1700000000,"1"]]}' + TAIL


def _deep() -> Iterator[bytes]:
    deep = b"[" * 100_000 + b"]" * 100_000
    yield b'{"status":"success","infos":' + deep + b',"data":{"resultType":"matrix","result":[]}}'


def _huge_number() -> Iterator[bytes]:
    yield HEAD + b'{"metric":{},"values":[[' + b"9" * 5_000 + b',"1"]]}' + TAIL


async def hostile(request: web.Request, mode: str) -> web.StreamResponse:
    if mode == "timeout":
        error = {"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}
        return web.json_response(error, status=503)
    if mode == "silent":
        await asyncio.Event().wait()
    headers = {"Content-Type": "application/json"} | ({"Content-Encoding": "gzip"} if mode == "gzip_bomb" else {})
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    try:
        if mode == "drip":
            await response.write(HEAD)
            while True:
                await response.write(b" ")
                await asyncio.sleep(0.05)
        generate = {
            "many_series": _many_series,
            "huge_body": _huge_body,
            "gzip_bomb": _gzip_bomb,
            "body_50mb": _body_50mb,
            "deep": _deep,
            "huge_number": _huge_number,
        }[mode]
        for chunk in generate():
            await response.write(chunk)
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass  # the client stopped reading: what a bounded client does
    return response


async def serve(mode: str) -> None:
    async def query_range(request: web.Request) -> web.StreamResponse:
        if request.query.get("query", "").startswith("count("):
            return healthy(request)
        return await hostile(request, mode)

    app = web.Application()
    app.router.add_get("/api/v1/query_range", query_range)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


@contextlib.contextmanager
def running(mode: str) -> Iterator[str]:
    """The server in ``mode`` as a child process; its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile_prometheus", mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the hostile Prometheus did not start: {line!r}")
        yield line.removeprefix("listening on ").strip()
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: python -m tests.hostile_prometheus {{{','.join(MODES)}}}; {json.dumps(sys.argv[1:])}")
    asyncio.run(serve(sys.argv[1]))
