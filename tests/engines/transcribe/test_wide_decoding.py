"""Where a final transcript decodes: the encoder's threads only where measured faster, uncontended, and free."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bargein.engines.cpu_reading import CpuReading
from bargein.engines.transcribe.wide_decoding import (
    WAIT_SHARE,
    Contention,
    Occupancy,
    WideDecoding,
    measure_speed_up,
)

QUIET = Contention(wait_share=0.2)
"""An encoding that hardly waited for a CPU (what an idle machine measures)."""


class Machine:
    """A scripted ``/proc`` and clock: this process's run-queue wait grows at ``share`` per second."""

    def __init__(self, share: float, *, readable: bool = True) -> None:
        self.share = share
        self.readable = readable
        self.now = 0.0

    def read(self) -> CpuReading | None:
        return CpuReading(running=2, own_running=2, own_wait_s=self.share * self.now) if self.readable else None

    def clock(self) -> float:
        return self.now


def _choice(*, faster: bool = True, threads: int = 2, cores: int = 2,
            machine: Machine | None = None) -> WideDecoding[str]:
    machine = machine or Machine(0.0)
    return WideDecoding(narrow="narrow", wide="wide", threads=threads, faster=faster, cores=cores,
                        read=machine.read, clock=machine.clock, occupancy=Occupancy())


def test_a_final_whose_encoding_hardly_waited_decodes_on_the_encoders_threads_where_they_were_faster() -> None:
    choice = _choice()
    with choice.decoder(QUIET) as model:
        assert model == "wide"
    assert choice.widened == 1


def test_an_encoding_that_waited_for_a_cpu_keeps_the_final_on_one_thread() -> None:
    choice = _choice()
    for encoding in (Contention(wait_share=WAIT_SHARE + 0.05), Contention(wait_share=None), None):
        with choice.decoder(encoding) as model:
            assert model == "narrow"
    assert choice.widened == 0


def test_watching_an_encoding_measures_its_run_queue_wait_per_second() -> None:
    machine = Machine(0.5)
    choice = _choice(machine=machine)
    with choice.watch() as encoding:
        assert encoding.wait_share is None  # not before the encoding is over
        machine.now += 0.12
    assert encoding.wait_share == pytest.approx(0.5)
    for unmeasured in (_choice(machine=Machine(0.5, readable=False)), _choice(faster=False, machine=machine)):
        with unmeasured.watch() as encoding:
            machine.now += 0.1
        assert encoding.wait_share is None


def test_a_second_final_while_the_first_holds_the_encoders_threads_decodes_on_one() -> None:
    choice = _choice()
    with choice.decoder(QUIET) as first, choice.decoder(QUIET) as second:
        assert (first, second) == ("wide", "narrow")
    with choice.decoder(QUIET) as third:  # released again
        assert third == "wide"


def test_another_models_wide_final_or_any_running_recognition_keeps_a_final_on_one_thread() -> None:
    english, mandarin = _choice(), _choice()
    mandarin.occupancy = english.occupancy  # one process: the same cores
    with english.decoder(QUIET) as first, mandarin.decoder(QUIET) as second:
        assert (first, second) == ("wide", "narrow")
    with english.decoder(Contention()) as partial, mandarin.decoder(QUIET) as final:  # a partial: not measured
        assert (partial, final) == ("narrow", "narrow")
    with english.occupancy.working(), english.decoder(QUIET) as final:  # an encoding in another worker
        assert final == "narrow"
    with english.decoder(QUIET) as final:
        assert final == "wide"


def test_a_failed_decoding_either_way_gives_the_cores_back() -> None:
    choice = _choice()
    with pytest.raises(RuntimeError), choice.decoder(QUIET):
        raise RuntimeError("CTranslate2 failed")
    with pytest.raises(RuntimeError), choice.decoder(Contention()):
        raise RuntimeError("CTranslate2 failed")
    with choice.decoder(QUIET) as model:
        assert model == "wide"


def test_a_failed_encoding_measures_nothing_and_holds_nothing() -> None:
    machine = Machine(0.5)
    choice = _choice(machine=machine)
    with pytest.raises(RuntimeError), choice.watch() as encoding:
        machine.now += 0.1
        raise RuntimeError("CTranslate2 failed")
    assert encoding.wait_share is None
    with choice.decoder(QUIET) as model:
        assert model == "wide"


def test_where_two_threads_were_not_faster_or_cannot_be_had_finals_stay_on_one() -> None:
    for choice in (_choice(faster=False), _choice(threads=1), _choice(threads=4, cores=2)):
        with choice.decoder(QUIET) as model:
            assert model == "narrow"
        assert choice.widened == 0
    choice = _choice(faster=False)
    choice.set_measured(1.1)  # within a timing's swing: not worth it
    assert not choice.faster
    choice.set_measured(1.7)
    assert choice.faster
    blind = _choice(faster=False, machine=Machine(0.0, readable=False))
    blind.set_measured(1.7)  # no run queues to read: no encoding's wait would ever be known
    assert not blind.faster


def test_the_speed_up_is_the_ratio_of_the_medians_of_alternating_runs() -> None:
    now = [0.0]
    calls: list[str] = []

    def run(name: str, seconds: list[float]) -> Callable[[], None]:
        def call() -> None:
            calls.append(name)
            now[0] += seconds.pop(0)
        return call

    narrow = run("narrow", [0.30, 0.31, 0.90])  # one slow outlier: the median ignores it
    wide = run("wide", [0.20, 0.19, 0.21])
    speed_up = measure_speed_up(narrow, wide, rounds=3, clock=lambda: now[0])
    assert speed_up == pytest.approx(0.31 / 0.20)
    assert calls == ["narrow", "wide"] * 3
