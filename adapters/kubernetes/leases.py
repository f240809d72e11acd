"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

kubernetes-asyncio ships a ``leaderelection`` package, but it measures expiry and renewal deadlines
with ``time.time()`` and stores ``str(datetime)`` (not RFC 3339) as the record's times; this module
judges time by the event loop's clock (so tests fast-forward it) and writes MicroTime.

A candidate that does not hold the Lease takes it only after it has seen the same record unchanged
for ``lease_duration`` on its own clock (clocks of different machines are never compared). The
holder renews every ``retry_period`` and stops counting itself leader once ``renew_deadline`` has
passed since its last successful renewal, before any other candidate can take over.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, V1Lease

from adapters.kubernetes.client import KubeError, KubeNotFound, read_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


def own_identity() -> str:
    """This replica's name in Leases: POD_NAME, else the host name, plus a suffix unique per process."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Keeps trying to hold one Lease; ``is_leader`` says whether this replica may act now."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming,
        *,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.namespace, self.name, self.identity, self.timing = namespace, name, identity, timing
        self.holder: str | None = None  # the holder last seen
        # The Lease's metadata.annotations at every create and renewal. A write replaces the whole
        # object, so a key left out here is removed from the Lease by the next renewal.
        self.annotations: dict[str, str] = {}
        self.last_error: str | None = None
        self._api = CoordinationV1Api(api)
        self._on_change = on_change
        self._renewed_at: float | None = None  # loop time of this replica's last successful write
        self._observed: tuple[Any, ...] | None = None  # the other holder's record last seen ...
        self._observed_at = 0.0  # ... and when it was first seen that way

    @property
    def is_leader(self) -> bool:
        if self._renewed_at is None:
            return False
        return asyncio.get_running_loop().time() - self._renewed_at < self.timing.renew_deadline_s

    async def run(self) -> None:
        """Try to acquire or renew every retry period, forever (cancel to stop)."""
        was_leader = False
        while True:
            try:
                await self.try_acquire_or_renew()
                self.last_error = None
            except KubeError as error:
                self.last_error = str(error)
                log.warning("lease %s/%s: %s", self.namespace, self.name, error)
            leader = self.is_leader
            if leader != was_leader:
                log.info("lease %s/%s: %s", self.namespace, self.name, "acquired" if leader else "lost")
                if self._on_change is not None:
                    self._on_change(leader)
                was_leader = leader
            await asyncio.sleep(self.timing.retry_period_s)

    async def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the Lease when allowed; True if this replica holds it."""
        return await self.step(await self.read())

    async def read(self) -> dict[str, Any] | None:
        """The Lease as the API server has it now; None if it does not exist."""
        try:
            lease: dict[str, Any] = await read_json(
                self._api.read_namespaced_lease(self.name, self.namespace, _preload_content=False),
                f"get lease {self.namespace}/{self.name}",
            )
        except KubeNotFound:
            return None
        return lease

    def observe(self, lease: dict[str, Any] | None) -> bool:
        """Note the Lease as read (``None``: absent); True if this replica could take it now: absent,
        free, its own, or another holder's record unchanged for ``leaseDurationSeconds`` here."""
        now = asyncio.get_running_loop().time()
        if lease is None:
            self.holder = None
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        self.holder = holder
        if holder is None or holder == self.identity:
            return True
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self._renewed_at = None  # another holder: this replica does not hold it, whatever it thought
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration_s)
        return now - self._observed_at >= duration

    async def step(self, lease: dict[str, Any] | None, *, acquire: bool = True) -> bool:
        """Act on the Lease as read: renew it if held; take it if allowed and ``acquire``; True if held.

        The write carries the read's resourceVersion: of two candidates that read the same version,
        the API server accepts one and answers the other 409 Conflict (which loses, quietly).
        """
        what = f"lease {self.namespace}/{self.name}"
        if not self.observe(lease):
            return False
        held = lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity
        if not held and not acquire:
            return False
        now = asyncio.get_running_loop().time()
        return await self._write(lease, now, f"{'update' if lease else 'create'} {what}")

    async def release(self, lease: dict[str, Any] | None = None) -> None:
        """Stop acting at once, then hand the Lease back (holderIdentity cleared, resourceVersion-checked)
        so that another candidate takes it at its next round instead of after the lease duration."""
        self._renewed_at = None
        lease = lease if lease is not None else await self.read()
        spec = dict((lease or {}).get("spec") or {})
        if lease is None or spec.get("holderIdentity") != self.identity:
            return
        spec.pop("holderIdentity", None)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {k: lease["metadata"][k] for k in ("name", "namespace", "resourceVersion")},
            "spec": spec,
        }
        call = self._api.replace_namespaced_lease(
            self.name, self.namespace, cast("V1Lease", body), _preload_content=False
        )
        try:
            await read_json(call, f"release lease {self.namespace}/{self.name}")
        except KubeError as error:
            if error.status != 409:  # 409: changed since read; it is someone else's to decide now
                raise
        self.holder = None

    async def _write(self, lease: dict[str, Any] | None, now: float, what: str) -> bool:
        moment = _micro_time(datetime.now(UTC))
        spec = dict((lease or {}).get("spec") or {})
        taking_over = spec.get("holderIdentity") != self.identity
        if taking_over:
            spec["acquireTime"] = moment
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        spec |= {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.timing.lease_duration_s),
            "renewTime": moment,
        }
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
        typed = cast("V1Lease", body)  # the client sends a dict body as it is (raw JSON, as read)
        try:
            if lease is None:
                call = self._api.create_namespaced_lease(self.namespace, typed, _preload_content=False)
            else:
                call = self._api.replace_namespaced_lease(self.name, self.namespace, typed, _preload_content=False)
            await read_json(call, what)
        except KubeError as error:
            if error.status == 409:  # another candidate wrote first: it holds the Lease
                return False
            raise
        self._renewed_at, self.holder = now, self.identity
        return True
