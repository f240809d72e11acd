"""`gpu-autoscaler serve` (the demo) as a child process on free ports, as a new user starts it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from tests.eventually import eventually


class DemoProcess:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.process: subprocess.Popen[str] | None = None
        self.http_url = ""
        self.secure_port = 0
        self.start_log = ""

    def start(self, timeout_s: float = 60) -> float:
        """Start and read the log up to the kubectl hint; returns the monotonic start time."""
        started = time.monotonic()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autoscaler",
                "serve",
                "--state-dir",
                str(self.state),
                "--secure-port",
                "0",
                "--http-port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        lines: list[str] = []
        while time.monotonic() - started < timeout_s:
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if secure := re.search(r"external metrics API on https://127\.0\.0\.1:(\d+)", line):
                self.secure_port = int(secure.group(1))
            if found := re.search(r"probes and /metrics on (http://127\.0\.0\.1:\d+)", line):
                self.http_url = found.group(1)
                # The kubectl hint follows the URLs.
                lines += [self.process.stdout.readline() for _ in range(2)]
                self.start_log = "".join(lines)
                return started
        raise AssertionError("the demo did not start:\n" + "".join(lines))

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(how)
        return self.process.wait(timeout=30)

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
