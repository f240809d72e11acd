"""The read-only trial's process: the refresher, the page and the inspection API, nothing else.

Built as the service is (``open_pipeline``, ``create_app``) from settings that use no Kubernetes API
(``autoscaler.checks.trial.read_only_settings``); the secure app is started for its refresher but bound to no
port, so neither the external metrics API nor KEDA's scaler is served. Only the plain port listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web

from autoscaler.app.access import needs_kubernetes_api
from autoscaler.app.factory import create_app
from autoscaler.app.serving import settle_heap
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import open_pipeline
from autoscaler.simulation.replay import replay_ledgers
from autoscaler.state_files import remove_stale_temporaries
from autoscaler.web.security.auth import AccessControl
from autoscaler.web.shared.keys import NOTICE

log = logging.getLogger(__name__)


async def serve_read_only(settings: Settings, notice: str, *, stop: asyncio.Event | None = None) -> None:
    """Forecast from ``settings.prometheus`` and show it on ``server.http_port`` until SIGTERM/SIGINT."""
    if needs_kubernetes_api(settings) or settings.actuators.capacity_buffers is not None:
        raise ValueError("the read-only trial's settings must need no Kubernetes API and write nothing")
    if settings.server.http_port is None:
        raise ValueError("the read-only trial shows its forecasts on server.http_port: it cannot be off")
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    remove_stale_temporaries(settings.state_dir)  # as ``serving.serve``: it writes the same state files
    async with contextlib.AsyncExitStack() as stack:
        pipeline = await stack.enter_async_context(open_pipeline(settings, None, replay_ledgers))
        api_app, ops_app = create_app(settings, pipeline=pipeline, access=AccessControl(None, None))
        ops_app[NOTICE] = notice
        # Started for its cleanup contexts (the refresher), never bound: nothing answers the cluster.
        refreshing = web.AppRunner(api_app, handle_signals=False)
        await refreshing.setup()
        stack.push_async_callback(refreshing.cleanup)
        runner = web.AppRunner(ops_app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, settings.server.bind_address, settings.server.http_port, reuse_address=True)
        await site.start()
        port = runner.addresses[0][1]
        settle_heap()
        host = settings.server.bind_address
        log.info("%s", notice)
        log.info("forecasts on http://%s:%d/ (the page) and http://%s:%d/api/v1/forecasts", host, port, host, port)
        await stop.wait()
        log.info("shutting down")
