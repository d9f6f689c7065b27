"""The ledger export: served to the operator only, and what ``bargein capacity --ledger`` sizes pools from."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bargein.capacity_plan import CostsFileError, StageCosts, load_costs, load_ledger
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics.cost_meter import STAGE_CPU
from bargein.metrics.ledger_export import stage_costs
from bargein.metrics.turn_cost import PROCESS_COST
from tests.support.server import free_port, running_server


def test_the_export_needs_the_operator_key_and_holds_the_stage_cpu_and_the_work() -> None:
    STAGE_CPU.add("asr", 0.5)
    PROCESS_COST.add("audio_in_s", 2.0)
    settings = Settings(port=free_port(), api_keys=["sk-right"], metrics_key="mk-scraper")
    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    with running_server(engines, settings) as host:
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            assert httpx.get(f"http://{host}/v1/ledger/export", headers=headers).status_code == 401
        for key in ("sk-right", "mk-scraper"):
            answer = httpx.get(f"http://{host}/v1/ledger/export", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200
            export = answer.json()
            assert export["kind"] == "bargein.ledger"
            assert export["stages"]["asr"]["cpu_s"] >= 0.5 and export["totals"]["audio_in_s"] >= 2.0


def _export(tmp_path: Path) -> Path:
    export = {"kind": "bargein.ledger", "version": 1,
              "stages": {"vad": {"cpu_s": 0.06, "background_cpu_s": 0.0, "requests": 3000},
                         "asr": {"cpu_s": 3.0, "background_cpu_s": 0.0, "requests": 40},
                         "llm": {"cpu_s": 10.0, "background_cpu_s": 2.0, "requests": 10},
                         "tts": {"cpu_s": 0.0, "background_cpu_s": 0.0, "requests": 0}},
              "totals": {"listened_s": 60.0, "audio_in_s": 20.0, "generated_tokens": 400.0, "audio_out_s": 30.0},
              "server_cpu_s": 1.26}
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(export))
    return path


def test_without_the_server_cpu_the_session_workers_are_sized_from_the_measured_session_stage() -> None:
    export = {"kind": "bargein.ledger", "version": 1,
              "stages": {"session": {"cpu_s": 0.9, "background_cpu_s": 0.0, "requests": 9000}},
              "totals": {"listened_s": 60.0}}
    assert stage_costs(export)["session_us_per_20ms"] == pytest.approx(300.0)  # 0.9 s over 3000 twenties
    # with the server's CPU, the remainder (the session stage and what no stage holds) sizes them
    assert stage_costs({**export, "server_cpu_s": 1.2})["session_us_per_20ms"] == pytest.approx(400.0)


def test_capacity_reads_the_measured_costs_and_keeps_the_constants_for_stages_not_run(tmp_path: Path) -> None:
    costs = load_ledger(str(_export(tmp_path)))
    assert costs.vad_us_per_20ms == pytest.approx(20.0)  # 0.06 s over 3000 twenties
    assert costs.asr_us_per_20ms_speech == pytest.approx(3000.0)
    assert costs.llm_us_per_token == pytest.approx(30_000.0)  # the workers' background counts
    assert costs.tts_us_per_20ms == StageCosts().tts_us_per_20ms  # no TTS CPU measured: the constant
    # the server's own CPU less the VAD's, per 20 ms heard: (1.26 - 0.06) s over 3000 twenties
    assert costs.session_us_per_20ms == pytest.approx(400.0)
    costs_file = tmp_path / "costs.json"
    costs_file.write_text(json.dumps({"llm_us_per_token": 1.0}))
    overridden = load_costs(str(costs_file), costs)
    assert overridden.llm_us_per_token == 1.0 and overridden.asr_us_per_20ms_speech == pytest.approx(3000.0)


def test_a_file_that_is_not_a_ledger_export_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"vad_us_per_20ms": 3}))
    with pytest.raises(CostsFileError, match="not a bargein ledger export"):
        load_ledger(str(path))
    assert stage_costs({"kind": "bargein.ledger"}) == {}


def test_work_outside_any_session_is_no_stage_cost() -> None:
    from bargein.metrics.cost_meter import charge

    before = STAGE_CPU.total("warm-up-test")
    charge("warm-up-test", None, 2.0)  # the start-up warm-up takes no bill
    assert STAGE_CPU.total("warm-up-test") == before
