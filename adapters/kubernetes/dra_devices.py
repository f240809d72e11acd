"""How many devices a DRA request with ``allocationMode: All`` takes on a node of a pool, from the
ResourceSlices the pool's nodes publish (``resource.k8s.io/v1``).

``All`` takes every device that matches the request's DeviceClass and its own selectors on the node
the scheduler picks. Before the claim is allocated that node is not known; what a new node of the
candidate NodePool would offer is estimated by the pool's current nodes: the most matching devices
any one of them publishes (nodes are the NodeClaims' ``status.nodeName`` under the pool's
``karpenter.sh/nodepool`` label; a slice belongs to its ``spec.nodeName``).

Selectors are CEL. Only what DeviceClasses and requests for GPUs use is evaluated: ``&&`` of
``device.driver == '<driver>'`` and ``device.attributes['<domain>'].<name> == <value>`` (a string,
int or bool). An attribute without a domain in the slice belongs to the slice's driver, as in the
scheduler. Anything else is refused with ValueError naming the expression, so it is reported rather
than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient, ResourceV1Api

from adapters.kubernetes.watch import WatchedResource
from adapters.types import KARPENTER_NODEPOOL_LABEL

Lookup = Mapping[str, Mapping[str, Any]]
_DRIVER = re.compile(r"device\.driver\s*==\s*(?P<value>'[^']*'|\"[^\"]*\")")
_ATTRIBUTE = re.compile(
    r"device\.attributes\[(?P<domain>'[^']+'|\"[^\"]+\")\]\.(?P<name>[A-Za-z][A-Za-z0-9_]*)"
    r"\s*==\s*(?P<value>'[^']*'|\"[^\"]*\"|-?[0-9]+|true|false)"
)


def resource_slice_resource(api: ApiClient) -> WatchedResource:
    return WatchedResource("resourceslices", ResourceV1Api(api).list_resource_slice)


def device_class_resource(api: ApiClient) -> WatchedResource:
    return WatchedResource("deviceclasses", ResourceV1Api(api).list_device_class)


@dataclass(frozen=True)
class Clause:
    """``device.driver == value`` (``attribute`` None) or ``device.attributes[domain].name == value``."""

    attribute: tuple[str, str] | None
    value: str | int | bool


def _literal(text: str) -> str | int | bool:
    if text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    return int(text)


def parse_expression(expression: str) -> list[Clause]:
    """The clauses of a conjunction of equalities; raises ValueError for any other CEL."""
    clauses = []
    for part in expression.split("&&"):
        text = part.strip().removeprefix("(").removesuffix(")").strip()
        driver = _DRIVER.fullmatch(text)
        attribute = _ATTRIBUTE.fullmatch(text)
        if driver is not None:
            clauses.append(Clause(None, _literal(driver["value"])))
        elif attribute is not None:
            domain = str(_literal(attribute["domain"]))
            clauses.append(Clause((domain, attribute["name"]), _literal(attribute["value"])))
        else:
            raise ValueError(
                f"CEL selector {expression!r}: only '&&' of device.driver and device.attributes equalities is read"
            )
    return clauses


def _attribute_value(device: Mapping[str, Any], driver: str, domain: str, name: str) -> str | int | bool | None:
    attributes = device.get("attributes") or {}
    found = attributes.get(f"{domain}/{name}")
    if found is None and domain == driver:
        found = attributes.get(name)
    if not isinstance(found, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in found:
            value: str | int | bool = found[kind]
            return value
    return None


def matches(driver: str, device: Mapping[str, Any], clauses: Sequence[Clause]) -> bool:
    for clause in clauses:
        if clause.attribute is None:
            if driver != clause.value:
                return False
        elif _attribute_value(device, driver, *clause.attribute) != clause.value:
            return False
    return True


def _selector_clauses(selectors: Sequence[Mapping[str, Any]]) -> list[Clause]:
    clauses: list[Clause] = []
    for selector in selectors:
        expression = (selector.get("cel") or {}).get("expression")
        if expression is None:
            raise ValueError(f"selector {dict(selector)} is not a CEL selector")
        clauses += parse_expression(str(expression))
    return clauses


@dataclass(frozen=True)
class DeviceInventory:
    """The ResourceSlices, DeviceClasses and NodeClaims the watches hold."""

    slices: Lookup
    device_classes: Lookup
    nodeclaims: Lookup

    def node_pools(self) -> dict[str, str]:
        """Each node a NodeClaim launched, and its NodeClaim's pool (``karpenter.sh/nodepool``)."""
        pools = {}
        for claim in self.nodeclaims.values():
            labels = (claim.get("metadata") or {}).get("labels") or {}
            node = (claim.get("status") or {}).get("nodeName")
            if labels.get(KARPENTER_NODEPOOL_LABEL) and node:
                pools[str(node)] = str(labels[KARPENTER_NODEPOOL_LABEL])
        return pools

    def pool_nodes(self, pool: str) -> set[str]:
        return {node for node, of in self.node_pools().items() if of == pool}

    def _current_slices(self) -> list[Mapping[str, Any]]:
        """Slices of each (driver, pool) at its newest ``spec.pool.generation``: older ones are on their
        way out, as the scheduler ignores them."""

        def key_and_generation(resource_slice: Mapping[str, Any]) -> tuple[tuple[str, str], int]:
            spec = resource_slice.get("spec") or {}
            pool = spec.get("pool") or {}
            return (str(spec.get("driver")), str(pool.get("name"))), int(pool.get("generation") or 0)

        newest: dict[tuple[str, str], int] = {}
        for resource_slice in self.slices.values():
            key, generation = key_and_generation(resource_slice)
            newest[key] = max(newest.get(key, generation), generation)
        return [s for s in self.slices.values() if key_and_generation(s)[1] == newest[key_and_generation(s)[0]]]

    def all_devices(self, device_class: str, selectors: Sequence[Mapping[str, Any]], pool: str | None) -> int:
        """Devices ``All`` would take on a node of ``pool``: the most any of its nodes publishes that
        match the class and the request's selectors. Raises ValueError saying why it cannot tell."""
        if pool is None:
            raise ValueError("allocationMode All: the pod fits no NodePool, so no node's devices tell")
        found = self.device_classes.get(device_class)
        if found is None:
            raise ValueError(f"allocationMode All: DeviceClass {device_class} not found")
        class_selectors = (found.get("spec") or {}).get("selectors") or []
        clauses = _selector_clauses(class_selectors) + _selector_clauses(selectors)
        per_node = self._matching(clauses, self.pool_nodes(pool))
        if not per_node:
            raise ValueError(f"allocationMode All: no node of NodePool {pool} publishes a ResourceSlice")
        return max(per_node.values())

    def class_devices(self, device_class: str) -> dict[str, int]:
        """Devices of ``device_class`` each node publishes; raises ValueError naming a DeviceClass that
        is not found or whose selectors are not read."""
        found = self.device_classes.get(device_class)
        if found is None:
            raise ValueError(f"DeviceClass {device_class} not found")
        return self._matching(_selector_clauses((found.get("spec") or {}).get("selectors") or []), None)

    def _matching(self, clauses: Sequence[Clause], nodes: set[str] | None) -> dict[str, int]:
        """Devices matching ``clauses`` per node (of ``nodes``; None: every node) in the current slices."""
        per_node: dict[str, int] = {}
        for resource_slice in self._current_slices():
            spec = resource_slice.get("spec") or {}
            node = spec.get("nodeName")
            if not node or (nodes is not None and node not in nodes):
                continue
            driver = str(spec.get("driver", ""))
            count = sum(1 for device in spec.get("devices") or [] if matches(driver, device, clauses))
            per_node[str(node)] = per_node.get(str(node), 0) + count
        return per_node
