"""How the fake API (``tests/fakekube.py``) changes stored objects: updates, patches, server-side
apply, the status subresource and discovery documents, as kube-apiserver does them.

- PUT replaces an object; a ``metadata.resourceVersion`` that is not the stored one is 409
  ``Conflict`` (custom resources must send one: 422 otherwise, as the real server answers).
- PATCH: ``application/merge-patch+json`` (RFC 7386), ``application/json-patch+json`` (RFC 6902:
  add, remove, replace, test), ``application/strategic-merge-patch+json`` (built-in kinds only,
  applied as a merge patch: lists are replaced, enough for the objects the service writes; custom
  resources answer 415 as kube-apiserver does) and ``application/apply-patch+yaml`` (server-side
  apply: ``fieldManager`` required, creates an absent object, merges the applied configuration into
  a present one and records the manager in ``metadata.managedFields``; field ownership conflicts
  between managers are not modelled).
- With a status subresource (``ResourceType.status_subresource``), writes to the object keep the
  stored ``status`` and writes to ``/status`` keep everything but ``status``; ``metadata.generation``
  counts spec changes of custom resources.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)


class PatchError(Exception):
    """A patch the API server refuses: ``code`` (400, 409, 415, 422) and the message it sends."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def apply_merge(live: Any, applied: Any) -> Any:
    """Server-side apply's merge of an applied configuration (no ``null`` deletion semantics)."""
    if not isinstance(applied, Mapping) or not isinstance(live, Mapping):
        return copy.deepcopy(applied)
    merged = dict(live)
    for key, value in applied.items():
        merged[key] = apply_merge(live.get(key), value)
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(422, f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str], path: str) -> Any:
    node = document
    for part in parts[:-1]:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise PatchError(
                422, f"the server rejected our request due to an error in our request: path {path} not found"
            )
    return node


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902 ``add``, ``remove``, ``replace`` and ``test`` (a failed test is 422, as the API server says)."""
    if not isinstance(operations, list):
        raise PatchError(400, "json patch must be a list of operations")
    result = copy.deepcopy(document)
    for operation in operations:
        op, path = operation.get("op"), str(operation.get("path", ""))
        parts = _pointer(path)
        if not parts:
            raise PatchError(422, "json patch on the whole document is not supported")
        parent, last = _parent(result, parts, path), parts[-1]
        if op == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != operation.get("value"):
                raise PatchError(
                    422, f"the server rejected our request due to an error in our request: testing value {path} failed"
                )
        elif op == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            elif last in parent:
                del parent[last]
            else:
                raise PatchError(
                    422, f"the server rejected our request due to an error in our request: path {path} not found"
                )
        elif op in ("add", "replace"):
            value = copy.deepcopy(operation.get("value"))
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op == "add":
                    parent.insert(index, value)
                else:
                    parent[index] = value
            else:
                parent[last] = value
        else:
            raise PatchError(422, f"unsupported json patch operation {op!r}")
    return result


def kept_apart(stored: Mapping[str, Any] | None, written: dict[str, Any], *, to_status: bool) -> dict[str, Any]:
    """What a write with a status subresource stores: a write to the object keeps the stored status,
    a write to ``/status`` keeps everything of the stored object but the status."""
    if stored is None:
        written.pop("status", None)
        return written
    if to_status:
        kept = copy.deepcopy(dict(stored))
        if "status" in written:
            kept["status"] = written["status"]
        else:
            kept.pop("status", None)
        kept["metadata"]["resourceVersion"] = written.get("metadata", {}).get("resourceVersion")
        return kept
    if "status" in stored:
        written["status"] = copy.deepcopy(stored["status"])
    else:
        written.pop("status", None)
    return written


def spec_changed(stored: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether anything but metadata and status changed (what bumps a custom resource's generation)."""

    def body(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

    return body(stored) != body(written)


STALE_WRITE = "the object has been modified; please apply your changes to the latest version and try again"


def conflict_message(plural: str, group: str, name: str, reason: str = STALE_WRITE) -> str:
    """apierrors.NewConflict's message: a stale write's, or a failed precondition's."""
    resource = f"{plural}.{group}" if group else plural
    return f'Operation cannot be fulfilled on {resource} "{name}": {reason}'


def discovery_resources(resource_types: list[Any]) -> list[dict[str, Any]]:
    """APIResourceList ``resources`` entries for ``ResourceType``s of one group version."""
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    entries: list[dict[str, Any]] = []
    for rt in resource_types:
        entries.append(
            {"name": rt.plural, "singularName": rt.kind.lower(), "namespaced": rt.namespaced, "kind": rt.kind,
             "verbs": verbs}
        )  # fmt: skip
        if rt.status_subresource:
            entries.append(
                {"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced, "kind": rt.kind,
                 "verbs": ["get", "patch", "update"]}
            )  # fmt: skip
    return entries
