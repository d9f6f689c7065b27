"""Edge inputs of the ``bargein`` command: the capacity planner's flags and costs file, the server's settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bargein.capacity_plan import CostsFileError, load_costs
from bargein.cli import main
from bargein.config import Settings


@pytest.mark.parametrize("flags", [
    ["--max-utilisation", "0"], ["--max-utilisation", "-0.5"], ["--max-utilisation", "1.5"],
    ["--max-utilisation", "nan"], ["--cores-per-machine", "0"], ["--sessions", "-5"],
    ["--p95-first-audio", "0"], ["--turns-per-minute", "-1"], ["--reply-tokens", "inf"],
])
def test_capacity_refuses_flags_that_make_no_plan(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # a zero utilisation or machine size divided by zero; a negative count printed negative utilisations
    with pytest.raises(SystemExit) as exited:
        main(["capacity", "--sessions", "10", *flags])
    assert exited.value.code == 2
    assert "outside" in capsys.readouterr().err


def test_capacity_of_no_sessions_is_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "--sessions", "0"]) == 0
    assert "machines" in capsys.readouterr().out


@pytest.mark.parametrize("content", ["{bad", "[1, 2]", '{"llm_us_per_token": "fast"}',
                                     '{"llm_us_per_token": -5}', '{"llm_us_per_token": NaN}',
                                     '{"llm_us_per_token": true}'])
def test_a_bad_costs_file_is_said_not_a_traceback(tmp_path: Path, content: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    costs = tmp_path / "costs.json"
    costs.write_text(content)
    with pytest.raises(CostsFileError):
        load_costs(str(costs))
    assert main(["capacity", "--sessions", "10", "--costs", str(costs)]) == 2
    assert "costs file" in capsys.readouterr().err


def test_a_missing_costs_file_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "--sessions", "10", "--costs", str(tmp_path / "absent.json")]) == 2
    assert "absent.json" in capsys.readouterr().err


def test_a_good_costs_file_still_counts(tmp_path: Path) -> None:
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"llm_us_per_token": 2000, "vad_us_per_20ms": 0, "unknown": "ignored"}))
    loaded = load_costs(str(costs))
    assert loaded.llm_us_per_token == 2000.0 and loaded.vad_us_per_20ms == 0.0


@pytest.mark.parametrize("field, value", [("workers", 0), ("workers", -2), ("port", 70000), ("port", -1),
                                          ("max_sessions", 0), ("max_message_bytes", 0), ("max_queue_depth", -1),
                                          ("max_loop_lag_ms", 0), ("ray_timeout_s", 0)])
def test_settings_refuse_sizes_that_cannot_work(field: str, value: int) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: value})


def test_a_bad_size_from_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGEIN_WORKERS", "0")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.setenv("BARGEIN_WORKERS", "3")
    assert Settings().workers == 3


@pytest.mark.parametrize("flags", [["--workers", "0"], ["--port", "70000"], ["--max-sessions", "0"]])
def test_serve_exits_2_on_a_bad_size_before_loading_anything(flags: list[str], capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # before: --workers 0 quietly served one process, --port 70000 announced an unreachable address
    def must_not_serve(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the server was started with settings that cannot work")

    monkeypatch.setattr("bargein.cli.create_app", must_not_serve)
    monkeypatch.setattr("bargein.server.workers.run_workers", must_not_serve)
    assert main(["serve", "--engines", "fake", *flags]) == 2
    assert flags[0].lstrip("-").replace("-", "_") in capsys.readouterr().err


def test_settings_keep_their_boundaries() -> None:
    settings = Settings(port=0, workers=1, max_sessions=1, max_queue_depth=0)
    assert (settings.port, settings.workers, settings.max_sessions, settings.max_queue_depth) == (0, 1, 1, 0)


class _Served(Exception):
    """Raised by a stand-in for the app factory, carrying the settings the command would serve with."""


def _served_settings(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    def capture(settings: Settings, **_kwargs: object) -> None:
        raise _Served(settings)

    monkeypatch.setattr("bargein.cli.create_app", capture)
    with pytest.raises(_Served) as served:
        main(argv)
    settings = served.value.args[0]
    assert isinstance(settings, Settings)
    return settings


def test_keys_come_from_a_file_and_the_command_line_holds_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# the backend's key\nsk-one\n\n  sk-two  \n")
    settings = _served_settings(["serve", "--engines", "fake", "--api-key-file", str(keys)], monkeypatch)
    assert settings.api_keys == ["sk-one", "sk-two"]
    assert "warning" not in capsys.readouterr().err


def test_a_key_on_the_command_line_is_warned_about(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    settings = _served_settings(["serve", "--engines", "fake", "--api-key", "sk-visible"], monkeypatch)
    assert settings.api_keys == ["sk-visible"]
    assert "--api-key-file" in capsys.readouterr().err


@pytest.mark.parametrize("flags, warned", [
    (["--metrics-key", "mk-visible"], "--metrics-key"),
    (["--memory-url", "postgresql://bargein:hunter2@db/memories"], "--memory-url"),
    (["--llm-url", "http://user:hunter2@127.0.0.1:8080/v1"], "--llm-url"),
    (["--memory-url", "postgresql://bargein@db/memories?password=hunter2"], "--memory-url"),  # libpq's own form
    (["--llm-url", "http://127.0.0.1:8080/v1?api_key=hunter2"], "--llm-url"),
    (["--llm-url", "http://user:hunter2@[::1/v1"], "--llm-url"),  # a malformed URL raised out of the warning
])
def test_every_secret_on_the_command_line_is_warned_about(flags: list[str], warned: str,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # only --api-key was warned about: a metrics key or a database password in argv went by silently
    _served_settings(["serve", "--engines", "fake", *flags], monkeypatch)
    err = capsys.readouterr().err
    assert f"warning: {warned} puts a secret" in err and "BARGEIN_" in err


def test_a_url_without_a_password_is_not_warned_about(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _served_settings(["serve", "--engines", "fake", "--llm-url", "http://127.0.0.1:8080/v1",
                      "--memory-url", "postgresql://db/memories?sslmode=require"], monkeypatch)
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, "# no key here\n\n"])
def test_a_missing_or_empty_key_file_refuses_to_start(content: str | None, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys"
    if content is not None:
        keys.write_text(content)
    assert main(["serve", "--engines", "fake", "--api-key-file", str(keys)]) == 2  # not local-only mode
    assert "--api-key-file" in capsys.readouterr().err
