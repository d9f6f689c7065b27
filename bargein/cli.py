"""The ``bargein`` command: ``serve`` (the server), ``ray-deploy`` (stages on Ray Serve), ``capacity`` (pool sizes)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import uvicorn
from pydantic import ValidationError

from bargein.capacity_plan import add_capacity_arguments, run_capacity
from bargein.config import Settings
from bargein.engines.factory import load_engines
from bargein.server.app import ServerState, create_app
from bargein.server.drain import install_drain
from bargein.server.serving import server_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bargein", description="Real-time interruptible voice agent server")
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_command(commands)
    _deploy_command(commands)
    add_capacity_arguments(commands.add_parser("capacity", help="pool sizes per stage for a number of sessions"))
    return parser


def _serve_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``bargein serve``: where it listens, its engines, who may connect, a session's limits and turn-taking."""
    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    _engine_arguments(serve)
    serve.add_argument("--ws", dest="ws_impl", choices=["auto", "websockets", "websockets-sansio", "wsproto"],
                       help="uvicorn's WebSocket implementation (default auto)")
    serve.add_argument("--ray-stages", type=_stages, help="stages served by Ray Serve, e.g. asr,llm,tts")
    serve.add_argument("--workers", type=int,
                       help="session worker processes on the port (default 1; one per core carries the most)")
    serve.add_argument("--engines-per-worker", dest="shared_engines", action="store_const", const=False,
                       help="with --workers: each session worker loads its own engines (default: one shared set)")
    _access_arguments(serve)
    _limit_arguments(serve)
    _turn_arguments(serve)
    _memory_arguments(serve)
    serve.add_argument("--log-level", default="info")


def _access_arguments(serve: argparse.ArgumentParser) -> None:
    """Who may connect, and what the operator's pages show them."""
    serve.add_argument("--api-key", dest="api_keys", action="append",
                       help="accepted API key (repeatable; ps shows it to every user of the machine: prefer "
                            "--api-key-file or BARGEIN_API_KEYS); none = local-only mode")
    serve.add_argument("--api-key-file", type=Path,
                       help="file of accepted API keys, one a line (blank lines and # comments skipped)")
    serve.add_argument("--allow-origin", dest="allow_origins", action="append",
                       help="browser origin allowed besides the server's own (repeatable; * for any)")
    serve.add_argument("--forwarded-allow-ips",
                       help="proxy addresses whose X-Forwarded-* headers are believed (default: none)")
    serve.add_argument("--api-docs", action="store_const", const=True, help="serve /docs and /openapi.json")
    serve.add_argument("--metrics-key", help="a Bearer key that reads /metrics and /healthz's details besides the "
                       "API keys (prefer BARGEIN_METRICS_KEY: flags show in ps)")


def _limit_arguments(serve: argparse.ArgumentParser) -> None:
    """How long and how much a connection, a session and a client address may take."""
    serve.add_argument("--drain-s", type=float,
                       help="on SIGTERM, seconds live replies may finish before sessions close (default 10)")
    serve.add_argument("--handshake-timeout", dest="handshake_timeout_s", type=float,
                       help="seconds a connection may take to send its request (default 10)")
    serve.add_argument("--max-connections-per-client", type=int,
                       help="sessions (and handshaking connections) per client address (default 16)")
    serve.add_argument("--idle-timeout", dest="idle_timeout_s", type=float,
                       help="close a session in which nothing passed either way for this many seconds "
                            "(default 300, 0: never)")
    serve.add_argument("--max-session", dest="max_session_s", type=float,
                       help="close a session after this many seconds (default 3600, 0: never)")
    serve.add_argument("--events-per-s", type=float, help="client events per second per session (default 200)")
    serve.add_argument("--rate-limit-sustain", dest="rate_limit_sustain_s", type=float,
                       help="close a session held back by the event rate this many seconds in a row (default 10)")
    serve.add_argument("--max-sessions", type=int, help="sessions per worker before new ones are refused")
    # WebRTC calls (docs/webrtc.md): the STUN/TURN servers a call's answer gathers candidates with
    serve.add_argument("--ice-server", dest="ice_servers", action="append",
                       help="a STUN/TURN URL for WebRTC calls (repeatable; the TURN password only from "
                            "BARGEIN_ICE_CREDENTIAL)")
    serve.add_argument("--ice-username", help="the TURN servers' username")


def _turn_arguments(serve: argparse.ArgumentParser) -> None:
    """A new session's turn-taking and tools."""
    serve.add_argument("--no-listen", dest="listen", action="store_const", const=False,
                       help="cancel a reply at any speech onset instead of pausing it until the segment is classified")
    serve.add_argument("--turn-detection", choices=["server_vad", "semantic_vad"],
                       help="a new session's turn detection (default server_vad: the tiered endpoint, "
                            "500 ms of silence unless Smart Turn and the words agree; see --plain-silence)")
    serve.add_argument("--plain-silence", dest="tiered_endpoint", action="store_const", const=False,
                       help="server_vad waits plain silence (500 ms unless a client sets it), without the tiered "
                            "endpoint's Smart Turn at pauses: more sessions per core, slower turns")
    serve.add_argument("--no-text-end", dest="text_end_estimate", action="store_const", const=False,
                       help="the tiered endpoint without the language model's estimate that a pause's words end "
                            "the sentence")
    serve.add_argument("--turn-model-cpu-share", type=float,
                       help="share of one core the tiered endpoint's Smart Turn scores may use; past it a pause "
                            "waits plain silence (default 0.25; the number of cores: no limit)")
    serve.add_argument("--no-builtin-tools", dest="builtin_tools", action="store_const", const=False,
                       help="do not offer the built-in clock, calendar, calculator and unit tools")


def _memory_arguments(serve: argparse.ArgumentParser) -> None:
    """Long-term memory across sessions, and where the server keeps its data."""
    serve.add_argument("--memory", dest="memory", action="store_const", const=True,
                       help="remember what users tell about themselves across sessions (off by default)")
    serve.add_argument("--no-memory", dest="memory", action="store_const", const=False,
                       help="remember nothing across sessions (the default)")
    serve.add_argument("--memory-url", help="keep memories in PostgreSQL (postgresql://...; default: SQLite in "
                       "--data-dir)")
    serve.add_argument("--data-dir", help="the server's data directory (default ~/.local/share/bargein)")


def _deploy_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``bargein ray-deploy``: the stages as Ray Serve applications, with the engine flags of ``serve``."""
    deploy = commands.add_parser("ray-deploy", help="run stages as Ray Serve applications on a Ray cluster")
    _engine_arguments(deploy)
    deploy.add_argument("--stages", default="vad,asr,llm,tts", help="comma-separated stages to deploy")
    deploy.add_argument("--replicas", default="", help="replicas per stage, e.g. asr=2,llm=4 (default 1 each)")
    deploy.add_argument("--log-level", default="info")


def _engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engines", choices=["default", "fake", "instant"],
                        help="default: embedded models; fake/instant: deterministic fakes")
    parser.add_argument("--asr-model", help="tiny.en (default), base, or a local CTranslate2 folder")
    parser.add_argument("--llm-model", help="embedded GGUF name (qwen2.5-coder-0.5b, smollm2-135m, "
                        "qwen2.5-coder-1.5b with the llm-1.5b extra) or path, or the model name at --llm-url")
    parser.add_argument("--llm-sequences", type=int,
                        help="embedded LLM: decode up to N sessions' replies together in one batch (default 1: "
                        "one reply at a time)")
    parser.add_argument("--llm-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--vision", choices=["auto", "notes", "native"],
                        help="native: camera frames go to a vision model behind --llm-url as images; notes: the "
                        "offline scene note goes as text; auto (default): native with --llm-url, else notes")
    parser.add_argument("--vision-family", choices=["qwen2.5-vl", "openai", "llava", "internvl"],
                        help="whose image-token math resizes frames sent natively (default qwen2.5-vl)")
    parser.add_argument("--image-token-budget", type=int, help="image tokens one turn may spend (default 1280)")
    parser.add_argument("--llm-in-process", dest="llm_process", action="store_const", const=False,
                        help="run the embedded LLM in the server process (no crash isolation; saves ~0.1 ms a token)")
    parser.add_argument("--asr-in-process", dest="asr_process", action="store_const", const=False,
                        help="run Whisper in the server process (no crash isolation)")
    parser.add_argument("--tts-in-process", dest="tts_process", action="store_const", const=False,
                        help="run Kokoro in the server process (no crash isolation)")
    parser.add_argument("--tts", dest="tts_engine", choices=["kokoro", "flite"], help="speech engine")
    parser.add_argument("--language", help="sessions' default language: en (default) or zh (Mandarin)")
    parser.add_argument("--mandarin", action="store_const", const=True,
                        help="also recognise and speak Mandarin (needs scripts/setup.sh serve --mandarin)")
    parser.add_argument("--ray-address", help="Ray cluster of the remote stages: auto, HOST:6379, ray://HOST:10001")
    parser.add_argument("--ray-app-prefix", help="Serve application names are PREFIX-vad, PREFIX-asr, ...")
    parser.add_argument("--ray-insecure", action="store_const", const=True,
                        help="accept a Ray cluster without token authentication (anyone who reaches it can run "
                             "code on it; default: refuse it)")


def _stages(text: str) -> list[str]:
    stages = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [stage for stage in stages if stage not in ("vad", "asr", "llm", "tts")]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown stage(s) {', '.join(unknown)}: choose from vad, asr, llm, tts")
    return stages


def _ray_deploy(args: argparse.Namespace, settings: Settings) -> int:
    import ray

    from bargein.engines.remote.deployments import deploy
    from bargein.engines.remote.ray_auth import RayAuthError, check_cluster

    pairs = (item.partition("=") for item in args.replicas.split(",") if item)
    replicas = {name.strip(): int(count) for name, _, count in pairs}
    address = settings.ray_address or "auto"
    try:
        check_cluster(address, insecure=settings.ray_insecure)
    except RayAuthError as error:
        print(f"bargein: {error}", file=sys.stderr)
        return 2
    ray.init(address=address, namespace="serve", log_to_driver=False)
    deploy(settings, _stages(args.stages), replicas)  # type: ignore[arg-type]
    print(f"deployed {args.stages} as Ray Serve applications {settings.ray_app_prefix}-<stage>", flush=True)
    return 0


def api_keys_from_file(path: Path) -> list[str]:
    """The keys of an ``--api-key-file``: one a line; blank lines and lines starting with ``#`` are skipped."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _warn_of_secrets_in_argv(args: argparse.Namespace) -> None:
    """Say which secrets the command line carries, where ``ps`` shows them to every user of this machine, and
    where each belongs instead (a file or the environment)."""
    shown = {"--api-key": ("--api-key-file or BARGEIN_API_KEYS", bool(getattr(args, "api_keys", None))),
             "--metrics-key": ("BARGEIN_METRICS_KEY", bool(getattr(args, "metrics_key", None))),
             "--memory-url": ("BARGEIN_MEMORY_URL", _has_password(getattr(args, "memory_url", None))),
             "--llm-url": ("BARGEIN_LLM_URL", _has_password(getattr(args, "llm_url", None)))}
    for flag, (instead, given) in shown.items():
        if given:
            print(f"bargein: warning: {flag} puts a secret on the command line, where ps shows it to every user "
                  f"of this machine; use {instead} instead", file=sys.stderr, flush=True)


def _has_password(url: str | None) -> bool:
    """True when ``url`` carries a password (``scheme://user:password@host``, or a query's ``password=``,
    ``api_key=``, ``token=``: libpq and some LLM servers take them there); a URL that does not parse is taken
    to carry one when it names a user (it is not shown, so it is not known not to)."""
    if url is None:
        return False
    try:
        parts = urlsplit(url)
        return parts.password is not None or any(
            word in name.lower() for name, _ in parse_qsl(parts.query) for word in _SECRET_QUERY_WORDS)
    except ValueError:
        return "@" in url


_SECRET_QUERY_WORDS = ("pass", "key", "token", "secret")


def _key_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The keys the command line gives (a file's, then any ``--api-key``'s), warning about secrets in argv."""
    _warn_of_secrets_in_argv(args)
    path: Path | None = getattr(args, "api_key_file", None)
    if path is None:
        return {"api_keys": args.api_keys} if getattr(args, "api_keys", None) else {}
    keys = api_keys_from_file(path)
    if not keys:  # an operator who named a key file wants keys: not the local-only mode no key means
        raise OSError(f"{path} holds no key")
    return {"api_keys": [*keys, *(args.api_keys or [])]}


def _announce(state: ServerState) -> None:
    settings = state.settings
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    engines = state.engines.description if state.engines else {}
    for stage, origin in engines.items():
        print(f"  {stage:4s} {origin}", flush=True)
    if state.load_seconds is not None:
        print(f"  models ready in {state.load_seconds:.1f} s", flush=True)
    mode = "local-only (no API key)" if settings.local_only else f"{len(settings.api_keys)} API key(s)"
    print(f"bargein is ready: open http://{host}:{settings.port}/  "
          f"(Realtime: ws://{host}:{settings.port}/v1/realtime, {mode})", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bargein`` command."""
    args = _parser().parse_args(argv)
    if args.command == "capacity":
        return run_capacity(args)
    local = ("command", "log_level", "stages", "replicas", "api_keys", "api_key_file")
    overrides = {key: value for key, value in vars(args).items() if key not in local and value is not None}
    try:
        settings = Settings(**overrides, **_key_overrides(args))
    except OSError as error:
        print(f"bargein: --api-key-file: {error}", file=sys.stderr)
        return 2
    except ValidationError as error:
        for problem in error.errors():
            print(f"bargein: {'.'.join(map(str, problem['loc']))}: {problem['msg']}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "ray-deploy":
        return _ray_deploy(args, settings)
    if settings.workers > 1:
        from bargein.server.workers import run_workers

        run_workers(settings, args.log_level)
        return 0
    app = create_app(settings, loader=load_engines, on_ready=_announce)
    server = uvicorn.Server(server_config(app, settings, log_level=args.log_level))
    state: ServerState = app.state.bargein
    install_drain(server, state.drain)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
