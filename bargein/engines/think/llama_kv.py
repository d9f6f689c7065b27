"""Host-memory snapshots of a llama.cpp KV cache, found again by the tokens they hold.

One :class:`llama_cpp.Llama` context holds one conversation's KV cache at a time. When another
session's turn needs the context, the outgoing conversation's cache (sequence 0 only, a few MB, not
the whole context state) is copied out; when that session speaks again, the snapshot whose tokens
share the longest prefix with its new prompt is copied back and only the new tokens are evaluated.
Snapshots are content-addressed, so no session id is needed: every conversation starts with its own
words, and a conversation's later snapshot makes its earlier ones redundant.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
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
    """The KV cache of sequence 0 after evaluating ``tokens``."""

    tokens: Tokens
    data: bytes


class KvSnapshots:
    """Least-recently-used snapshots under a byte budget, looked up by longest token prefix."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, KvSnapshot] = OrderedDict()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held by all snapshots."""
        return sum(len(entry.data) for entry in self._entries.values())

    def best(self, tokens: Tokens) -> tuple[KvSnapshot | None, int]:
        """The snapshot sharing the longest prefix with ``tokens`` and that length (0 and None if none)."""
        best_key, best_len = -1, 0
        for key, entry in self._entries.items():
            shared = common_prefix(entry.tokens, tokens)
            if shared > best_len:
                best_key, best_len = key, shared
        if best_key < 0:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key], best_len

    def add(self, snapshot: KvSnapshot) -> None:
        """Keep ``snapshot``, dropping the ones it extends and the oldest beyond the byte budget."""
        if len(snapshot.data) > self.max_bytes:
            return
        n = snapshot.tokens.shape[0]
        held = len(self._entries)
        for key in [k for k, e in self._entries.items()
                    if e.tokens.shape[0] <= n and common_prefix(e.tokens, snapshot.tokens) == e.tokens.shape[0]]:
            del self._entries[key]
        self._entries[self._next_key] = snapshot
        self._next_key += 1
        while self.nbytes > self.max_bytes:
            self._entries.popitem(last=False)
        if len(self._entries) <= held:
            # a dropped snapshot's megabytes stay mapped in malloc's heap, pinned by the snapshots allocated
            # after it: without this the process holds up to twice the budget (measured); with it, the budget
            trim_native_heap()

    def clear(self) -> None:
        """Forget every snapshot."""
        self._entries.clear()


def save_sequence(llama_cpp_module: Any, ctx: Any, tokens: Tokens, seq_id: int = 0) -> KvSnapshot:
    """Copy sequence ``seq_id``'s KV cache out of a llama.cpp context."""
    size = int(llama_cpp_module.llama_state_seq_get_size(ctx, seq_id))
    buffer = (ctypes.c_uint8 * size)()
    written = int(llama_cpp_module.llama_state_seq_get_data(ctx, buffer, size, seq_id))
    if written == 0 or written > size:
        raise RuntimeError(f"llama.cpp could not copy the KV cache of sequence {seq_id}")
    return KvSnapshot(tokens=tokens.copy(), data=bytes(buffer)[:written])


def restore_sequence(llama_cpp_module: Any, ctx: Any, snapshot: KvSnapshot, seq_id: int = 0) -> None:
    """Copy a snapshot back into sequence ``seq_id`` (llama.cpp clears that sequence first)."""
    buffer = (ctypes.c_uint8 * len(snapshot.data)).from_buffer_copy(snapshot.data)
    if int(llama_cpp_module.llama_state_seq_set_data(ctx, buffer, len(snapshot.data), seq_id)) == 0:
        raise RuntimeError("llama.cpp refused a KV cache snapshot")
