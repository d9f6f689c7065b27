"""The embedded LLM's thread count: every core at an idle instant, back down when an evaluation was contended."""

from __future__ import annotations

from pathlib import Path

import pytest

from bargein.engines.think.thread_governor import (
    HOLD_S,
    STALL_SHARE,
    CpuReading,
    ThreadGovernor,
    read_proc,
)


class Machine:
    """A scripted ``/proc``: what is runnable, the CPU pressure so far, and the time."""

    def __init__(self) -> None:
        self.others = 0
        self.stall_s = 100.0
        self.now = 50.0
        self.offline = False

    def read(self) -> CpuReading | None:
        return None if self.offline else CpuReading(self.others, self.stall_s)

    def run(self, seconds: float, *, stalled_share: float = 0.0) -> None:
        self.now += seconds
        self.stall_s += seconds * stalled_share


def governor(machine: Machine, *, fewer: int = 1, more: int = 2, cores: int = 2) -> ThreadGovernor:
    return ThreadGovernor(fewer=fewer, more=more, cores=cores, read=machine.read, clock=lambda: machine.now)


def test_every_core_while_nothing_else_is_runnable_and_half_when_something_is() -> None:
    machine = Machine()
    threads = governor(machine)
    assert threads.before_eval() == 2
    machine.run(0.03)
    threads.after_eval()
    machine.others = 1  # the recogniser starts on the other core
    assert threads.before_eval() == 1
    machine.run(0.05)
    threads.after_eval()
    machine.others = 0
    assert threads.before_eval() == 2
    assert threads.raised == 2 and threads.lowered == 0


def test_a_contended_evaluation_lowers_the_count_and_holds_it_down() -> None:
    machine = Machine()
    threads = governor(machine)
    assert threads.before_eval() == 2
    machine.run(0.1, stalled_share=STALL_SHARE * 2)  # something arrived mid-call and waited for a CPU
    threads.after_eval()
    assert threads.lowered == 1
    machine.run(HOLD_S / 2)
    assert threads.before_eval() == 1, "an idle instant within the hold does not raise it"
    threads.after_eval()
    machine.run(HOLD_S)
    assert threads.before_eval() == 2


def test_a_little_waiting_is_not_contention() -> None:
    machine = Machine()
    threads = governor(machine)
    assert threads.before_eval() == 2
    machine.run(0.1, stalled_share=STALL_SHARE / 3)  # a timer's wake-up, the event loop's few microseconds
    threads.after_eval()
    assert threads.lowered == 0 and threads.before_eval() == 2


def test_pressure_while_on_fewer_threads_is_not_held_against_the_next_idle_instant() -> None:
    machine = Machine()
    threads = governor(machine)
    machine.others = 3
    assert threads.before_eval() == 1
    machine.run(0.1, stalled_share=1.0)  # a busy machine: its waiting is not this model's doing
    threads.after_eval()
    machine.others = 0
    assert threads.before_eval() == 2 and threads.lowered == 0


def test_on_a_larger_machine_the_cores_left_over_may_be_busy() -> None:
    machine = Machine()
    threads = governor(machine, fewer=4, more=6, cores=8)
    machine.others = 2
    assert threads.before_eval() == 6
    threads.after_eval()
    machine.others = 3
    assert threads.before_eval() == 4


def test_without_readings_or_with_a_fixed_count_it_never_changes() -> None:
    machine = Machine()
    machine.offline = True
    blind = governor(machine)
    assert blind.more == 1 and blind.before_eval() == 1
    machine.offline = False
    fixed = governor(machine, fewer=2, more=2)
    assert fixed.before_eval() == 2
    machine.others = 5
    assert fixed.before_eval() == 2 and fixed.raised == 0


def test_read_proc_counts_other_processes_runnable_threads_and_the_cpu_pressure(tmp_path: Path) -> None:
    stat, pressure, tasks = tmp_path / "stat", tmp_path / "cpu", tmp_path / "task"
    stat.write_text("cpu  1 2 3 4\nctxt 99\nprocs_running 5\nprocs_blocked 0\n")
    pressure.write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
                        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    for tid, line in ((10, "10 (python) R 1 10"), (11, "11 (llm (qwen) x) R 1 10"), (12, "12 (ipc) S 1 10")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(line)
    assert read_proc(stat, pressure, tasks) == CpuReading(others_running=3, stall_s=pytest.approx(2.5))
    assert read_proc(stat, tmp_path / "absent", tasks) is None
    stat.write_text("cpu  1 2 3 4\n")
    assert read_proc(stat, pressure, tasks) is None


def test_read_proc_on_this_machine_sees_this_thread() -> None:
    reading = read_proc()
    if reading is None:
        pytest.skip("this kernel has no CPU pressure accounting")
    assert reading.others_running >= 0 and reading.stall_s >= 0
