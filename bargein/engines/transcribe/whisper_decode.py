"""Whisper decoding on CTranslate2, cut to the size of a voice turn.

Whisper is trained on 30 s windows, and running the encoder on 30 s for a 2 s turn is most of the
cost. CTranslate2 accepts a shorter mel input, so the encoder here sees the clip plus silence up to
``max(min_window_s, clip + margin_s)``: on two cores that turns ~0.6 s (tiny.en) or ~1.2 s (base)
per short turn into ~0.1 s or ~0.25 s (``bench/latency/asr_latency.py``). Shortened windows sometimes make
the decoder loop ("go forward. go forward. go ..."), since it never saw such inputs in training, so
every result is checked for loops (a repeated phrase, more words than the time allows, the token
cap reached) and a looping final is decoded again on the full 30 s window. Partials just cut the
loop off. Padding is the log-mel of digital silence, as in OpenAI's Whisper (faster-whisper pads
features with zeros, which is a faint hiss, not silence).

Blocking: call from a worker thread, never from the event loop.
"""

from __future__ import annotations

import math
import string
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import get_suppressed_tokens

from bargein.engines.transcribe.simplified import to_simplified
from bargein.engines.transcribe.voiced_encoding import voiced_mean
from bargein.engines.transcribe.wide_decoding import WideDecoding, measure_speed_up
from bargein.languages import join_units, language_code, text_units
from bargein.languages import language as language_row
from bargein.values import LISTEN_SAMPLE_RATE, Transcript, WordTiming

HOP_SAMPLES = 160
"""One mel frame is 10 ms; the encoder halves the frame count."""
FULL_WINDOW_S = 30.0
FULL_FRAMES = int(FULL_WINDOW_S * LISTEN_SAMPLE_RATE) // HOP_SAMPLES
MIN_SPEECH_SAMPLES = LISTEN_SAMPLE_RATE // 10
"""Clips under 0.1 s hold no word: answered with an empty transcript without running the model."""
SILENT_PEAK = 1e-4
"""Peak below -80 dBFS: digital silence, nothing to hear."""
_PUNCTUATION = string.punctuation + "¿¡“”‘’…"
ADDED_IN_LARGE_V3 = frozenset({"yue"})
"""The language Whisper large-v3 added to the 99 of the models before it (it has no token in theirs)."""


@dataclass(frozen=True)
class DecodeOptions:
    """How one clip is decoded."""

    min_window_s: float = 12.0
    """Shortest encoder window; 30 gives classic Whisper (every clip padded to 30 s)."""
    margin_s: float = 2.0
    """Silence after the clip that the window always keeps, so the decoder sees where speech ends."""
    beam_size: int = 1
    word_timestamps: bool = True
    loop_guard: Literal["retry", "trim"] = "retry"
    """What to do with a looping decode: decode again on the full window, or cut the loop off."""
    tokens_per_s: float = 6.0
    """Token budget per second of audio (fast speech is ~5), plus 16: past it the decoder is looping. (Until
    CTranslate2's halving of ``max_length`` was allowed for, :func:`max_length_for`, 8 here gave 9 + 4 a second.)"""
    simplified: bool = True
    """Chinese transcripts in Simplified characters (Whisper writes Traditional about as often)."""
    chinese_tokens_per_s: float = 16.0
    """The same for Chinese: about two tokens a character, four to seven characters a second."""
    widens: bool = True
    """Whether the decoding may take the encoder's threads (:mod:`.wide_decoding`): a result someone waits on."""
    encoding_languages: frozenset[str] = frozenset({"zh", "en"})
    """Languages whose transcripts carry the voiced encoding (:mod:`.voiced_encoding`): those with a
    spoken-command model (:mod:`bargein.session.core.listening.keyword`). English only from an English-only
    model: the English model reads tiny.en's encoder, and multilingual tiny's is as wide but another."""


FINAL = DecodeOptions()
"""Finals: short window, looping results decoded again on 30 s, word timings."""
PARTIAL = DecodeOptions(word_timestamps=False, loop_guard="trim", widens=False, encoding_languages=frozenset())
"""Partials during speech: the same window, no second decode, no word timings, always on the decoder copy."""
FULL_WINDOW = DecodeOptions(min_window_s=FULL_WINDOW_S)
"""Every clip padded to 30 s, as Whisper was trained (slow; the reference for the short window)."""


def loop_start(words: Sequence[str], *, max_phrase: int = 8) -> int | None:
    """Where a decoding loop begins in ``words``, or None.

    A phrase of three or more words said twice in a row, or one or two words said four times in a
    row, is a loop ("five five" is not; "five five five five" is, and costs at most a second decode).
    Returns the index just after the first occurrence, so ``words[:index]`` keeps it once.
    """
    keys = [word.strip(_PUNCTUATION).lower() for word in words]
    for start in range(len(keys)):
        for size in range(1, max_phrase + 1):
            if start + 2 * size > len(keys):
                break
            phrase = keys[start:start + size]
            repeats = 1
            while keys[start + repeats * size:start + (repeats + 1) * size] == phrase:
                repeats += 1
            if repeats >= (2 if size >= 3 else 4):
                return start + size
    return None


def max_length_for(prompt_length: int, tokens: int) -> int:
    """The ``max_length`` that lets CTranslate2's Whisper decode ``tokens`` tokens after a prompt of
    ``prompt_length``: it stops after the smaller of half of ``max_length`` and ``max_length`` less the prompt
    but one (so ``prompt_length + tokens`` alone would halve a short prompt's budget)."""
    return max(2 * tokens, prompt_length - 1 + tokens)


def tokens_allowed(prompt_length: int, max_length: int) -> int:
    """How many tokens CTranslate2's Whisper decodes at most after a prompt of ``prompt_length``."""
    return min(max_length // 2, max_length - prompt_length + 1)


def window_frames(samples: int, options: DecodeOptions) -> int:
    """Mel frames the encoder gets for a clip of ``samples``: whole seconds, at most 30 s."""
    seconds = max(options.min_window_s, math.ceil(samples / LISTEN_SAMPLE_RATE + options.margin_s))
    return int(min(FULL_WINDOW_S, seconds) * LISTEN_SAMPLE_RATE // HOP_SAMPLES)


def clean_audio(audio: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Mono float32 in [-1, 1] with NaN and infinities zeroed, whatever the caller passed."""
    array = np.asarray(audio, dtype=np.float32).reshape(-1)
    return np.clip(np.nan_to_num(array, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0)


@dataclass
class _Decoded:
    tokens: list[int]
    text: str
    avg_logprob: float
    no_speech_prob: float
    looped: bool


class WhisperCore:
    """A loaded Whisper model (its decoder side optionally loaded again, :attr:`decoder`) and the decoding rules
    above; thread-safe (CTranslate2 is)."""

    def __init__(self, model: WhisperModel, decoder: WhisperModel | None = None, *, encoder_threads: int = 1) -> None:
        self.model = model
        self.decoder = decoder or model
        """Runs the decoder's side (language detection, decoding, word alignment) on the encoder's output:
        the same weights loaded again on fewer threads. The encoder's large products gain from a second
        thread; the decoder's small per-token steps lose to the threads' synchronisation on some CPUs (tiny.en
        on one: 5.0 ms a token on one thread, 6.6 on two; where they gain, a final may take the encoder's
        threads: :attr:`wide`), and one thread leaves the other core to the LLM. Turns over 30 s are the
        exception: faster-whisper's own sliding windows decode them on :attr:`model`."""
        self.wide = WideDecoding(narrow=self.decoder, wide=model, threads=encoder_threads, faster=False)
        """Where a final decodes: on :attr:`decoder`, or on :attr:`model`'s threads where that was measured
        faster (:meth:`measure_wide_decoding`), the clip's encoding hardly waited for a CPU, and nothing else of
        this process is recognising."""
        self._count = threading.Lock()
        self.multilingual = bool(model.model.is_multilingual)
        self.languages = _model_languages(model, self.multilingual)
        """The language codes this model can transcribe (``{"en"}`` for an English-only model)."""
        self._tokenizers: dict[str, Tokenizer] = {}
        self.retries = 0
        """Finals decoded a second time on the full window because the short one looped."""

    def tokenizer(self, language: str) -> Tokenizer:
        """The tokenizer (and so the start-of-transcript sequence) for ``language``."""
        if language not in self._tokenizers:
            self._tokenizers[language] = Tokenizer(self.model.hf_tokenizer, self.multilingual,
                                                   task="transcribe", language=language)
        return self._tokenizers[language]

    def transcribe(self, audio: npt.ArrayLike, *, language: str | None = None, prompt: str | None = None,
                   options: DecodeOptions = FINAL) -> Transcript:
        """Recognise one clip of 16 kHz mono audio; empty or silent audio gives an empty transcript."""
        clip = clean_audio(audio)
        language = language_code(language)
        known = bool(language) and language in self.languages
        fallback_language = language if (known and language) else "en"
        if len(clip) < MIN_SPEECH_SAMPLES or float(np.max(np.abs(clip))) < SILENT_PEAK:
            return Transcript(text="", language=fallback_language, no_speech_prob=1.0)
        if len(clip) > FULL_WINDOW_S * LISTEN_SAMPLE_RATE:
            with self.wide.occupancy.working():  # on the encoder's threads: no final goes wide beside it
                return self._transcribe_long(clip, language=language if known else None, prompt=prompt,
                                             options=options)
        features = self.model.feature_extractor(clip)
        content_frames = min(features.shape[-1], len(clip) // HOP_SAMPLES + 1)
        frames = window_frames(len(clip), options)
        with self.wide.watch(widens=options.widens) as encoding:
            encoded = self._encode(features, content_frames, frames)
        with self.wide.decoder(encoding) as decoder:
            lang = self._language(decoder, encoded, language)
            tokenizer = self.tokenizer(lang)
            # taken from the first window: the spoken-command model was fitted on it, not on a retry's 30 s one
            encodes = lang in options.encoding_languages and (lang != "en" or not self.multilingual)
            voiced = voiced_mean(encoded, clip) if encodes else ()
            duration = len(clip) / LISTEN_SAMPLE_RATE
            if prompt is None:  # a prompt in the wanted script steers Whisper towards it (Simplified Chinese)
                prompt = language_row(lang).recognition_prompt if lang != "en" else None
            decoded = self._decode(decoder, encoded, tokenizer, prompt, duration, options)
            if decoded.looped and options.loop_guard == "retry" and frames < FULL_FRAMES:
                with self._count:  # two workers may retry at once
                    self.retries += 1
                encoded = self._encode(features, content_frames, FULL_FRAMES)
                decoded = self._decode(decoder, encoded, tokenizer, prompt, duration, options)
            if decoded.looped:
                decoded = self._trim(decoded, tokenizer)
            words: tuple[WordTiming, ...] = ()
            if options.word_timestamps and decoded.tokens:
                words = self._word_timings(decoder, tokenizer, decoded.tokens, encoded, content_frames, duration)
        text = decoded.text
        if lang == "zh" and options.simplified:
            text, words = _in_simplified(text, words)
        return Transcript(text=text, language=lang, no_speech_prob=decoded.no_speech_prob,
                          avg_logprob=decoded.avg_logprob, words=words, voiced_encoding=voiced)

    def _encode(self, features: npt.NDArray[np.float32], content_frames: int, frames: int) -> Any:
        # fill past the clip with the log-mel of digital silence: the normalised floor, max - 8 dB / 4
        window = np.full((features.shape[0], frames), features.max() - 2.0, dtype=np.float32)
        used = min(content_frames, frames)
        window[:, :used] = features[:, :used]
        with self.wide.occupancy.working():
            return self.model.encode(window)

    def _language(self, decoder: WhisperModel, encoded: Any, language: str | None) -> str:
        if not self.multilingual:
            return "en"
        if language and language in self.languages:
            return language
        # no language, or one this model does not know ("english", "en-US", "yue" before large-v3): let the
        # model say which
        best = decoder.model.detect_language(encoded)[0][0][0]  # ("<|en|>", probability)
        return str(best)[2:-2]

    def measure_wide_decoding(self, audio: npt.ArrayLike, *, steps: int = 24, rounds: int = 3) -> float:
        """Time ``steps`` decoding steps over ``audio``'s encoding on :attr:`decoder` and on :attr:`model`'s
        threads, alternately; finals decode on :attr:`model` from now on (when uncontended) if it was
        :data:`~.wide_decoding.MIN_SPEED_UP` times as fast. Returns the speed-up. Blocking: at start-up."""
        if self.decoder is self.model:
            return 1.0
        clip = clean_audio(audio)
        features = self.model.feature_extractor(clip)
        content_frames = min(features.shape[-1], len(clip) // HOP_SAMPLES + 1)
        encoded = self._encode(features, content_frames, window_frames(len(clip), FINAL))
        tokenizer = self.tokenizer("en" if "en" in self.languages else min(self.languages))
        start = self.model.get_prompt(tokenizer, [], without_timestamps=True)
        # the end of text suppressed, so every run decodes exactly ``steps`` tokens, whatever the audio
        suppressed = [*get_suppressed_tokens(tokenizer, [-1]), tokenizer.eot]
        length = max_length_for(len(start), steps)

        def decode_on(model: WhisperModel) -> Callable[[], object]:
            return lambda: model.model.generate(encoded, [start], beam_size=1, max_length=length,
                                                suppress_tokens=suppressed)

        tokens = decode_on(self.model)()[0].sequences_ids[0]  # type: ignore[index]
        # the first word alignment allocates its buffers: not in a user's turn
        self.model.find_alignment(tokenizer, [tokens], encoded, content_frames)
        speed_up = measure_speed_up(decode_on(self.decoder), decode_on(self.model), rounds=rounds)
        self.wide.set_measured(speed_up)
        return speed_up

    def _decode(self, decoder: WhisperModel, encoded: Any, tokenizer: Tokenizer, prompt: str | None,
                duration: float, options: DecodeOptions) -> _Decoded:
        previous = tokenizer.encode(" " + prompt.strip()) if prompt and prompt.strip() else []
        start = self.model.get_prompt(tokenizer, previous, without_timestamps=True)
        spaced = language_row(tokenizer.language_code).spaced
        rate = options.tokens_per_s if spaced else options.chinese_tokens_per_s
        budget = int(16 + rate * duration)
        max_length = min(self.model.max_length, max_length_for(len(start), budget))
        result = decoder.model.generate(
            encoded, [start], beam_size=options.beam_size, max_length=max_length, return_scores=True,
            return_no_speech_prob=True, suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        )[0]
        tokens = [token for token in result.sequences_ids[0] if token < tokenizer.eot]
        text = tokenizer.decode(tokens).strip()
        # the returned score is the length-normalised log-probability; Whisper reports it per token+eot
        avg_logprob = float(result.scores[0]) * len(tokens) / (len(tokens) + 1) if result.scores else 0.0
        words = text.split() if spaced else text_units(text)
        looped = (len(tokens) >= tokens_allowed(len(start), max_length) or loop_start(words) is not None
                  or len(words) > 3 + (6 if spaced else 10) * duration)
        return _Decoded(tokens, text, avg_logprob, float(result.no_speech_prob), looped)

    def _trim(self, decoded: _Decoded, tokenizer: Tokenizer) -> _Decoded:
        spaced = language_row(tokenizer.language_code).spaced
        words = decoded.text.split() if spaced else text_units(decoded.text)
        cut = loop_start(words)
        if cut is None:
            return decoded
        text = " ".join(words[:cut]) if spaced else join_units(words[:cut])
        return _Decoded(tokenizer.encode(" " + text), text, decoded.avg_logprob, decoded.no_speech_prob, True)

    def _word_timings(self, decoder: WhisperModel, tokenizer: Tokenizer, tokens: list[int], encoded: Any,
                      content_frames: int, duration: float) -> tuple[WordTiming, ...]:
        aligned = decoder.find_alignment(tokenizer, [tokens], encoded, content_frames)
        spaced = language_row(tokenizer.language_code).spaced
        words: list[WordTiming] = []
        for item in aligned[0] if aligned else []:
            raw = str(item["word"])
            start_ms = 1000.0 * min(float(item["start"]), duration)
            end_ms = 1000.0 * min(float(item["end"]), duration)
            # without spaces (Chinese) every aligned unit is a word, and only punctuation joins the one before
            joins = not raw[:1].isspace() if spaced else not text_units(raw)
            if words and joins:
                # no leading space: punctuation or the rest of a hyphenated word, so the same text word
                last = words[-1]
                words[-1] = WordTiming(last.word + raw, last.start_ms, max(last.end_ms, end_ms), last.probability)
            elif raw.strip():
                probability = item.get("probability")
                words.append(WordTiming(raw.strip(), start_ms, max(start_ms, end_ms),
                                        float(probability) if probability is not None else None))
        return tuple(words)

    def _transcribe_long(self, clip: npt.NDArray[np.float32], *, language: str | None, prompt: str | None,
                         options: DecodeOptions) -> Transcript:
        # turns over 30 s are rare; faster-whisper's own sliding 30 s windows handle them
        segments, info = self.model.transcribe(
            clip, language=language, beam_size=options.beam_size,
            initial_prompt=prompt, word_timestamps=options.word_timestamps,
            condition_on_previous_text=False, vad_filter=False,
        )
        texts: list[str] = []
        words: list[WordTiming] = []
        no_speech: list[float] = []
        logprobs: list[float] = []
        for segment in segments:
            texts.append(segment.text.strip())
            no_speech.append(segment.no_speech_prob)
            logprobs.append(segment.avg_logprob)
            words.extend(WordTiming(w.word.strip(), 1000.0 * w.start, 1000.0 * w.end, w.probability)
                         for w in segment.words or ())
        # as the session joins its slices: a space between words, none next to a Han character ("你好世界")
        text = join_units([t for t in texts if t])
        timed: tuple[WordTiming, ...] = tuple(words)
        if info.language == "zh" and options.simplified:  # as for a short clip: Whisper writes either script
            text, timed = _in_simplified(text, timed)
        return Transcript(
            text=text, language=info.language,
            # one segment with speech makes the clip speech
            no_speech_prob=min(no_speech) if no_speech else 1.0,
            avg_logprob=float(np.mean(logprobs)) if logprobs else 0.0, words=timed,
        )


def _model_languages(model: WhisperModel, multilingual: bool) -> frozenset[str]:
    """The codes ``model`` has a language token for.

    faster-whisper lists all 100 of large-v3 for every multilingual model, but the models before it have 99:
    Cantonese (``yue``, the one large-v3 added) has no token there, so the decoder would be started with no
    language at all and the transcript labelled Cantonese. CTranslate2 says how many the model has.
    """
    if not multilingual:
        return frozenset({"en"})
    codes = frozenset(model.supported_languages)
    count = getattr(model.model, "num_languages", None)
    if isinstance(count, int) and count < len(codes):
        codes -= ADDED_IN_LARGE_V3
    return codes


def _in_simplified(text: str, words: tuple[WordTiming, ...]) -> tuple[str, tuple[WordTiming, ...]]:
    """``text`` and ``words`` in Simplified characters (Whisper writes either script); each word keeps its times
    and probability."""
    return to_simplified(text), tuple(replace(word, word=to_simplified(word.word)) for word in words)
