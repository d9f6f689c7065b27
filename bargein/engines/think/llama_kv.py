"""Host-memory snapshots of a llama.cpp KV cache, found again by the tokens they hold.

One :class:`llama_cpp.Llama` context holds one conversation's KV cache at a time. When another
session's turn needs the context, the outgoing conversation's cache (sequence 0 only, a few MB, not
the whole context state) is copied out; when that session speaks again, the snapshot whose tokens
share the longest prefix with its new prompt is copied back and only the new tokens are evaluated; a
conversation's later snapshot makes its earlier ones redundant.

Each snapshot belongs to the session whose conversation it holds (its owner, :func:`bargein.engines.fair.owner`).
A session reuses its own snapshots whole, and another session's only up to the end of its own prompt's
public prefix, the part no user wrote (the instructions and the tool descriptions:
:meth:`~bargein.engines.think.llama_context.LlamaPrompt.fit_public`), so a session's first-token time says
nothing about how another conversation began. Each session holds at most ``owner_share_bytes`` of the
budget (past it, its own oldest snapshots go), and over the whole budget the largest holder's oldest
snapshot goes first, so one session cannot push the others' snapshots out.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.memory_upkeep import trim_native_heap

Tokens = npt.NDArray[np.intc]


def common_prefix(a: Tokens, b: Tokens) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


@dataclass(frozen=True)
class KvSnapshot:
    """The KV cache of a sequence after evaluating ``tokens``, for the session ``owner``."""

    tokens: Tokens
    data: bytes
    owner: Hashable | None = None


class KvSnapshots:
    """Snapshots under a byte budget and a per-session share, looked up by longest token prefix (see the
    module docstring); least recently used first out."""

    def __init__(self, max_bytes: int, owner_share_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.owner_share_bytes = owner_share_bytes if owner_share_bytes is not None else max_bytes
        """The most one session's snapshots may hold (the whole budget unless told)."""
        self._entries: OrderedDict[int, KvSnapshot] = OrderedDict()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held by all snapshots."""
        return sum(len(entry.data) for entry in self._entries.values())

    def held_by(self, owner: Hashable | None) -> int:
        """Bytes held by ``owner``'s snapshots."""
        return sum(len(entry.data) for entry in self._entries.values() if entry.owner == owner)

    def best(self, tokens: Tokens, owner: Hashable | None = None,
             public: int | None = None) -> tuple[KvSnapshot | None, int]:
        """The snapshot sharing the most usable prefix with ``tokens`` and that length (0 and None if none).

        ``owner``'s own snapshots count whole; another session's at most ``public`` tokens (the end of the
        prompt's public prefix; None: no limit, for callers that serve one party only).
        """
        best_key, best_len = -1, 0
        for key, entry in self._entries.items():
            shared = common_prefix(entry.tokens, tokens)
            if entry.owner != owner and public is not None:
                shared = min(shared, public)
            if shared > best_len:
                best_key, best_len = key, shared
        if best_key < 0:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key], best_len

    def add(self, snapshot: KvSnapshot) -> None:
        """Keep ``snapshot``, dropping its owner's ones it extends, its owner's oldest beyond the share, and
        the largest holder's oldest beyond the budget."""
        if len(snapshot.data) > min(self.max_bytes, self.owner_share_bytes):
            return
        n = snapshot.tokens.shape[0]
        held = len(self._entries)
        for key in [k for k, e in self._entries.items() if e.owner == snapshot.owner and e.tokens.shape[0] <= n
                    and common_prefix(e.tokens, snapshot.tokens) == e.tokens.shape[0]]:
            del self._entries[key]
        self._entries[self._next_key] = snapshot
        self._next_key += 1
        while self.held_by(snapshot.owner) > self.owner_share_bytes:
            self._drop_oldest_of(snapshot.owner)
        while self.nbytes > self.max_bytes:
            holders: dict[Hashable | None, int] = {}
            for entry in self._entries.values():
                holders[entry.owner] = holders.get(entry.owner, 0) + len(entry.data)
            self._drop_oldest_of(max(holders, key=lambda holder: holders[holder]))
        if len(self._entries) <= held:
            # a dropped snapshot's megabytes stay mapped in malloc's heap, pinned by the snapshots allocated
            # after it: without this the process holds up to twice the budget (measured); with it, the budget
            trim_native_heap()

    def _drop_oldest_of(self, owner: Hashable | None) -> None:
        key = next(k for k, e in self._entries.items() if e.owner == owner)
        del self._entries[key]

    def clear(self) -> None:
        """Forget every snapshot."""
        self._entries.clear()


def save_sequence(llama_cpp_module: Any, ctx: Any, tokens: Tokens, seq_id: int = 0,
                  owner: Hashable | None = None) -> KvSnapshot:
    """Copy sequence ``seq_id``'s KV cache out of a llama.cpp context (the conversation of ``owner``)."""
    size = int(llama_cpp_module.llama_state_seq_get_size(ctx, seq_id))
    buffer = (ctypes.c_uint8 * size)()
    written = int(llama_cpp_module.llama_state_seq_get_data(ctx, buffer, size, seq_id))
    if written == 0 or written > size:
        raise RuntimeError(f"llama.cpp could not copy the KV cache of sequence {seq_id}")
    return KvSnapshot(tokens=tokens.copy(), data=bytes(buffer)[:written], owner=owner)


def restore_sequence(llama_cpp_module: Any, ctx: Any, snapshot: KvSnapshot, seq_id: int = 0) -> None:
    """Copy a snapshot back into sequence ``seq_id`` (llama.cpp clears that sequence first)."""
    buffer = (ctypes.c_uint8 * len(snapshot.data)).from_buffer_copy(snapshot.data)
    if int(llama_cpp_module.llama_state_seq_set_data(ctx, buffer, len(snapshot.data), seq_id)) == 0:
        raise RuntimeError("llama.cpp refused a KV cache snapshot")
