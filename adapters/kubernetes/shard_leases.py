"""Shards owned through Leases: one ``coordination.k8s.io/v1`` Lease per shard, balanced across replicas.

Design (docs/high-availability.md, "Ownership"): every replica renews a membership Lease of its own
(``<prefix>-member-<identity>``) and, every retry period, lists the Leases of its namespace once.

- Live replicas: the membership Leases whose holder renewed them within ``leaseDurationSeconds``,
  judged on this replica's clock (a record seen unchanged for that long is dead), itself included.
- Fair share: ``ceil(shards / live replicas)``.
- It renews the shard Leases it holds. Holding more than its share, it releases the extras (stops
  acting on them first, then clears ``holderIdentity``) so a newcomer takes them at its next round.
  Holding fewer, it takes free or expired shard Leases (starting at an offset its identity hashes
  to, so that replicas do not all contend for shard 0) until it holds its share.

Warm standby (``ready``): a replica whose ``ready()`` is False (it does not hold fitted models yet for
the shards it does not own, so taking one would mean a refit) is *warming*. Its membership Lease then
carries the annotation ``gpu-autoscaler.io/warming: "true"``, written by its ordinary renewal (no
extra write); once ready, the next renewal leaves the annotation out, which removes it (an absent
annotation, or any value but "true", means warm; ``ready=None``: always warm, never annotated).

- The other replicas leave warming members out of their count, so none releases a shard for one.
- A warming replica counts its own share as if it were warm (itself and the live warm members) and
  releases what it holds beyond that, to the warm ones. It takes no shard while another live member
  is warm: that one takes what is free or expired (its share grows when a holder dies).
- When no other live member is warm (the others are all dead or warming), it takes free or expired
  shards up to ``ceil(shards / live)``, counting itself and the live warming members: cold, better
  than unowned, and split among the cold. Shards are never released to a warming member.

Every write is a resourceVersion-checked update (``LeaseElector``): of two replicas that read one
version of a Lease, one write succeeds and the other gets 409 Conflict, so a shard never has two
holders. A holder stops counting a shard as its own once ``renew_deadline`` has passed since its last
successful renewal, before any other replica may take it (``lease_duration`` > ``renew_deadline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, V1DeleteOptions, V1Preconditions

from adapters.kubernetes.client import KubeError, read_json
from adapters.kubernetes.leases import LeaseElector, LeaseTiming

log = logging.getLogger(__name__)

WARMING_ANNOTATION = "gpu-autoscaler.io/warming"


def shard_lease_name(prefix: str, shard: int, shards: int) -> str:
    return f"{prefix}-shard-{shard}-of-{shards}"


def member_lease_name(prefix: str, identity: str) -> str:
    """A valid object name made of the identity (which may hold '_' or capitals)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", identity.lower()).strip("-")
    return f"{prefix}-member-{cleaned}"[:253].rstrip("-")


class ShardOwnership:
    """Which shards this replica owns now (``owns``), kept by one loop of Lease rounds (``run``)."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        *,
        prefix: str,
        shards: int,
        identity: str,
        timing: LeaseTiming,
        on_change: Callable[[int, bool], None] | None = None,
        forget_members_after_s: float = 600.0,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.namespace, self.prefix, self.shards, self.identity = namespace, prefix, shards, identity
        self.timing = timing
        self.forget_members_after_s = forget_members_after_s
        self.on_change = on_change or (lambda shard, owned: None)
        self.rounds = 0
        self.attempted = asyncio.Event()  # set once the first round has been tried (done or failed)
        self._ready = ready or (lambda: True)
        self.warming = False  # as of the last round: not ready(), its membership Lease so annotated
        self.live = 1  # replicas in the fair share at the last round: itself and the live warm members
        self.warming_others = 0  # the live members other than itself that were warming at the last round
        self.last_error: str | None = None
        self._api = CoordinationV1Api(api)
        self.electors = [
            LeaseElector(api, namespace, shard_lease_name(prefix, shard, shards), identity, timing)
            for shard in range(shards)
        ]
        self.member = LeaseElector(api, namespace, member_lease_name(prefix, identity), identity, timing)
        # Other member Leases -> (holder and renewTime, when this replica first saw that record).
        self._members: dict[str, tuple[tuple[Any, Any], float]] = {}
        self._acting: set[int] = set()  # shards the last on_change calls said this replica owns
        start = int.from_bytes(hashlib.sha256(identity.encode()).digest()[:4], "big") % shards
        self._order = [(start + i) % shards for i in range(shards)]

    def owns(self, shard: int) -> bool:
        """Whether this replica may act on ``shard`` now (renewed within the renew deadline)."""
        return self.electors[shard].is_leader

    def owned(self) -> frozenset[int]:
        return frozenset(shard for shard in range(self.shards) if self.owns(shard))

    @property
    def share(self) -> int:
        return math.ceil(self.shards / max(1, self.live))

    # ------------------------------------------------------------------ running

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ShardOwnership]:
        """Rounds for as long as the block runs; at its end, hand every shard back (a clean shutdown)."""
        task = asyncio.create_task(self.run(), name="shard-leases")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self.release_all()

    async def run(self) -> None:
        """A round every retry period, forever (cancelled without releasing: as a replica that dies)."""
        while True:
            try:
                await self.round()
                self.last_error = None
            except KubeError as error:
                self.last_error = str(error)
                log.warning("shard leases: %s", error)
            self.attempted.set()
            self._tell()
            await asyncio.sleep(self.timing.retry_period_s)

    async def release_all(self) -> None:
        """Hand every shard back and delete this replica's membership Lease (it leaves for good;
        a restarted pod makes a new identity, hence a new membership Lease)."""
        for shard in sorted(self._acting):
            self._set_acting(shard, False)
        for elector in self.electors:
            if elector.holder != self.identity:
                continue
            try:
                await elector.release()
            except KubeError as error:  # it lapses after leaseDurationSeconds instead
                log.warning("shard leases: could not release %s: %s", elector.name, error)
        try:
            lease = await self.member.read()
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                await self._delete(self.member.name, str(lease["metadata"]["resourceVersion"]))
        except KubeError as error:  # another replica deletes it once it has not changed for a while
            log.warning("shard leases: could not delete %s: %s", self.member.name, error)

    async def round(self) -> None:
        listed = await read_json(
            self._api.list_namespaced_lease(self.namespace, _preload_content=False),
            f"list leases in {self.namespace}",
        )
        leases = {str(item["metadata"]["name"]): item for item in listed.get("items") or ()}
        self.warming = not self._ready()
        self.member.annotations = {WARMING_ANNOTATION: "true"} if self.warming else {}
        await self.member.step(leases.get(self.member.name))  # with the annotation: no extra write
        warm, self.warming_others = self._live_others(leases)
        self.live = 1 + warm
        await self._forget_gone_members(leases)
        for shard, elector in enumerate(self.electors):
            lease = leases.get(elector.name)
            mine = lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity
            if mine:
                if await self._quietly(elector.step(lease), elector.name):
                    # Renewed in time after a lapse (cut off, but nobody took it): acting again, from its object.
                    self._set_acting(shard, True)
            else:
                elector.observe(lease)  # keeps the clock of other holders' records going
        owned = sorted(self.owned(), key=self._order.index)
        if len(owned) > self.share:
            await self._release_extras(owned[self.share :])
        else:
            await self._acquire(leases, self._room(len(owned)))
        self.rounds += 1

    def _room(self, held: int) -> int:
        """How many more shards to take at this round, holding ``held`` (not above its share)."""
        if not self.warming:
            return self.share - held
        if self.live > 1:  # a live warm replica takes what is free: none of it for a warming one
            return 0
        return math.ceil(self.shards / (1 + self.warming_others)) - held  # nobody else is warm

    async def _acquire(self, leases: dict[str, Any], wanted: int) -> None:
        for shard in self._order:
            if wanted <= 0:
                return
            elector = self.electors[shard]
            if elector.is_leader:
                continue
            lease = leases.get(elector.name)
            if elector.observe(lease) and await self._quietly(elector.step(lease), elector.name):
                log.info("shard %d of %d: acquired (lease %s)", shard, self.shards, elector.name)
                self._set_acting(shard, True)  # at once: a restore must precede this shard's first fit
                wanted -= 1

    async def _release_extras(self, extras: list[int]) -> None:
        for shard in extras:
            self._set_acting(shard, False)  # stop acting first, then hand it back
            elector = self.electors[shard]
            log.info("shard %d of %d: released (share %d of %d live replicas)", shard, self.shards,
                     self.share, self.live)  # fmt: skip
            await self._quietly(elector.release(), elector.name)

    async def _quietly(self, write: Awaitable[object], name: str) -> bool:
        """One Lease's write: its failure is that Lease's (logged), the round goes on with the others."""
        try:
            return bool(await write)
        except KubeError as error:
            self.last_error = f"{name}: {error}"
            log.warning("shard leases: %s: %s", name, error)
            return False

    def _live_others(self, leases: dict[str, Any]) -> tuple[int, int]:
        """The live members other than itself: (warm, warming)."""
        now = asyncio.get_running_loop().time()
        prefix, seen = f"{self.prefix}-member-", {}
        for name, lease in leases.items():
            if not name.startswith(prefix) or name == self.member.name:
                continue
            spec = lease.get("spec") or {}
            record = (spec.get("holderIdentity"), spec.get("renewTime"))
            known = self._members.get(name)
            seen[name] = known if known is not None and known[0] == record else (record, now)
        self._members = seen
        duration = self.timing.lease_duration_s
        live = [name for name, ((holder, _), first_seen) in seen.items() if holder and now - first_seen < duration]
        warming = sum(1 for name in live if _is_warming(leases[name]))
        return len(live) - warming, warming

    async def _forget_gone_members(self, leases: dict[str, Any]) -> None:
        """Delete the membership Leases seen unchanged for ``forget_members_after_s`` (their pods are
        gone), each on the condition that it is still the version read: one renewed meanwhile, or
        deleted by another replica first, is a 409 Conflict or a 404 and stays as it is. A failed
        delete is tried again only after another ``forget_members_after_s`` (a Role without delete
        must not make a warning every round)."""
        now = asyncio.get_running_loop().time()
        for name, (record, first_seen) in list(self._members.items()):
            version = (leases[name].get("metadata") or {}).get("resourceVersion")
            if now - first_seen < self.forget_members_after_s or version is None:
                continue
            try:
                await self._delete(name, str(version))
            except KubeError as error:
                log.info("shard leases: %s not deleted: %s", name, error)
                self._members[name] = (record, now)
                continue
            log.info("shard leases: deleted %s, unchanged for %.0f s", name, now - first_seen)
            del self._members[name]

    async def _delete(self, name: str, resource_version: str) -> None:
        options = V1DeleteOptions(preconditions=V1Preconditions(resource_version=resource_version))
        await read_json(
            self._api.delete_namespaced_lease(name, self.namespace, body=options, _preload_content=False),
            f"delete lease {self.namespace}/{name}",
        )

    def _tell(self) -> None:
        """Report shards lost by time (renewals failing past the renew deadline)."""
        for shard in sorted(self._acting - self.owned()):
            log.warning("shard %d of %d: lost (not renewed within the renew deadline)", shard, self.shards)
            self._set_acting(shard, False)

    def _set_acting(self, shard: int, acting: bool) -> None:
        if acting == (shard in self._acting):
            return
        (self._acting.add if acting else self._acting.discard)(shard)
        self.on_change(shard, acting)


def _is_warming(lease: dict[str, Any]) -> bool:
    return ((lease.get("metadata") or {}).get("annotations") or {}).get(WARMING_ANNOTATION) == "true"
