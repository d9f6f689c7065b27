"""One Realtime conversation: the pure turn core (``core/``) and the shell that carries out its decisions.

``docs/design.md`` describes the split; :class:`bargein.session.realtime_session.RealtimeSession` is the entry.
"""
