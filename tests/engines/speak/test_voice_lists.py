"""The voices a session may name are known wherever the synthesiser runs: in a worker process (the default
set-up), behind the by-language router, on a Ray Serve replica; a name none of them speaks is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.process.shared import SHARED_DIR_ENV, EngineHub, socket_path
from bargein.engines.process.wire import WorkerSpec
from bargein.engines.remote.clients import RemoteSynthesizer
from bargein.engines.speak.by_language import LanguageRouter
from bargein.engines.speak.tts_process import ProcessSynthesizer
from bargein.engines.speak.voices import check_voice, unknown_voice
from bargein.protocol.errors import ProtocolError
from tests.support.listed_voices import ListingFakeVoice

KNOWN = ["alloy", "marin", "heart", "KORE", " kore ", "af_heart", "af_kore", "fable"]
UNKNOWN = ["nobody", "af_nobody", "am_fenrir", "baker"]


@pytest.fixture(scope="module")
def in_worker() -> Any:
    tts = ProcessSynthesizer(WorkerSpec("tests.support.listed_voices:ListingFakeVoice", {}))
    try:
        yield tts
    finally:
        tts.close()


@pytest.mark.parametrize("voice", KNOWN)
def test_a_worker_process_knows_what_its_voice_speaks(in_worker: ProcessSynthesizer, voice: str) -> None:
    assert unknown_voice(voice, ListingFakeVoice()) is None  # in process, as before
    assert unknown_voice(voice, in_worker) is None


@pytest.mark.parametrize("voice", UNKNOWN)
def test_a_worker_process_refuses_what_its_voice_does_not_speak(in_worker: ProcessSynthesizer, voice: str) -> None:
    # before: the worker's client listed no voices, so every name was taken (and spoken in the default voice)
    assert unknown_voice(voice, ListingFakeVoice()) is not None
    with pytest.raises(ProtocolError) as refused:
        check_voice(voice, in_worker, param="session.audio.output.voice", event_id="evt_1")
    assert refused.value.code == "invalid_value" and "heart, kore" in str(refused.value)


def test_a_worker_process_names_flites_voices() -> None:
    tts = ProcessSynthesizer(WorkerSpec("bargein.engines.speak.flite_tts:FliteSynthesizer", {}))
    try:
        assert tts.voices is not None and "slt" in tts.voices and tts.default_voice == "slt"
        for voice in ("slt", "alloy", "cedar", "fable"):
            assert unknown_voice(voice, tts) is None, voice
        assert unknown_voice("heart", tts) is not None
    finally:
        tts.close()


def test_a_worker_whose_voice_lists_none_takes_any_name() -> None:
    tts = ProcessSynthesizer(WorkerSpec("bargein.engines.fakes:FakeSynthesizer", {}))
    try:
        assert tts.voices is None and unknown_voice("nobody", tts) is None
    finally:
        tts.close()


def test_a_session_worker_sharing_the_voice_knows_its_voices(in_worker: ProcessSynthesizer, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # bargein serve --workers N: the session workers connect to the parent's voice through a hub
    hub = EngineHub(in_worker.process, socket_path(str(tmp_path), "tts"))
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path))
    shared = ProcessSynthesizer(WorkerSpec("unused"))
    try:
        assert shared.process.launch.connect is not None and shared.voices == ("heart", "kore")
        assert unknown_voice("af_kore", shared) is None and unknown_voice("nobody", shared) is not None
    finally:
        shared.close()
        hub.close()
        in_worker.process.on_death = None  # the hub is gone: the module's worker is nobody's to share now


@pytest.mark.parametrize(("voice", "known"), [*((voice, True) for voice in KNOWN),
                                              *((voice, False) for voice in UNKNOWN)])
def test_the_language_router_takes_the_default_voices_names(voice: str, known: bool) -> None:
    # the name goes to the default voice only (Mandarin clauses are spoken in the Mandarin voice's one voice),
    # so the default voice's names are the ones there are; before: the router listed none and took any
    router = LanguageRouter(ListingFakeVoice(), FakeSynthesizer())
    assert (unknown_voice(voice, router) is None) is known


def test_a_router_over_a_worker_process_lists_the_workers_voices(in_worker: ProcessSynthesizer) -> None:
    router = LanguageRouter(in_worker, FakeSynthesizer())
    assert router.capabilities.voices == ("heart", "kore") and unknown_voice("nobody", router) is not None


def test_a_router_whose_default_voice_lists_none_takes_any_name() -> None:
    assert unknown_voice("nobody", LanguageRouter(FakeSynthesizer(), ListingFakeVoice())) is None


class _Handle:
    def options(self, **_: Any) -> _Handle:
        return self


@pytest.mark.parametrize(("voice", "known"), [("af_kore", True), ("alloy", True), ("nobody", False)])
def test_a_ray_replica_lists_its_voices_to_its_clients(voice: str, known: bool) -> None:
    from bargein.config import Settings
    from bargein.engines.remote.deployments import TtsDeployment

    replica = TtsDeployment.func_or_class(Settings(engines="fake").model_dump_json())
    replica.engine = ListingFakeVoice()  # what the replica's settings built, as a voice that lists its voices
    client = RemoteSynthesizer(_Handle(), 5.0, 24_000, listing=replica.describe())
    assert (unknown_voice(voice, client) is None) is known
    assert unknown_voice("nobody", RemoteSynthesizer(_Handle(), 5.0, 24_000)) is None  # an older replica: any


@pytest.mark.parametrize(("voice", "known"), [("af_kore", True), ("fable", True), ("nobody", False)])
def test_a_ray_replica_with_mandarin_on_lists_its_default_voices_spellings(voice: str, known: bool) -> None:
    """With Mandarin on the replica's voice is the by-language router: its listing must carry the default
    voice's other spellings, or the client refuses names the router speaks in process."""
    from bargein.config import Settings
    from bargein.engines.remote.deployments import TtsDeployment

    replica = TtsDeployment.func_or_class(Settings(engines="fake").model_dump_json())
    replica.engine = LanguageRouter(ListingFakeVoice(), FakeSynthesizer())
    client = RemoteSynthesizer(_Handle(), 5.0, 24_000, listing=replica.describe())
    assert (unknown_voice(voice, client) is None) is known
    assert (unknown_voice(voice, replica.engine) is None) is known, "as the router takes it in process"


SPELLINGS = ["alloy", "cedar", "heart", "HEART", "af_heart", "kore", "af_kore", "am_fenrir", "fable", "bm_fable",
             "slt", "rms", "awb", "kal", "nobody", "af_nobody", "baker"]


@pytest.mark.parametrize("tts_engine", ["kokoro", "flite"])
def test_the_default_set_ups_worker_takes_the_names_its_voice_takes_in_process(tts_engine: str) -> None:
    from bargein.config import Settings
    from bargein.engines.loaders import load_voice

    settings = Settings(tts_engine=tts_engine)
    try:
        in_process, _ = load_voice(settings)
    except Exception as error:  # Kokoro's weights are not installed here
        pytest.skip(f"{tts_engine} cannot load here: {error}")
    # what load_tts(settings, worker_process=True) starts for Kokoro (flite runs in process there; here too)
    in_worker = ProcessSynthesizer(WorkerSpec("bargein.engines.loaders:load_voice", {"settings": settings}))
    try:
        assert in_worker.voices == in_process.voices  # type: ignore[attr-defined]
        for voice in SPELLINGS:
            assert (unknown_voice(voice, in_worker) is None) is (unknown_voice(voice, in_process) is None), voice
        assert unknown_voice("nobody", in_worker) is not None
    finally:
        in_worker.close()
