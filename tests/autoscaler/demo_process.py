"""`gpu-autoscaler serve` (the demo) as a child process on free ports, as a new user starts it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import pytest

from tests.eventually import eventually


class DemoProcess:
    def __init__(
        self, state: Path, *, env: Mapping[str, str] | None = None, config: Path | None = None, session: bool = False
    ) -> None:
        """``env`` is added to the environment; with ``config`` the service runs that file, not the demo;
        with ``session`` it leads a process group of its own, as a shell's foreground job does."""
        self.session = session
        self.state = state
        self.env = dict(env or {})
        self.config = config
        self.process: subprocess.Popen[str] | None = None
        self.http_url = ""
        self.secure_port = 0
        self.start_log = ""
        # Every line the process wrote, read by a thread so the pipe never fills.
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        ports = ["--state-dir", str(self.state), "--secure-port", "0", "--http-port", "0"]
        # The demo serves KEDA's gRPC scaler too (on 9443 unless told): a free port, like the others.
        config = ["--config", str(self.config)] if self.config is not None else ["--grpc-port", "0"]
        return [sys.executable, "-m", "autoscaler", "serve", *config, *ports]

    def start(self, timeout_s: float = 60) -> float:
        """Start and read the log up to the kubectl hint; returns the monotonic start time."""
        started = time.monotonic()
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **self.env},
            start_new_session=self.session,
        )
        assert self.process.stdout is not None
        lines = self.lines
        while time.monotonic() - started < timeout_s:
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if secure := re.search(r"external metrics API on https://127\.0\.0\.1:(\d+)", line):
                self.secure_port = int(secure.group(1))
            if found := re.search(r"probes and /metrics on (http://127\.0\.0\.1:\d+)", line):
                self.http_url = found.group(1)
                if self.config is None:  # the demo's kubectl hint follows the URLs
                    lines += [self.process.stdout.readline() for _ in range(2)]
                self.start_log = "".join(lines)
                self._reader = threading.Thread(target=self._read_rest, daemon=True)
                self._reader.start()
                return started
        raise AssertionError("the demo did not start:\n" + "".join(lines))

    def _read_rest(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    async def wait_for_log(self, pattern: str, timeout_s: float = 10) -> re.Match[str]:
        """The first match of ``pattern`` in the log, polled until the deadline."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if found := re.search(pattern, self.log):
                return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"no log line matches {pattern!r} within {timeout_s} s:\n{self.log}")

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(how)
        code = self.process.wait(timeout=30)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return code

    async def wait_ready(self, timeout_s: float = 180) -> str:
        """The /readyz?verbose text once it answers 200; until then it must say it is warming up."""
        async with aiohttp.ClientSession() as session:

            async def ready_text() -> str | None:
                async with session.get(f"{self.http_url}/readyz?verbose") as response:
                    text = await response.text()
                if response.status == 200:
                    return text
                if response.status == 503 and "warming up" in text:
                    return None
                pytest.fail(f"/readyz answered {response.status} before it was ready: {text}")

            return await eventually(ready_text, message="/readyz to answer 200", timeout=timeout_s, interval=0.2)
