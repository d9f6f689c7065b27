"""The scene reader's own bounded pool, with fair shares per session.

Each session has at most one frame waiting (a newer frame replaces it: a note of an old frame is worth nothing),
and the sessions waiting are served in turn, each keeping its place in the queue while its frame is replaced, so
a session streaming 30 fps gets no more reads than one sending a frame a second. The work runs on the pool's
own threads (one by default: OCR is a fraction of a core for a moment per frame), at a lower scheduling priority
than the rest of the server (:data:`SCENE_NICENESS`), never on the event loop and never in a reply's path; a reply
reads the newest note already made, with its age. And no read runs while any session's turn is between the
user's last word and the reply's first audio (:meth:`ScenePool.hold`, at most :data:`MAX_HOLD_S`): none starts,
and one already running is stopped (detectors that can stop: :meth:`~bargein.see.detectors.Detectors.stop`) and its
frame read again once the hold ends. On 2 cores a busy reader costs the model its second core just when a reply is
being written (the LLM's thread governor runs it on one core while another thread is runnable), and a niced thread
still takes a core the turn's engines leave idle for a moment, with the memory bandwidth they share.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bargein.metrics.cost_meter import Bill, bill_now, charge
from bargein.see.detectors import ReadStopped
from bargein.see.frames import Frame
from bargein.see.scene import SceneDetectors, SceneNote, read_scene

log = logging.getLogger(__name__)
Noted = Callable[[SceneNote], None]
MAX_DUTY = 0.5
"""Share of the time each reader thread reads (after a read it rests as long again): a crowd of cameras costs the
server at most half a core, and each session's notes come as often as the sessions streaming share allows."""
MAX_HOLD_S = 2.0
"""Longest a session's turn holds the scene reads (a turn whose reply never comes does not stop the notes)."""
SCENE_NICENESS = 10
"""How much lower than the server's other threads the scene reader's threads run (Linux nice, per thread): a
note is worth having, but never at the price of a spoken turn's LLM, recogniser or voice, which win the cores
whenever they want them; idle cores still read the scenes at full speed."""


def lower_priority(niceness: int = SCENE_NICENESS) -> None:
    """Lower the calling thread's scheduling priority by ``niceness`` (where the system lets a thread have its own:
    Linux; elsewhere nothing changes)."""
    if hasattr(os, "setpriority") and niceness > 0:
        try:
            native = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, native, os.getpriority(os.PRIO_PROCESS, native) + niceness)
        except OSError:  # not allowed here: the reads run at the server's priority
            log.debug("could not lower the scene reader's priority")


@dataclass
class _Waiting:
    frame: Frame
    previous: Frame | None
    noted: Noted
    bill: Bill | None = field(default_factory=bill_now)
    """The session's bill, taken in its context: the read's CPU is charged to the ``see`` stage on it."""
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    """The session's context, where ``noted`` runs: whatever it asks of the engines is the session's own, in its
    fair share and its KV cache, not an ownerless stranger's."""


class ScenePool:
    """Reads scene notes for every session of a server process, in turn, on ``workers`` threads."""

    def __init__(self, detectors: Callable[[], SceneDetectors], *, workers: int = 1,
                 niceness: int = SCENE_NICENESS, max_hold_s: float = MAX_HOLD_S, duty: float = MAX_DUTY) -> None:
        self._make_detectors = detectors
        self._detectors: list[SceneDetectors] = []
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bargein-see-scene",
                                            initializer=lower_priority, initargs=(niceness,))
        self._workers = workers
        self._waiting: OrderedDict[object, _Waiting] = OrderedDict()
        self._holds: dict[object, float] = {}
        """Sessions whose turn is on its critical path, and until when (monotonic s) each may hold the reads."""
        self._max_hold_s = max_hold_s
        self._rest_ratio = 1.0 / duty - 1.0
        self._released: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.reads = 0
        self.stopped = 0
        """Reads stopped by a hold (their frames read again after it)."""
        self._busy: set[SceneDetectors] = set()
        """Detectors reading now (the reader threads add and remove them; a hold stops them)."""
        self._busy_lock = threading.Lock()
        self._holding = False
        """Whether a hold was in force when last looked at (read by the reader threads)."""
        self._read_for: list[object] = []
        """The sessions whose frames are being read now (one a worker at most)."""
        self._ended: set[object] = set()
        """Sessions that ended while their frame was being read: a stopped read of theirs is not queued again."""

    def submit(self, owner: object, frame: Frame, previous: Frame | None, noted: Noted) -> None:
        """Queue ``frame`` for ``owner`` (its session), replacing one it still has waiting; ``noted`` gets the
        note on the event loop, in the caller's context (the session's)."""
        self._waiting[owner] = _Waiting(frame, previous, noted)  # an owner already waiting keeps its place
        if not self._tasks:
            self._wake = asyncio.Event()
            self._tasks = [asyncio.get_running_loop().create_task(self._serve(), name="bargein-see-scene",
                                                                  context=contextvars.Context())
                           for _ in range(self._workers)]
        assert self._wake is not None
        self._wake.set()

    def forget(self, owner: object) -> None:
        """Drop a session's waiting frame and hold (the session ended)."""
        self._waiting.pop(owner, None)
        if owner in self._read_for:
            self._ended.add(owner)
        self.release(owner)

    def hold(self, owner: object) -> None:
        """``owner``'s turn is between the user's last word and the reply's first audio: start no read until it
        releases (or :data:`MAX_HOLD_S` has passed), so the reply's engines have the cores to themselves."""
        self._holds[owner] = time.monotonic() + self._max_hold_s
        self._holding = True
        with self._busy_lock:
            busy = list(self._busy)
        for detectors in busy:
            detectors.stop()

    def release(self, owner: object) -> None:
        """``owner``'s reply is out (or its turn went on): reads may start again once no other session holds."""
        if self._holds.pop(owner, None) is not None and self._released is not None:
            self._released.set()
        self._holding = bool(self._holds)

    @property
    def held(self) -> bool:
        """Whether some session's turn holds the reads now."""
        now = time.monotonic()
        for owner, until in list(self._holds.items()):
            if until <= now:
                del self._holds[owner]
        self._holding = bool(self._holds)
        return self._holding

    async def _quiet(self) -> None:
        """Wait until no session holds the reads (each hold lasts at most its bound)."""
        while self.held:
            if self._released is None:
                self._released = asyncio.Event()
            self._released.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), max(0.0, min(self._holds.values()) - time.monotonic()))

    @property
    def reading(self) -> int:
        """Reads running now (a hold starts none, and stops one that is running where its detectors can stop)."""
        return len(self._read_for)

    @property
    def waiting(self) -> int:
        """Sessions with a frame waiting."""
        return len(self._waiting)

    async def _serve(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._quiet()
            if not self._waiting:
                continue
            owner, job = self._waiting.popitem(last=False)
            started = time.monotonic()
            self._read_for.append(owner)
            try:
                note, cpu_s = await loop.run_in_executor(self._executor, self._read, job)
            except ReadStopped:  # a hold began: the frame is read after it, unless the session sent another or ended
                self.stopped += 1
                if owner not in self._waiting and owner not in self._ended:
                    self._waiting[owner] = job
                    self._waiting.move_to_end(owner, last=False)
                continue
            except Exception:  # a failed read costs one note, never the pool
                log.exception("the scene reader failed on a frame")
                continue
            finally:
                self._read_for.remove(owner)
                if owner not in self._read_for:
                    self._ended.discard(owner)
            self.reads += 1
            charge("see", job.bill, cpu_s)
            job.context.run(job.noted, note)
            # rest as long again as the read took: the reader keeps to half a core, however many cameras stream
            await asyncio.sleep(self._rest_ratio * (time.monotonic() - started))

    def _read(self, job: _Waiting) -> tuple[SceneNote, float]:
        """The note and the CPU seconds of the thread that read it (OpenCV's and the OCR's own helper threads,
        where they start any, are not seen: the ``see`` stage's figure is a lower bound)."""
        detectors = self._detectors.pop() if self._detectors else self._make_detectors()
        started = time.thread_time()
        with self._busy_lock:
            self._busy.add(detectors)
        try:
            detectors.begin()  # a stop told before this read does not apply to it...
            if self._holding:
                raise ReadStopped  # ...but a hold that began as it was handed out does
            return read_scene(job.frame, job.previous, detectors), time.thread_time() - started
        finally:
            with self._busy_lock:
                self._busy.discard(detectors)
            self._detectors.append(detectors)

    async def aclose(self) -> None:
        """Stop serving and release the threads."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._executor.shutdown(wait=False, cancel_futures=True)
