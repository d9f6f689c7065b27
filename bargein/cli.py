"""``bargein serve``: start the server with its embedded models and print where to reach it."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from bargein.config import Settings
from bargein.engines.factory import load_engines
from bargein.server.app import ServerState, create_app


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bargein", description="Real-time interruptible voice agent server")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--engines", choices=["default", "fake", "instant"],
                       help="default: embedded models; fake/instant: deterministic fakes")
    serve.add_argument("--asr-model", help="tiny.en (default), base, or a local CTranslate2 folder")
    serve.add_argument("--llm-model", help="embedded GGUF name or path, or the model name at --llm-url")
    serve.add_argument("--llm-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    serve.add_argument("--tts", dest="tts_engine", choices=["kokoro", "flite"], help="speech engine")
    serve.add_argument("--api-key", dest="api_keys", action="append",
                       help="accepted API key (repeatable); none = local-only mode")
    serve.add_argument("--no-listen", dest="listen", action="store_const", const=False,
                       help="cancel a reply at any speech onset instead of pausing it until the segment is classified")
    serve.add_argument("--no-builtin-tools", dest="builtin_tools", action="store_const", const=False,
                       help="do not offer the built-in clock, calendar, calculator and unit tools")
    serve.add_argument("--log-level", default="info")
    return parser


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
    overrides = {key: value for key, value in vars(args).items()
                 if key not in ("command", "log_level") and value is not None}
    settings = Settings(**overrides)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings, loader=load_engines, on_ready=_announce)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level,
                ws_max_size=8 * settings.max_message_bytes, ws_ping_interval=20, ws_ping_timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
