"""Where a final transcript decodes: the encoder's threads only where measured faster, idle, and free."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bargein.engines.cpu_reading import CpuReading
from bargein.engines.transcribe.wide_decoding import Occupancy, WideDecoding, measure_speed_up


def _choice(*, faster: bool = True, others: int = 0, own: int = 1, threads: int = 2, cores: int = 2,
            readable: bool = True) -> WideDecoding[str]:
    def read() -> CpuReading | None:
        return CpuReading(running=others + own, own_running=own, own_wait_s=0.0) if readable else None
    return WideDecoding(narrow="narrow", wide="wide", threads=threads, faster=faster, cores=cores, read=read,
                        occupancy=Occupancy())


def test_an_idle_machine_decodes_a_final_on_the_encoders_threads_where_they_were_faster() -> None:
    choice = _choice()
    with choice.decoder() as model:
        assert model == "wide"
    assert (choice.widened, choice.kept_narrow) == (1, 0)


def test_one_encoder_thread_spinning_after_the_encoding_does_not_count_as_another_thread() -> None:
    with _choice(own=2).decoder() as model:  # the caller and one of the encoder's threads
        assert model == "wide"
    with _choice(own=3).decoder() as model:  # a third thread of ours is work: a partial, say
        assert model == "narrow"


def test_a_thread_of_another_process_keeps_the_final_on_one_thread() -> None:
    choice = _choice(others=1)
    with choice.decoder() as model:
        assert model == "narrow"
    assert (choice.widened, choice.kept_narrow) == (0, 1)


def test_a_second_final_while_the_first_holds_the_encoders_threads_decodes_on_one() -> None:
    choice = _choice()
    with choice.decoder() as first, choice.decoder() as second:
        assert (first, second) == ("wide", "narrow")
    with choice.decoder() as third:  # released again
        assert third == "wide"


def test_another_models_wide_final_or_any_running_recognition_keeps_a_final_on_one_thread() -> None:
    english, mandarin = _choice(), _choice()
    mandarin.occupancy = english.occupancy  # one process: the same cores
    with english.decoder() as first, mandarin.decoder() as second:
        assert (first, second) == ("wide", "narrow")
    with english.decoder(widens=False) as partial, mandarin.decoder() as final:
        assert (partial, final) == ("narrow", "narrow")
    with english.occupancy.working(), english.decoder() as final:  # an encoding in another worker
        assert final == "narrow"
    with english.decoder() as final:
        assert final == "wide"


def test_a_failed_wide_decoding_gives_the_cores_back() -> None:
    choice = _choice()
    with pytest.raises(RuntimeError), choice.decoder():
        raise RuntimeError("CTranslate2 failed")
    with choice.decoder() as model:
        assert model == "wide"


def test_where_two_threads_were_not_faster_or_cannot_be_had_finals_stay_on_one() -> None:
    for choice in (_choice(faster=False), _choice(readable=False), _choice(threads=1), _choice(cores=1)):
        with choice.decoder() as model:
            assert model == "narrow"
        assert choice.widened == 0


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
