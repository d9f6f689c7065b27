"""Fair shares of a shared engine: each session's work waits in its own queue, served in turn.

The server marks every task of a session with :data:`current_owner` (a context variable, so the
tasks a session starts inherit it); a shared worker reads it when work is submitted and serves the
owners round-robin. One session flooding an engine then only lengthens its own queue: another
session's job waits for at most one job of each other session, not for the whole flood.

Work that a paused reply waits on (the words of a segment heard over it, which may be "stop") is
submitted in an :func:`urgent_task`: :data:`current_urgent` is set in that task's context, and an engine
that keeps a separate lane for it serves it before everything else (the recogniser does).

An engine whose queue is bounded (the recogniser, a worker process, the shared engines' hub) refuses work
past its bound at once with an :class:`EngineBusy` (backpressure); the fair queues here hold what they are
given. That fails the caller's call but says nothing of the engine's health,
so the stage's health does not count it (:func:`refused`; :mod:`bargein.engines.health`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

current_owner: contextvars.ContextVar[Hashable | None] = contextvars.ContextVar("bargein_owner", default=None)
"""The session on whose behalf engine work is submitted (None: work of no session, e.g. warm-up)."""


current_urgent: contextvars.ContextVar[bool] = contextvars.ContextVar("bargein_urgent", default=False)
"""Whether the work being submitted is waited on by a paused reply (served before other work)."""


class EngineBusy(RuntimeError):
    """A shared engine refused work because a queue is full (for everyone, or for this session): load, not a
    fault. The call fails for its caller; the stage's health counts it as a refusal, never as a failure."""


REFUSALS = frozenset({"EngineBusy", "WorkerBusy", "RecognizerBusy", "TurnModelBusy", "BackPressureError"})
"""The names of the refusal types. A name is what crosses a process boundary (a worker reports an engine's
error as ``"TypeName: message"``), and a type defined where :class:`EngineBusy` is not imported is known by
it, as is Ray Serve's ``BackPressureError`` (a deployment's queue is full): a new refusal type derives from
:class:`EngineBusy`, or is named here. Ray re-raises a replica's exception as a type derived from it, so a
refusal on a replica is still known by its name in the type's ancestry."""


def refused(error: BaseException) -> bool:
    """Whether ``error`` is a refusal for load (:class:`EngineBusy`, or a type named in :data:`REFUSALS`)."""
    return isinstance(error, EngineBusy) or any(kind.__name__ in REFUSALS for kind in type(error).__mro__)


def refusal_text(message: str) -> bool:
    """Whether an error that crossed a process boundary as ``"TypeName: message"`` is a refusal for load."""
    return message.partition(":")[0].strip() in REFUSALS


def owner() -> Hashable | None:
    """The owner of the work being submitted now."""
    return current_owner.get()


_OWNER_KEYS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_NEXT_OWNER_KEY = itertools.count(1)


def owner_key(session: Hashable | None) -> Hashable | None:
    """A number standing for ``session`` for its whole life, and never one an ended session had. What an
    engine keeps past a request (an LLM's KV snapshots, a worker's session table) is kept under it: ``id()``
    would be reused by a later session, which would then be served the ended one's conversation, and keeping
    the session object itself would hold an ended session's memory until the entry is evicted. A session
    that cannot be weakly referenced keeps ``id()``; a key already is kept: a worker process is sent the key,
    and behind a shared engine's hub the tuple ``(hub client, key)``, rebuilt for every request (its ``id()``
    would change each time, and come back for another session)."""
    if session is None or isinstance(session, int | tuple):
        return session
    try:
        key = _OWNER_KEYS.get(session)
        if key is None:
            key = _OWNER_KEYS[session] = next(_NEXT_OWNER_KEY)
        return key
    except TypeError:
        return id(session)


def owner_now() -> Hashable | None:
    """:func:`owner_key` of the work being submitted now."""
    return owner_key(current_owner.get())


def urgent() -> bool:
    """Whether the work being submitted now is urgent (see :func:`urgent_task`)."""
    return current_urgent.get()


def urgent_task(work: Coroutine[Any, Any, T], *, urgent: bool = True) -> asyncio.Task[T]:
    """Run ``work`` as a task whose engine calls are marked urgent (or not), in the caller's context otherwise
    (the owner is kept)."""
    context = contextvars.copy_context()
    context.run(current_urgent.set, urgent)
    return asyncio.create_task(work, context=context)


class FairQueue(Generic[T]):
    """Items queued per owner; :meth:`pop` takes the oldest item of the next owner in turn. Not thread-safe."""

    def __init__(self) -> None:
        self._queues: dict[Hashable | None, deque[T]] = {}
        self._turns: deque[Hashable | None] = deque()
        self._size = 0

    def put(self, owner: Hashable | None, item: T) -> None:
        """Queue ``item`` behind ``owner``'s other items."""
        self._queue_of(owner).append(item)
        self._size += 1

    def put_front(self, owner: Hashable | None, item: T) -> None:
        """Queue ``item`` before ``owner``'s other items (work that was started and goes on later)."""
        self._queue_of(owner).appendleft(item)
        self._size += 1

    def pop(self) -> tuple[Hashable | None, T]:
        """The next owner's oldest item; that owner goes to the back of the turns. IndexError if empty."""
        owner = self._turns.popleft()
        queue = self._queues[owner]
        item = queue.popleft()
        self._size -= 1
        if queue:
            self._turns.append(owner)
        else:
            del self._queues[owner]
        return owner, item

    def take(self, owner: Hashable | None) -> list[T]:
        """Remove and return ``owner``'s items, oldest first."""
        queue = self._queues.pop(owner, None)
        if not queue:
            return []
        self._turns.remove(owner)
        self._size -= len(queue)
        return list(queue)

    def waiting(self, owner: Hashable | None) -> int:
        """Items ``owner`` has queued."""
        queue = self._queues.get(owner)
        return len(queue) if queue else 0

    def drain(self) -> list[T]:
        """Remove and return every item."""
        items = [item for queue in self._queues.values() for item in queue]
        self._queues.clear()
        self._turns.clear()
        self._size = 0
        return items

    def __len__(self) -> int:
        return self._size

    def _queue_of(self, owner: Hashable | None) -> deque[T]:
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = deque()
            self._turns.append(owner)
        return queue


_Call = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class FairExecutor:
    """A thread pool whose queue is a :class:`FairQueue` keyed by the submitting session."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: FairQueue[_Call] = FairQueue()
        self._wake = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Run ``fn(*args)`` on a worker, in the current owner's turn."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._wake:
            if self._closed:
                raise RuntimeError("the executor is shut down")
            self._queue.put(owner(), (future, fn, args))
            self._wake.notify()
        return future

    @property
    def waiting(self) -> int:
        """Calls queued and not started."""
        return len(self._queue)

    def shutdown(self) -> None:
        """Cancel what waits; the calls running finish on their own."""
        with self._wake:
            self._closed = True
            dropped = self._queue.drain()
            self._wake.notify_all()
        for future, _, _ in dropped:
            future.cancel()

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not len(self._queue):
                    self._wake.wait()
                if self._closed:
                    return
                _, (future, fn, args) = self._queue.pop()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # handed to the waiting caller, the worker lives on
                future.set_exception(error)
