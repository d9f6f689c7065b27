"""The embedded LLM's thread count: every core at an idle instant, back down when an evaluation was contended."""

from __future__ import annotations

from pathlib import Path

import pytest

from bargein.engines.cpu_reading import CpuReading, read_proc
from bargein.engines.think.thread_governor import HOLD_S, MAX_HOLD_S, WAIT_SHARE, ThreadGovernor


class Machine:
    """A scripted ``/proc``: what is runnable (the model's own threads and others), the model's run-queue wait, the
    time."""

    def __init__(self) -> None:
        self.others = 0
        self.own = 1  # the reader
        self.wait_s = 100.0
        self.now = 50.0
        self.offline = False

    def read(self) -> CpuReading | None:
        if self.offline:
            return None
        return CpuReading(running=self.others + self.own, own_running=self.own, own_wait_s=self.wait_s)

    def run(self, seconds: float, *, waiting: float = 0.0) -> None:
        """Let ``seconds`` pass, the model's threads waiting ``waiting`` thread-seconds per second of it."""
        self.now += seconds
        self.wait_s += seconds * waiting


def governor(machine: Machine, *, fewer: int = 1, more: int = 2, cores: int = 2) -> ThreadGovernor:
    return ThreadGovernor(fewer=fewer, more=more, cores=cores, read=machine.read, clock=lambda: machine.now)


def evaluate(threads: ThreadGovernor, machine: Machine, seconds: float = 0.03, *, waiting: float = 0.0) -> int:
    count = threads.before_eval()
    machine.run(seconds, waiting=waiting)
    threads.after_eval()
    return count


def test_every_core_while_nothing_else_is_runnable_and_half_when_something_is() -> None:
    machine = Machine()
    threads = governor(machine)
    assert evaluate(threads, machine) == 2
    machine.others = 1  # the recogniser starts on the other core
    assert evaluate(threads, machine) == 1
    machine.others = 0
    assert evaluate(threads, machine) == 2
    assert threads.raised == 2 and threads.lowered == 0


def test_its_own_spinning_helpers_are_not_others_but_a_third_thread_of_its_process_is() -> None:
    machine = Machine()
    threads = governor(machine)
    assert evaluate(threads, machine) == 2
    machine.own = 3  # the reader, the helper spinning on after the call, the thread passing tokens on
    assert evaluate(threads, machine) == 2
    machine.own = 5  # and a recogniser's two threads in the same process
    assert evaluate(threads, machine) == 1
    machine.own = 2  # after a call on one thread no helper spins: only the reader and the token thread
    assert evaluate(threads, machine) == 2


def test_a_contended_evaluation_holds_the_count_down_longer_each_time_in_a_row() -> None:
    machine = Machine()
    threads = governor(machine)
    assert evaluate(threads, machine, 0.1, waiting=WAIT_SHARE * 2) == 2  # a competitor arrived mid-call
    assert threads.lowered == 1
    machine.run(HOLD_S / 2)
    assert evaluate(threads, machine, 0.0) == 1, "an idle instant within the hold does not raise it"
    machine.run(HOLD_S)
    assert evaluate(threads, machine, 0.1, waiting=WAIT_SHARE * 2) == 2  # still there
    machine.run(HOLD_S * 1.5)
    assert evaluate(threads, machine, 0.0) == 1, "the second hold is twice as long"
    machine.run(HOLD_S)
    assert evaluate(threads, machine, 0.1) == 2  # gone: the next contention starts from the shortest hold
    assert evaluate(threads, machine, 0.1, waiting=WAIT_SHARE * 2) == 2
    machine.run(HOLD_S * 1.1)
    assert evaluate(threads, machine) == 2
    assert threads.lowered == 3


def test_the_hold_stops_growing() -> None:
    machine = Machine()
    threads = governor(machine)
    for _ in range(12):
        assert evaluate(threads, machine, 0.1, waiting=1.0) == 2
        machine.run(MAX_HOLD_S)
    assert threads.lowered == 12


def test_a_little_waiting_is_not_contention() -> None:
    machine = Machine()
    threads = governor(machine)
    assert evaluate(threads, machine, 0.1, waiting=WAIT_SHARE / 3) == 2  # an event loop's wake-ups
    assert threads.lowered == 0 and evaluate(threads, machine) == 2


def test_waiting_while_on_fewer_threads_is_not_held_against_the_next_idle_instant() -> None:
    machine = Machine()
    threads = governor(machine)
    machine.others = 3
    assert evaluate(threads, machine, 0.1, waiting=1.0) == 1  # a busy machine
    machine.others = 0
    assert evaluate(threads, machine) == 2 and threads.lowered == 0


def test_on_a_larger_machine_the_cores_left_over_may_be_busy() -> None:
    machine = Machine()
    threads = governor(machine, fewer=4, more=6, cores=8)
    machine.others = 2
    assert evaluate(threads, machine) == 6
    machine.others = 3
    assert evaluate(threads, machine) == 4


def test_without_readings_or_with_a_fixed_count_it_never_changes() -> None:
    machine = Machine()
    machine.offline = True
    blind = governor(machine)
    assert blind.more == 1 and evaluate(blind, machine) == 1
    machine.offline = False
    fixed = governor(machine, fewer=2, more=2)
    assert evaluate(fixed, machine) == 2
    machine.others = 5
    assert evaluate(fixed, machine) == 2 and fixed.raised == 0


def test_read_proc_counts_runnable_threads_and_this_processs_run_queue_wait(tmp_path: Path) -> None:
    loadavg, tasks = tmp_path / "loadavg", tmp_path / "task"
    loadavg.write_text("0.70 0.66 0.72 5/345 12345\n")
    for tid, stat, schedstat in ((10, "10 (python) R 1 10", "900 2000000000 7"),
                                 (11, "11 (llm (qwen) x) R 1 10", "800 500000000 3"),
                                 (12, "12 (ipc) S 1 10", "100 0 1")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(stat)
        (tasks / str(tid) / "schedstat").write_text(schedstat)
    assert read_proc(loadavg, tasks) == CpuReading(running=5, own_running=2, own_wait_s=pytest.approx(2.5))
    (tasks / "12" / "stat").unlink()  # a thread that ends while being looked at counts for nothing
    assert read_proc(loadavg, tasks) == CpuReading(running=5, own_running=2, own_wait_s=pytest.approx(2.5))
    assert read_proc(tmp_path / "absent", tasks) is None
    loadavg.write_text("0.70 0.66\n")
    assert read_proc(loadavg, tasks) is None


def test_read_proc_on_this_machine_counts_the_reader_among_the_runnable() -> None:
    reading = read_proc()
    if reading is None:
        pytest.skip("this kernel offers no /proc/loadavg or scheduler statistics")
    assert reading.own_running >= 1, "the thread reading is running"
    assert reading.running >= 1 and reading.own_wait_s >= 0


def test_an_evaluation_applies_a_count_only_when_it_changes_and_is_looked_at_even_when_it_fails() -> None:
    machine = Machine()
    threads = governor(machine)
    applied: list[int] = []
    for others in (0, 0, 1, 1, 0):
        machine.others = others
        with threads.evaluation(applied.append):
            machine.run(0.03)
    assert applied == [2, 1, 2], "the context starts on the fewer count and keeps a count until told another"
    with pytest.raises(RuntimeError), threads.evaluation(applied.append):
        machine.run(0.1, waiting=1.0)
        raise RuntimeError("llama_decode failed")
    assert threads.lowered == 1, "a failed call that was contended still holds the count down"
