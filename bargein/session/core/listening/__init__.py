"""The listening policy: is a segment the user spoke a query addressed to the agent, or noise; over a reply, does
it cut the reply short? One place to read why a segment cut the reply and why it did not.

``classifier.py`` decides (its rules in decision order); over a reply in English it hands the segment to
``decide.py`` (rules, then the fitted interruption model of ``model.py``/``features.py``/``weights.json``, checked
by the spoken-command model of ``keyword.py``). ``segment_book.py`` keeps each segment's frames until its verdict,
``early_cut.py`` says when a command heard before the endpoint cuts a paused reply, and ``over_reply.py``,
``own_voice.py`` and ``user_words.py`` tell the user's own voice from the room's.
"""
