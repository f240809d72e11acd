"""Sharded replicas as real processes (issue #16): first full selection, steady refresh, peak RSS,
API writes per second, and failover time over repeated SIGKILLs of a shard's holder.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_failover [--replicas 2] [--series 100] [--kills 5]

The fake Kubernetes API (``tests.fakekube``) runs in this process on loopback; a real Prometheus holds
``--series`` series ``bench_gpus{pool=...}`` backfilled from the Helios Earth per-VC running GPUs
(5-minute means, shifted per copy, plus 1 so that no real value is 0). ``--replicas`` processes of
``gpu-autoscaler serve`` (own state dir, ports, ``POD_NAME``; auth off, loopback) publish with sharding
and serve from the GPUForecast objects. Measured: time from start until every replica serves every
series; the refresh duration each replica reports on /metrics (steady: after the first); peak RSS of
each replica's process tree (VmHWM, service plus forecast workers); GPUForecast and Lease writes per
second seen by the fake API over a steady window. Then ``--kills`` times: SIGKILL the process group
of the replica holding a shard's Lease; poll every surviving replica's external metrics API every
0.2 s for every series (missing, or 0 where it was not, is counted); failover time = kill until a live
replica holds the shard's Lease and the shard's object has been written again (possibly with the
restored values, by a refresh under way at the takeover), and until every item of the object was
decided after the kill (the new owner's own forecasts), for that shard and for every shard the
killed replica held (the first and the last to be fresh); restart the killed
replica and wait for a balanced split before the next kill. Goal: failover within lease_duration plus
one refresh, no missing or zero value.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import yaml

from tests.fakekube import FakeKube
from tests.prometheus_fixture import PrometheusServer, binaries_or_skip
from tests.service_replicas import (
    FAMILY,
    NAMESPACE,
    Replica,
    backfill,
    balanced,
    holders,
    object_version,
    real_series,
    self_metric,
    served,
)

METRIC = "gpu_demand_forecast"
WRITES = {"POST", "PUT", "PATCH"}


def config(args: argparse.Namespace, prometheus_url: str, kubeconfig: Path) -> dict[str, Any]:
    return {
        "server": {"shutdown_grace": "1s", "shutdown_delay": "0s"},
        "auth": {"mode": "none"},
        "prometheus": {"url": prometheus_url, "timeout": "60s"},
        "kubernetes": {"kubeconfig": str(kubeconfig)},
        "signals": [{"name": "gpus", "query": FAMILY, "by": ["pool"], "step": "5m", "liveness": False}],
        "metrics": {METRIC: {"signal": "gpus", "kind": "demand"}},
        "forecast": {"lookback": f"{args.days}d", "interval": args.interval, "reselect_every": "1d", "workers": 1},
        "publication": {
            "enabled": True,
            "namespace": NAMESPACE,
            "shards": args.shards,
            "serve_from": "objects",
            "sharding": {
                "enabled": True,
                "lease_duration": args.lease_duration,
                "renew_deadline": args.renew_deadline,
                "retry_period": args.retry_period,
                "standby_models": not args.cold,
            },
        },
    }


async def wait_all_serving(session: aiohttp.ClientSession, replicas: list[Replica], count: int, limit: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        answers = [await served(session, r, METRIC) for r in replicas]
        if all(a is not None and len(a) == count for a in answers):
            return time.monotonic() - started
        for replica in replicas:
            replica.sample_rss()
        await asyncio.sleep(0.5)
    raise RuntimeError(f"not every replica served {count} series within {limit:g} s")


async def wait_balanced(fake: FakeKube, replicas: list[Replica], shards: int, limit: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if balanced(list(holders(fake, shards).values()), [r.name for r in replicas], shards):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"shards not balanced within {limit:g} s: {holders(fake, shards)}")


async def wait_standby(session: aiohttp.ClientSession, replicas: list[Replica], args: argparse.Namespace) -> float:
    """Until every replica holds every standby model (``gpu_autoscaler_standby_models_due`` 0), so
    that a kill finds the survivors warm as a real deployment's are between restarts (``--cold``: at once)."""
    if args.cold:
        return 0.0
    started, limit = time.monotonic(), args.start_limit
    while time.monotonic() - started < limit:
        due = [await self_metric(session, r, "gpu_autoscaler_standby_models_due") for r in replicas]
        if all(d == 0 for d in due):
            return time.monotonic() - started
        for replica in replicas:
            replica.sample_rss()
        await asyncio.sleep(1.0)
    raise RuntimeError(f"standby models not all held within {limit:g} s")


@dataclass
class Failover:
    seconds: float | None  # None: not published again within the limit
    lease_seconds: float | None
    # Every item of the shard's object decided after the kill: the new owner's own forecasts (a
    # write of the restored values, e.g. by a refresh that was under way at the takeover, is not).
    fresh_seconds: float | None
    # The same for every shard the killed replica held (its first and its last): since shards are
    # published one by one as their refits finish, the first comes well before the last.
    first_shard_fresh_seconds: float | None
    all_shards_fresh_seconds: float | None
    missing: int  # polls x series with no value on a surviving replica
    zero: int  # polls x series served 0 where the baseline was not 0
    polls: int


async def one_failover(
    fake: FakeKube, session: aiohttp.ClientSession, replicas: list[Replica], shard: int, args: argparse.Namespace
) -> tuple[Failover, Replica]:
    held = holders(fake, args.shards)
    victim = next(r for r in replicas if r.name == held[shard])
    victim_shards = {s for s, holder in held.items() if holder == victim.name}
    survivors = [r for r in replicas if r is not victim]
    baseline = await served(session, survivors[0], METRIC) or {}
    version = object_version(fake, shard, args.shards)
    killed, killed_wall = time.monotonic(), time.time()
    victim.kill()
    lease_at = published_at = None
    fresh: dict[int, float] = {}  # victim's shard -> seconds until its object held only fresh items
    missing = zero = polls = 0
    while time.monotonic() - killed < args.failover_limit and len(fresh) < len(victim_shards):
        now_held = holders(fake, args.shards)
        taken = now_held[shard] in {r.name for r in survivors}
        if taken and lease_at is None:
            lease_at = time.monotonic() - killed
        if taken and published_at is None and object_version(fake, shard, args.shards) != version:
            published_at = time.monotonic() - killed
        for other in victim_shards - fresh.keys():
            if now_held[other] in {r.name for r in survivors} and decided_after(fake, other, args.shards, killed_wall):
                fresh[other] = time.monotonic() - killed
        for replica in survivors:
            answer = await served(session, replica, METRIC) or {}
            missing += sum(pool not in answer for pool in baseline)
            zero += sum(answer.get(pool) == 0 and value != 0 for pool, value in baseline.items())
            polls += 1
        await asyncio.sleep(0.2)
    everything = max(fresh.values()) if len(fresh) == len(victim_shards) else None
    first = min(fresh.values(), default=None)
    return Failover(published_at, lease_at, fresh.get(shard), first, everything, missing, zero, polls), victim


def decided_after(fake: FakeKube, shard: int, shards: int, moment: float) -> bool:
    """Whether every item of the shard's object was decided after ``moment`` (seconds since the epoch)."""
    found = fake.get("gpuforecasts", f"shard-{shard}-of-{shards}", NAMESPACE) or {}
    items = (found.get("status") or {}).get("items") or []
    decided = [item.get("decidedAt") for item in items]
    return bool(items) and all(
        at is not None and datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() > moment for at in decided
    )


async def steady_writes(fake: FakeKube, seconds: float) -> dict[str, float]:
    before = len(fake.requests)
    await asyncio.sleep(seconds)
    window = fake.requests[before:]
    return {
        plural: sum(r.method in WRITES and r.plural == plural for r in window) / seconds
        for plural in ("gpuforecasts", "leases")
    }


async def run(args: argparse.Namespace, work: Path) -> None:
    prometheus_binary, promtool = binaries_or_skip()
    series = real_series(args.series, args.days)
    blocks, end = backfill(series, work, promtool), series[0].index[-1]
    server = PrometheusServer(binary=prometheus_binary, data_dir=blocks, trace=None, probe_at=end)
    fake = FakeKube(work)
    replicas: list[Replica] = []
    try:
        server.start()
        await fake.start()
        settings = work / "config.yaml"
        settings.write_text(yaml.safe_dump(config(args, server.url, fake.kubeconfig_path)))
        for index in range(args.replicas):
            (work / f"replica-{index}").mkdir()
            replicas.append(Replica(index, work / f"replica-{index}", settings))
        async with aiohttp.ClientSession() as session:
            await measure(fake, session, replicas, args)
    finally:
        for replica in replicas:
            replica.kill()
        await fake.stop()
        server.stop()


async def measure(
    fake: FakeKube, session: aiohttp.ClientSession, replicas: list[Replica], args: argparse.Namespace
) -> None:
    for replica in replicas:
        replica.start()
    first = await wait_all_serving(session, replicas, args.series, args.start_limit)
    print(f"first full selection: every replica serves all {args.series} series {first:.1f} s after start", flush=True)
    await wait_balanced(fake, replicas, args.shards, args.start_limit)
    warm = await wait_standby(session, replicas, args)
    print(f"standby models: every replica holds every other shard's models {warm:.1f} s later", flush=True)
    writes = await steady_writes(fake, args.steady_window)
    refreshes = [await self_metric(session, r, "gpu_autoscaler_refresh_duration_seconds") for r in replicas]
    print(f"steady refresh (last, per replica): {', '.join(f'{s:.2f} s' if s else '-' for s in refreshes)}")
    print(
        f"writes/s to the API over {args.steady_window:g} s (all replicas): "
        f"GPUForecast {writes['gpuforecasts']:.2f}, Lease {writes['leases']:.2f}",
        flush=True,
    )
    for replica in replicas:
        replica.sample_rss()
    # Before any failover: a survivor then holds the models of every series, and VmHWM keeps that peak.
    print(f"peak RSS per replica before the first kill: {peaks(replicas)}")
    results = []
    for kill in range(args.kills):
        shard = kill % args.shards
        result, victim = await one_failover(fake, session, replicas, shard, args)
        results.append(result)
        print(f"kill {kill + 1}: {victim.name} (shard {shard}) {result}", flush=True)
        victim.start()
        await wait_all_serving(session, replicas, args.series, args.start_limit)
        warm = await wait_standby(session, replicas, args)  # the restarted replica warms up first
        await wait_balanced(fake, replicas, args.shards, args.start_limit)
        print(f"  restarted {victim.name}: warm {warm:.1f} s after serving", flush=True)
    for replica in replicas:
        replica.sample_rss()
    report(results, replicas, args)


def peaks(replicas: list[Replica]) -> str:
    """Each replica's peak RSS (MiB, summed over its processes: shared library pages count in each)."""
    return ", ".join(
        f"{r.peak_rss_mb:.0f} MiB (service {r.service_peak_rss_mb:.0f}, workers {r.workers_peak_rss_mb:.0f})"
        for r in replicas
    )


def report(results: list[Failover], replicas: list[Replica], args: argparse.Namespace) -> None:
    done = [r.seconds for r in results if r.seconds is not None]
    leases = [r.lease_seconds for r in results if r.lease_seconds is not None]
    print(f"peak RSS per replica: {peaks(replicas)}")
    if done:
        print(
            f"failover (lease taken and object written): p50 {np.percentile(done, 50):.1f} s, "
            f"p95 {np.percentile(done, 95):.1f} s, max {max(done):.1f} s over {len(done)} of {len(results)} kills"
        )
    if leases:
        print(f"lease taken: p50 {np.percentile(leases, 50):.1f} s, p95 {np.percentile(leases, 95):.1f} s")
    fresh = [r.fresh_seconds for r in results if r.fresh_seconds is not None]
    if fresh:
        print(
            f"new owner's own forecasts published: p50 {np.percentile(fresh, 50):.1f} s, "
            f"p95 {np.percentile(fresh, 95):.1f} s, max {max(fresh):.1f} s over {len(fresh)} of {len(results)} kills"
        )
    for label, values in (
        ("first of the killed replica's shards fresh", [r.first_shard_fresh_seconds for r in results]),
        ("all of the killed replica's shards fresh", [r.all_shards_fresh_seconds for r in results]),
    ):
        known = [value for value in values if value is not None]
        if known:
            print(
                f"{label}: p50 {np.percentile(known, 50):.1f} s, p95 {np.percentile(known, 95):.1f} s, "
                f"max {max(known):.1f} s over {len(known)} of {len(results)} kills"
            )
    print(
        f"missing values: {sum(r.missing for r in results)}, zero values: {sum(r.zero for r in results)} "
        f"over {sum(r.polls for r in results)} polls x {args.series} series"
    )
    print(f"goal: lease_duration + one refresh = {args.lease_duration} + {args.interval}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--days", type=int, default=3, help="history per series (5-minute points)")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--interval", default="10s", help="forecast.interval (refresh)")
    parser.add_argument("--lease-duration", default="15s")
    parser.add_argument("--renew-deadline", default="10s")
    parser.add_argument("--retry-period", default="2s")
    parser.add_argument("--steady-window", type=float, default=30.0, help="seconds over which writes are counted")
    parser.add_argument("--failover-limit", type=float, default=90.0, help="seconds per kill at most")
    parser.add_argument("--start-limit", type=float, default=600.0, help="seconds to start/converge at most")
    parser.add_argument("--cold", action="store_true", help="without standby models: a takeover refits")
    parser.add_argument("--keep-logs", type=Path, help="copy each replica's serve.log into this directory")
    args = parser.parse_args()
    print(
        f"{args.replicas} replicas, {args.series} series, {args.shards} shards, {args.days} days of history, "
        f"refresh {args.interval}, lease {args.lease_duration}/{args.renew_deadline}/{args.retry_period}; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        try:
            asyncio.run(run(args, Path(work)))
        finally:
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in Path(work).glob("replica-*/serve.log"):
                    shutil.copy(log, args.keep_logs / f"{log.parent.name}.log")
    print(f"wall time {time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
