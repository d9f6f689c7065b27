"""Which embedded-LLM jobs are urgent (pure logic: no model)."""

from __future__ import annotations

from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS
from bargein.engines.think.llama_jobs import Job
from bargein.values import ChatMessage, GenerationOptions

TOOLS = ({"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}},)


def job(options: GenerationOptions | None = None, *, prefill_only: bool = False) -> Job:
    sent: list[object] = []
    return Job([ChatMessage("user", "Hi")], options or GenerationOptions(), sent.append, prefill_only=prefill_only)


def test_a_reply_is_urgent_until_its_first_clause_is_whole() -> None:
    reply = job()
    assert reply.urgent
    words = ["The", " capital", " city", " of", " France", " is", " Paris"]
    for piece in words[:FIRST_CLAUSE_WORDS]:
        reply.send_text(piece)
        assert reply.urgent, piece  # the clause's words are there, but the last is not known to be whole yet
    reply.send_text(words[FIRST_CLAUSE_WORDS])
    assert not reply.urgent and reply.stats.first_clause_s is not None


def test_a_sentence_end_makes_the_first_clause_whole() -> None:
    reply = job()
    reply.send_text("Yes.")
    assert reply.urgent  # the period ends a sentence only once what follows it is known
    reply.send_text(" I")
    assert not reply.urgent


def test_a_tool_call_stays_urgent_to_its_end_and_a_prefill_never_is() -> None:
    call = job(GenerationOptions(tools=TOOLS))
    for piece in ["<tool_call>", "\n", '{"name": "get_time",', ' "arguments": {}}', "\n", "</tool_call>"]:
        call.send_text(piece)
    assert call.urgent and call.stats.first_clause_s is None
    plain = job(GenerationOptions())
    plain.send_text("<b> bold words are here")  # without tools on offer, text is text
    assert not plain.urgent
    assert not job(prefill_only=True).urgent


def test_replies_already_speaking_get_a_turn_once_first_clauses_kept_them_waiting_long_enough() -> None:
    from bargein.engines.think.llama_jobs import TAIL_GRACE_S, serve_later_first

    assert not serve_later_first(True, None, 10.0) and not serve_later_first(False, None, 10.0)  # none waits
    assert serve_later_first(False, 10.0, 10.0)  # nothing urgent: serve them
    assert not serve_later_first(True, 10.0, 10.0 + TAIL_GRACE_S / 2)  # first clauses first...
    assert serve_later_first(True, 10.0, 10.0 + TAIL_GRACE_S)  # ...but not for ever


def test_a_job_names_its_session_by_a_key_that_holds_no_session_alive() -> None:
    # a job's owner travels into the KV snapshots the engine keeps: it held the session object itself, so an
    # ended session (its history, its audio) stayed in memory until its snapshots were evicted
    import contextvars
    import gc
    import weakref

    from bargein.engines.fair import current_owner

    class Session:
        """Stands for a session: anything hashable and weakly referable."""

    session = Session()
    context = contextvars.copy_context()
    context.run(current_owner.set, session)
    first, second = context.run(job), context.run(job)
    gone = weakref.ref(session)
    context.run(current_owner.set, None)  # the session ended: only the jobs (and what the engine kept) remain
    del session
    gc.collect()
    assert gone() is None
    assert isinstance(first.owner, int) and first.owner == second.owner  # one session, one key, for its life
    later = Session()
    context.run(current_owner.set, later)
    assert context.run(job).owner != first.owner  # never the ended session's key


def test_a_job_served_through_a_shared_engine_hub_keeps_its_sessions_key() -> None:
    # behind a hub the owner is (hub client, session key), a tuple rebuilt for every request: its id() was a
    # new key each time (the session's own snapshots never matched) that a later request of another session
    # could get again (that session would then be served this one's private snapshot whole)
    import contextvars

    from bargein.engines.fair import current_owner

    def job_of(owner: tuple[int, int]) -> Job:
        context = contextvars.copy_context()
        context.run(current_owner.set, owner)
        return context.run(job)

    requests = [(1, 7), (1, 7), (2, 7)]
    requests = [tuple(list(owner)) for owner in requests]  # each a tuple of its own, as each frame read builds
    first, again, other = (job_of(owner) for owner in requests)
    assert first.owner == again.owner  # the same session, every request
    assert other.owner != first.owner  # another session worker's session 7
