"""The history memory a worker's sessions hold together, per client address and in all.

Each session's conversation is capped on its own (``max_history_bytes``: its oldest items are forgotten), but
the caps multiply: an address may open many sessions, and a worker serves many addresses. So every session's
history is also counted here, against its client address's budget and the worker's; a client item that would
pass either is refused with a ``history_budget_exceeded`` error, and the session keeps what it had. The
server's own items (transcripts, replies: short, paced by the engines) are counted but never refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class HistoryLedger:
    """One worker's history bytes, in all and per client address."""

    per_client: int
    per_worker: int
    total: int = 0
    by_address: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    """Client items refused for a budget (for tests and the abuse bench)."""

    def account(self, address: str) -> ClientHistoryAccount:
        """The account one session of ``address`` charges its history to."""
        return ClientHistoryAccount(self, address)

    def charge(self, address: str, size: int, *, refusable: bool) -> str | None:
        """Count ``size`` bytes for ``address``; a refusable charge over a budget is not counted and says why."""
        if refusable and self.by_address[address] + size > self.per_client:
            self.refused += 1
            return f"this client's sessions already hold {self.by_address[address]} bytes of history on this " \
                   f"worker (at most {self.per_client})"
        if refusable and self.total + size > self.per_worker:
            self.refused += 1
            return f"this server's sessions already hold {self.total} bytes of history (at most {self.per_worker} " \
                   "per worker)"
        self.total += size
        self.by_address[address] += size
        return None

    def refund(self, address: str, size: int) -> None:
        """``size`` bytes of ``address`` were let go."""
        self.total = max(0, self.total - size)
        self.by_address[address] -= size
        if self.by_address[address] <= 0:
            del self.by_address[address]


@dataclass
class ClientHistoryAccount:
    """A session's view of the ledger: charges go to its client address (``HistoryAccount`` of the history)."""

    ledger: HistoryLedger
    address: str

    def charge(self, size: int, *, refusable: bool) -> str | None:
        """Count ``size`` more bytes of this session's history."""
        return self.ledger.charge(self.address, size, refusable=refusable)

    def refund(self, size: int) -> None:
        """This session let ``size`` bytes go."""
        self.ledger.refund(self.address, size)
