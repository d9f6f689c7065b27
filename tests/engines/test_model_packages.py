"""The table of model packages (:mod:`bargein.engines.model_packages`) against pyproject.toml and docs/models.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from bargein.engines.model_packages import MODEL_PACKAGES, markdown_table, model_distributions

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = frozenset({
    "fastapi", "uvicorn", "websockets", "httpx", "numpy", "soxr", "onnxruntime", "pydantic", "pydantic-settings",
    "tzdata", "prometheus-client", "opentelemetry-api", "opentelemetry-sdk", "faster-whisper", "llama-cpp-python",
    "opencc-python-reimplemented", "ray", "pillow", "opencv-python", "psycopg", "aiortc",
})
"""Runtime dependencies that carry no model weights (code, or tables that are not a model)."""
TOOLING_EXTRAS = frozenset({"test", "bench"})


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].strip().lower()


def _runtime_requirements() -> dict[str, str]:
    """Each runtime dependency's name, and what installs it: ``bargein`` or ``bargein[extra]``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = {_name(requirement): "bargein" for requirement in project["dependencies"]}
    for extra, requirements in project["optional-dependencies"].items():
        if extra not in TOOLING_EXTRAS:
            found.update({_name(r): f"bargein[{extra}]" for r in requirements if not r.startswith("bargein")})
    return found


def test_every_model_dependency_is_in_the_table() -> None:
    unlisted = sorted(set(_runtime_requirements()) - LIBRARIES - model_distributions())
    assert unlisted == [], f"dependencies neither in MODEL_PACKAGES nor known libraries: {unlisted}"


def test_every_row_is_installed_the_way_it_says() -> None:
    requirements = _runtime_requirements()
    wrong = [(row.model, name, requirements.get(name)) for row in MODEL_PACKAGES for name in row.distributions
             if row.installed_by != "scripts/setup.sh" and requirements.get(name) != row.installed_by]
    assert wrong == []


def test_every_row_names_its_licence_and_pinned_files() -> None:
    for row in MODEL_PACKAGES:
        assert row.licence and row.weights, row.model
        assert all(re.fullmatch(r"[0-9a-f]{64}", weight.sha256) for weight in row.weights), row.model


def test_the_split_models_list_every_part() -> None:
    parts = {row.model: len(row.distributions) for row in MODEL_PACKAGES}
    assert parts["Qwen2.5-Coder-0.5B-Instruct AWQ Q4_K_M (GGUF)"] == 6
    assert parts["Qwen2.5-Coder-1.5B-Instruct (GGUF)"] == 22


def test_docs_models_md_shows_the_table_as_it_is() -> None:
    assert markdown_table() in (ROOT / "docs" / "models.md").read_text(encoding="utf-8"), \
        "docs/models.md is out of date: python -m bargein.engines.model_packages prints the table"
