"""The memory store's protocol, its records and bounds, and how a scope is named.

A *scope* is whose memories these are, decided by the server owner, never by the client: a server key's own
scope (a digest of the key, never the key), the ``memory_scope`` a backend bound into a client secret, or
the one local scope of local-only mode. Every store call names its scope and touches nothing outside it.
A memory has a *topic* (``name``, ``allergy``, ``note:...``): remembering a topic again replaces the old
fact, so a corrected fact is never returned beside the one it corrects.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

LOCAL_SCOPE = "local"
"""The scope of local-only mode (no API keys: the one user on this machine)."""
MAX_SCOPE_CHARS = 128
MAX_FACT_CHARS = 500
MAX_TOPIC_CHARS = 80
DEFAULT_MAX_ITEMS = 2000
DEFAULT_MAX_BYTES = 512 * 1024
_SCOPE = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Memory:
    """One remembered fact: its id, topic, text and when it was last written (epoch seconds)."""

    id: int
    topic: str
    text: str
    updated_at: float


@dataclass(frozen=True)
class Bounds:
    """Per-scope limits: past either, the oldest memories are forgotten first."""

    max_items: int = DEFAULT_MAX_ITEMS
    max_bytes: int = DEFAULT_MAX_BYTES


class MemoryStoreError(RuntimeError):
    """The store could not answer (busy past its timeout, unreachable); the session goes on without memory."""


class MemoryStore(Protocol):
    """Where a server keeps its scopes' memories. Every method is a coroutine that never blocks the loop, and a
    write returns only once it is committed (durable)."""

    async def remember(self, scope: str, topic: str, text: str) -> Memory:
        """Keep ``text`` under ``topic``, replacing what the topic held; the scope's bounds then apply."""

    async def forget(self, scope: str, *, memory_id: int | None = None, topic: str | None = None,
                     matching: str | None = None) -> int:
        """Forget by id, by topic, or every memory whose text matches ``matching``; how many went."""

    async def recall(self, scope: str, query: str, limit: int, newest: int | None = None) -> list[Memory]:
        """The ``limit`` memories most relevant to ``query`` (full-text rank), topped up with at most ``newest``
        of the newest (None: up to ``limit``)."""

    async def entries(self, scope: str, limit: int = DEFAULT_MAX_ITEMS) -> list[Memory]:
        """The scope's memories, newest first."""

    async def present(self, scope: str, ids: Sequence[int]) -> list[Memory]:
        """The scope's memories among ``ids`` as they are now (a forgotten one is missing, a corrected one has a
        later ``updated_at``)."""

    async def clear(self, scope: str) -> int:
        """Forget all of the scope's memories; how many went."""

    async def close(self) -> None:
        """Release connections."""


def key_scope(api_key: str) -> str:
    """The scope of a server key: a digest of it (the key itself is never stored)."""
    return "key:" + hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def bound_scope(name: str) -> str:
    """The scope a backend bound into a client secret, checked (a separate namespace from keys' scopes)."""
    if not _SCOPE.fullmatch(name):
        raise ValueError("memory_scope must be 1 to 128 characters of letters, digits and . _ : @ -")
    return "bound:" + name


_STOP_WORDS = frozenset(_WORD.findall(
    "the a an and or but of to in on at for with from by about as is are was were be been am do does did have has "
    "had it its this that these those there here what which who whom whose when where why how can could would "
    "should will shall may might must not no yes so if then than too very just also me my mine you your i we our us "
    "they them their he she him her his hers all any some"))


def search_terms(text: str, max_terms: int = 24) -> list[str]:
    """The content words of ``text`` as plain search terms (lower case, no stop words, no operators, at most
    ``max_terms``): "the" must not make every memory a match."""
    words = [w.lower() for w in _WORD.findall(text) if len(w) > 1 and w.lower() not in _STOP_WORDS]
    return list(dict.fromkeys(words))[:max_terms]


COMMON_SHARE = 0.05
COMMON_FLOOR = 24
"""A word held by more than ``max(COMMON_FLOOR, COMMON_SHARE * memories)`` of a scope's memories ranks nothing."""


def telling_terms(terms: list[str], holding: list[int], memories: int) -> list[str]:
    """The ``terms`` that say which memory is meant: a word that many of the scope's ``memories`` hold
    (``holding[i]`` hold ``terms[i]``) is common there, and matching on it would recall one of many at random
    (a relevance floor: 1,000 notes that each mention one of a dozen subjects add nothing to a question about
    one of them). A small scope keeps every word."""
    most = max(COMMON_FLOOR, int(COMMON_SHARE * memories))
    return [term for term, count in zip(terms, holding, strict=True) if count <= most]


def clean_fact(topic: str, text: str) -> tuple[str, str]:
    """``topic`` and ``text`` trimmed to their bounds, whitespace folded; a ValueError when the text is empty."""
    fact = " ".join(text.split())[:MAX_FACT_CHARS]
    if not fact:
        raise ValueError("there is nothing to remember")
    return (" ".join(topic.split())[:MAX_TOPIC_CHARS] or "note").lower(), fact
