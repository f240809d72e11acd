"""Kubernetes label selectors: the grammar of ``labels.Parse`` in k8s.io/apimachinery.

Supported: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``,
``a<1``, comma-joined. An empty selector matches everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from cachetools import LRUCache

from autoscaler.echoes import echo

# A SelectorCache's bound, in characters of the selectors it holds (a parsed selector takes a few
# times its text in memory): thousands of ordinary selectors, a few MiB whatever callers send.
SELECTOR_CACHE_CHARACTERS = 512 * 1024
SELECTOR_OVERHEAD_CHARACTERS = 256
# Kubernetes limits: a selector is bounded by the URL anyway, but refuse absurd inputs early.
MAX_SELECTOR_LENGTH = 16_384

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_NAME_RE = re.compile(rf"^{_NAME}$")
_PREFIX_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
# Go's strconv.ParseInt(s, 10, 64), which labels.Parse and the matcher use: ASCII digits, no "1_000".
_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_RANGE = range(-(2**63), 2**63)


def parse_int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it, else ``None`` (Python's ``int`` would
    take "1_000", " 5" and other scripts' digits)."""
    if len(text) > 20 or not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64_RANGE else None


class SelectorError(ValueError):
    """A label selector that does not parse; the message says where and why."""


class Operator(Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = ">"
    LESS_THAN = "<"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        if self.operator in (Operator.EQUALS, Operator.IN):
            return present and labels[self.key] in self.values
        if self.operator in (Operator.NOT_EQUALS, Operator.NOT_IN):
            return not present or labels[self.key] not in self.values
        # > and < compare integers; a label that is not an integer never matches (as in Kubernetes).
        if not present:
            return False
        actual, bound = parse_int64(labels[self.key]), parse_int64(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if self.operator is Operator.GREATER_THAN else actual < bound


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


EVERYTHING = Selector()

_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<op>==|!=|=|!|\(|\)|,|>|<)
  | (?P<word>[^\s=!(),<>]+)
    """,
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    position = 0
    while position < len(text):
        match = _TOKEN_RE.match(text, position)
        if match is None:  # pragma: no cover - every character falls in one class
            raise SelectorError(f"unexpected character {text[position]!r} at position {position}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group(), position))
        position = match.end()
    return tokens


def validate_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX_RE.match(prefix)):
        raise SelectorError(f"invalid label key {echo(key)!r}: prefix must be a DNS subdomain")
    if len(name) > 63 or not _NAME_RE.match(name):
        raise SelectorError(
            f"invalid label key {echo(key)!r}: name must be 63 characters or less, alphanumeric, '-', '_' or '.',"
            " starting and ending with an alphanumeric character"
        )


def validate_value(value: str) -> None:
    if value == "":
        return
    if len(value) > 63 or not _NAME_RE.match(value):
        raise SelectorError(
            f"invalid label value {echo(value)!r}: must be 63 characters or less, alphanumeric, '-', '_' or '.',"
            " starting and ending with an alphanumeric character"
        )


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self) -> tuple[str, str, int] | None:
        token = self.peek()
        if token is not None:
            self.index += 1
        return token

    def expect_op(self, op: str) -> None:
        token = self.take()
        if token is None or token[0] != "op" or token[1] != op:
            where = f"at position {token[2]}" if token else "at end of selector"
            raise SelectorError(f"expected {op!r} {where} in {echo(self.text)!r}")

    def parse(self) -> Selector:
        requirements: list[Requirement] = []
        if not self.tokens:
            return EVERYTHING
        while True:
            requirements.append(self.requirement())
            token = self.take()
            if token is None:
                break
            if token[1] != ",":
                raise SelectorError(f"expected ',' at position {token[2]} in {echo(self.text)!r}")
            if self.peek() is None:
                raise SelectorError(f"trailing ',' in {echo(self.text)!r}")
        return Selector(tuple(requirements))

    def requirement(self) -> Requirement:
        token = self.take()
        if token is None:
            raise SelectorError(f"expected a requirement at end of {echo(self.text)!r}")
        if token == ("op", "!", token[2]):
            key_token = self.take()
            if key_token is None or key_token[0] != "word":
                raise SelectorError(f"expected a label key after '!' at position {token[2]}")
            validate_key(key_token[1])
            return Requirement(key_token[1], Operator.DOES_NOT_EXIST)
        if token[0] != "word":
            raise SelectorError(f"expected a label key at position {token[2]}, found {echo(token[1])!r}")
        key = token[1]
        validate_key(key)
        operator_token = self.peek()
        if operator_token is None or operator_token[1] == ",":
            return Requirement(key, Operator.EXISTS)
        self.take()
        kind, text, position = operator_token
        if kind == "word" and text in ("in", "notin"):
            values = self.value_set(position)
            return Requirement(key, Operator.IN if text == "in" else Operator.NOT_IN, values)
        if kind == "op" and text in ("=", "==", "!="):
            value = self.single_value(allow_empty=True)
            validate_value(value)
            return Requirement(key, Operator.NOT_EQUALS if text == "!=" else Operator.EQUALS, (value,))
        if kind == "op" and text in (">", "<"):
            value = self.single_value(allow_empty=False)
            if parse_int64(value) is None:
                raise SelectorError(f"for '{text}' the value must be an integer, got {echo(value)!r}")
            return Requirement(key, Operator.GREATER_THAN if text == ">" else Operator.LESS_THAN, (value,))
        raise SelectorError(f"unknown operator {echo(text)!r} at position {position} in {echo(self.text)!r}")

    def single_value(self, *, allow_empty: bool) -> str:
        token = self.peek()
        if token is None or token[1] == ",":
            if allow_empty:
                return ""
            raise SelectorError(f"expected a value at end of {echo(self.text)!r}")
        if token[0] != "word":
            raise SelectorError(f"expected a value at position {token[2]}, found {echo(token[1])!r}")
        self.take()
        return token[1]

    def value_set(self, position: int) -> tuple[str, ...]:
        self.expect_op("(")
        values: list[str] = []
        while True:
            token = self.take()
            if token is None:
                raise SelectorError(f"unclosed '(' in {echo(self.text)!r}")
            if token[1] == ")":
                if not values:
                    raise SelectorError(f"for 'in', 'notin' operators, values set can't be empty (position {position})")
                break
            if token[1] == ",":
                # An empty element, as in "a in (x,,y)" or "a in (,x)", is an empty value in Kubernetes.
                values.append("")
                continue
            if token[0] != "word":
                raise SelectorError(f"expected a value at position {token[2]}, found {echo(token[1])!r}")
            validate_value(token[1])
            values.append(token[1])
            following = self.take()
            if following is None:
                raise SelectorError(f"unclosed '(' in {echo(self.text)!r}")
            if following[1] == ")":
                break
            if following[1] != ",":
                raise SelectorError(f"expected ',' or ')' at position {following[2]} in {echo(self.text)!r}")
        return tuple(sorted(set(values)))


def parse_selector(text: str | None) -> Selector:
    """Parse a Kubernetes label selector; ``None`` or blank means every series."""
    if text is None or not text.strip():
        return EVERYTHING
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"label selector is {len(text)} characters long; the limit is {MAX_SELECTOR_LENGTH}")
    return _Parser(text).parse()


class _Parsed(NamedTuple):
    selector: Selector
    size: int  # the entry's weight: the characters of its text, plus an overhead


class SelectorCache:
    """:func:`parse_selector`, remembered: an HPA sends the same selector with every request, and
    parsing it costs as much as the rest of the answer. Bounded by the characters of the selectors
    held (``max_characters``, plus :data:`SELECTOR_OVERHEAD_CHARACTERS` each), least recently used
    first out; a selector that does not parse is never kept (it is refused again, as bounded work).
    Not thread-safe: one per event loop."""

    def __init__(self, max_characters: int = SELECTOR_CACHE_CHARACTERS) -> None:
        self._parsed: LRUCache[str, _Parsed] = LRUCache(maxsize=max_characters, getsizeof=lambda parsed: parsed.size)

    def parse(self, text: str | None) -> Selector:
        if text is None:
            return EVERYTHING
        cached = self._parsed.get(text)
        if cached is not None:
            return cached.selector
        selector = parse_selector(text)
        size = SELECTOR_OVERHEAD_CHARACTERS + len(text)
        if size <= self._parsed.maxsize:
            self._parsed[text] = _Parsed(selector, size)
        return selector

    @property
    def characters(self) -> int:
        """The weight held now."""
        return int(self._parsed.currsize)


def format_selector(selector: Selector) -> str:
    """The canonical text of a selector; parsing it gives the same selector back."""
    parts: list[str] = []
    for requirement in selector.requirements:
        key, op, values = requirement.key, requirement.operator, requirement.values
        if op is Operator.EXISTS:
            parts.append(key)
        elif op is Operator.DOES_NOT_EXIST:
            parts.append(f"!{key}")
        elif op in (Operator.IN, Operator.NOT_IN):
            parts.append(f"{key} {op.value} ({','.join(values)})")
        else:
            parts.append(f"{key}{op.value}{values[0]}")
    return ",".join(parts)
