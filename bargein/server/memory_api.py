"""The memory admin endpoint and how a server opens its memory store and decides a session's scope.

``GET /v1/memory`` lists a scope's memories as JSON (``?export=1``: as a download), ``DELETE /v1/memory`` forgets
them all and ``DELETE /v1/memory/{id}`` one. Every call needs a server key (or a loopback client in local-only
mode, which is how the page shows and forgets the local user's memories): the key's own scope, or with
``?memory_scope=NAME`` the scope a backend bound into its client secrets.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bargein.config import Settings
from bargein.memory.session_memory import SessionMemory
from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.memory.store import LOCAL_SCOPE, Bounds, MemoryStore, MemoryStoreError, bound_scope, key_scope
from bargein.server.secrets_api import server_key_allowed
from bargein.tools.memory_tools import memory_tools
from bargein.tools.registry import ToolRegistry, default_registry

MEMORY_FILE = "memory.sqlite3"


async def open_memory_store(settings: Settings) -> MemoryStore | None:
    """The server's memory store (None with ``--no-memory``): PostgreSQL at ``--memory-url``, else SQLite."""
    if not settings.memory:
        return None
    bounds = Bounds(settings.memory_max_items, settings.memory_max_bytes)
    if settings.memory_url:
        from bargein.memory.pg_store import PostgresMemoryStore

        return await PostgresMemoryStore.open(settings.memory_url, bounds)
    return await asyncio.to_thread(_open_sqlite, settings.data_dir, bounds)


def _open_sqlite(data_dir: str, bounds: Bounds) -> SqliteMemoryStore:
    directory = os.path.expanduser(data_dir)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return SqliteMemoryStore(os.path.join(directory, MEMORY_FILE), bounds)


def warm_tools(settings: Settings, store: MemoryStore | None) -> ToolRegistry | None:
    """The tools a default session is offered (with the memory tools when memory is on), to warm its prompt."""
    extra = memory_tools(SessionMemory(store, LOCAL_SCOPE, list)) if store is not None else ()
    if settings.builtin_tools:
        return default_registry(extra=extra)
    return ToolRegistry(extra) if extra else None


def presented_scope(request: Request, settings: Settings) -> str | None:
    """The scope a server-key request manages (None: not allowed or a malformed ``memory_scope``)."""
    if not server_key_allowed(request, settings):
        return None
    bound = request.query_params.get("memory_scope")
    if bound is not None:
        try:
            return bound_scope(bound)
        except ValueError:
            return None
    if settings.local_only:
        return LOCAL_SCOPE
    offered = request.headers.get("authorization", "")[7:].strip()
    matching = [key for key in settings.api_keys if hmac.compare_digest(offered.encode(), key.encode())]
    return key_scope(matching[0]) if matching else None


def _refused() -> JSONResponse:
    return JSONResponse({"error": {"message": "a server API key is required (Authorization: Bearer); "
                                   "memory_scope: 1 to 128 letters, digits and . _ : @ -",
                                   "type": "invalid_request_error", "code": "invalid_api_key"}}, status_code=401)


def _unavailable(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "server_error", "code": "memory_unavailable"}},
                        status_code=503)


def add_memory_routes(app: FastAPI, settings: Settings, store: Any) -> None:
    """Mount the memory admin endpoint; ``store()`` gives the open store (None: memory is off)."""

    @app.get("/v1/memory")
    async def list_memories(request: Request) -> JSONResponse:
        scope = presented_scope(request, settings)
        if scope is None:
            return _refused()
        if (memory := store()) is None:
            return _unavailable("memory is off on this server (--no-memory)")
        try:
            found = await memory.entries(scope)
        except MemoryStoreError as error:
            return _unavailable(str(error))
        body = {"object": "list", "data": [{"id": m.id, "topic": m.topic, "text": m.text,
                                            "updated_at": int(m.updated_at)} for m in found]}
        headers = {"Content-Disposition": 'attachment; filename="memories.json"'} \
            if request.query_params.get("export") else None
        return JSONResponse(body, headers=headers)

    @app.delete("/v1/memory")
    async def clear_memories(request: Request) -> JSONResponse:
        return await _delete(request, None)

    @app.delete("/v1/memory/{memory_id}")
    async def delete_memory(request: Request, memory_id: int) -> JSONResponse:
        return await _delete(request, memory_id)

    async def _delete(request: Request, memory_id: int | None) -> JSONResponse:
        scope = presented_scope(request, settings)
        if scope is None:
            return _refused()
        if (memory := store()) is None:
            return _unavailable("memory is off on this server (--no-memory)")
        try:
            gone = await (memory.clear(scope) if memory_id is None else memory.forget(scope, memory_id=memory_id))
        except MemoryStoreError as error:
            return _unavailable(str(error))
        return JSONResponse({"deleted": gone})
