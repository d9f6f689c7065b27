"""Smart Turn: the model file is verified before use, features follow the model's recipe, requests batch."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import threading
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bargein.engines.listen.smart_turn import (
    MEL_BANDS,
    MEL_FRAMES,
    WINDOW_SAMPLES,
    SmartTurn,
    SmartTurnModel,
    int8_saturates,
)
from bargein.engines.listen.smart_turn_file import (
    SMART_TURN_DISTRIBUTION,
    SMART_TURN_FILENAME,
    SMART_TURN_MEMBER,
    extract_from_wheel,
    smart_turn_path,
)
from bargein.weights import WeightError


def test_a_missing_model_names_the_file_the_package_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(WeightError) as caught:
        smart_turn_path(tmp_path)
    message = str(caught.value)
    assert SMART_TURN_FILENAME in message
    assert SMART_TURN_DISTRIBUTION in message
    assert "fix: python -m bargein.engines.listen.smart_turn_file" in message


def test_an_altered_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / SMART_TURN_FILENAME).write_bytes(b"not the model")
    with pytest.raises(WeightError, match="sha256") as caught:
        smart_turn_path(tmp_path)
    assert SMART_TURN_DISTRIBUTION in str(caught.value)


def test_a_wheel_with_the_wrong_file_leaves_nothing_behind(tmp_path: Path) -> None:
    wheel = tmp_path / "pipecat_ai-1.14.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(SMART_TURN_MEMBER, b"tampered")
    models = tmp_path / "models"
    with pytest.raises(WeightError, match="refusing"):
        extract_from_wheel(wheel, models)
    assert list(models.iterdir()) == []


def test_a_wheel_without_the_file_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "pipecat_ai-1.14.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pipecat/__init__.py", b"")
    with pytest.raises(WeightError, match=SMART_TURN_MEMBER):
        extract_from_wheel(wheel, tmp_path / "models")


class _CountingModel:
    """Stands in for the onnx model: the probability is the clip's peak, batches are recorded."""

    def __init__(self, *, fail: bool = False) -> None:
        self.batches: list[int] = []
        self.fail = fail
        self.release = threading.Event()

    def probabilities(self, clips: list[np.ndarray]) -> np.ndarray:
        self.release.wait(5)
        self.batches.append(len(clips))
        if self.fail:
            raise RuntimeError("model failure")
        return np.array([float(np.max(clip)) for clip in clips], np.float32)


@pytest.mark.parametrize(("max_batch", "batches"), [
    (16, [1, 3]),  # those waiting together run as one batch
    (None, [1, 1, 1, 1]),  # by default each is its own pass, so the first answer waits for no other
])
async def test_waiting_requests_run_in_batches_of_max_batch_and_each_gets_its_own_answer(
        max_batch: int | None, batches: list[int]) -> None:
    model = _CountingModel()
    turn = SmartTurn(model) if max_batch is None else SmartTurn(model, max_batch=max_batch)  # type: ignore[arg-type]
    first = asyncio.create_task(turn.probability(np.full(1600, 0.1, np.float32)))
    await asyncio.sleep(0.05)  # the first batch (of one) is running and blocked
    rest = [asyncio.create_task(turn.probability(np.full(1600, level, np.float32))) for level in (0.2, 0.3, 0.4)]
    await asyncio.sleep(0.05)
    model.release.set()
    results = await asyncio.gather(first, *rest)
    assert results == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert model.batches == batches
    await turn.aclose()


async def test_a_model_failure_reaches_every_waiting_caller() -> None:
    model = _CountingModel(fail=True)
    model.release.set()
    turn = SmartTurn(model)  # type: ignore[arg-type]
    calls = [turn.probability(np.zeros(1600, np.float32)) for _ in range(2)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes)
    await turn.aclose()


# --- the real model -------------------------------------------------------------------------------


def _flite(text: str) -> np.ndarray:
    from bargein.audio.resample import resample

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "speech.wav"
        subprocess.run(["flite", "-voice", "slt", "-t", text, "-o", str(out)], check=True, capture_output=True)
        with wave.open(str(out)) as handle:
            rate = handle.getframerate()
            pcm = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return resample(pcm.astype(np.float32) / 32768.0, rate, 16_000)


@pytest.mark.slow
def test_features_are_eight_seconds_padded_at_the_front() -> None:
    model = SmartTurnModel()
    speech = _flite("Set an alarm for seven thirty.")
    features = model.features(speech)
    assert features.shape == (MEL_BANDS, MEL_FRAMES)
    assert features.dtype == np.float32
    # silence before the speech changes nothing: the window is zero-padded at the front anyway
    padded = np.concatenate([np.zeros(16_000, np.float32), speech])
    assert np.allclose(model.features(padded), features, atol=1e-5)
    # only the last 8 s count
    long = np.concatenate([np.full(WINDOW_SAMPLES, 0.3, np.float32), speech])
    assert np.allclose(model.features(long), model.features(long[-WINDOW_SAMPLES:]), atol=1e-6)


@pytest.mark.slow
async def test_a_finished_sentence_scores_higher_than_the_same_words_cut_mid_sentence() -> None:
    turn = SmartTurn()
    whole = _flite("I want to book a table for four people.")
    cut = whole[: int(len(whole) * 0.62)]  # "... a table for" (flite's pitch still going on)
    tail = np.zeros(3200, np.float32)
    finished = await turn.probability(np.concatenate([whole, tail]))
    unfinished = await turn.probability(np.concatenate([cut, tail]))
    assert finished > 0.5 > unfinished
    await turn.aclose()


def test_start_up_stops_when_the_end_of_turn_model_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bargein.config import Settings
    from bargein.engines.factory import load_engines

    monkeypatch.setenv("BARGEIN_CACHE_DIR", str(tmp_path))
    with pytest.raises(WeightError, match=SMART_TURN_DISTRIBUTION):
        load_engines(Settings(engines="instant"))


@pytest.mark.slow
def test_start_up_loads_the_end_of_turn_model_with_the_fake_engines() -> None:
    from bargein.config import Settings
    from bargein.engines.factory import load_engines

    engines = load_engines(Settings(engines="instant"))
    assert isinstance(engines.turn, SmartTurn)
    assert "Smart Turn v3.2" in engines.description["turn"]


@pytest.mark.parametrize(("flags", "saturates"), [
    ("fpu sse sse2 avx avx2 fma", True),  # AVX2 without VNNI: the 16-bit saturating multiply
    ("fpu sse sse2 avx avx2 avx512f avx512_vnni", False),
    ("fpu sse sse2 avx avx2 avx_vnni", False),
    ("fpu sse sse2 sse4_1 avx", False),  # no AVX2: onnxruntime's option changes nothing there
])
def test_exact_int8_is_chosen_only_on_x86_cpus_without_vnni(tmp_path: Path, flags: str, saturates: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    core = f"model name\t: Some CPU\nflags\t\t: {flags}\n"
    cpuinfo.write_text(f"processor\t: 0\n{core}\nprocessor\t: 1\n{core}")
    assert int8_saturates(cpuinfo) is saturates


def test_exact_int8_is_not_forced_where_the_cpu_is_unknown_or_not_x86(tmp_path: Path) -> None:
    assert not int8_saturates(tmp_path / "missing")
    arm = tmp_path / "cpuinfo"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n")
    assert not int8_saturates(arm)


@pytest.mark.parametrize("saturates", [True, False])
def test_the_model_asks_for_exact_int8_exactly_where_the_cpu_saturates(monkeypatch: pytest.MonkeyPatch,
                                                                      saturates: bool) -> None:
    import bargein.engines.listen.smart_turn as smart_turn

    monkeypatch.setattr(smart_turn, "int8_saturates", lambda: saturates)
    options = SmartTurnModel()._session.get_session_options()
    try:
        exact = options.get_session_config_entry("session.x64quantprecision") == "1"
    except RuntimeError:  # onnxruntime's answer for an entry never set
        exact = False
    assert exact is saturates
