"""A client's ``conversation.item.create``: a message (its audio clips transcribed), a function call, or the
output that answers one; each checked against the conversation, added, and answered with its server events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bargein.audio.codecs import AudioFormatError, decode_base64
from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import event
from bargein.session.audio_input import AudioInput
from bargein.session.history import Conversation, client_item, function_item
from bargein.session.outbound import Outgoing
from bargein.session.transcription import Transcriber


class ClientItems:
    """Adds the items a client creates to ``conversation``; ``answered`` is told of each function call's output."""

    def __init__(self, conversation: Conversation, emit: Callable[[Outgoing], None], transcriber: Transcriber,
                 audio_in: AudioInput, answered: Callable[[str], object]) -> None:
        self.conversation = conversation
        self.emit = emit
        self.transcriber = transcriber
        self.audio_in = audio_in
        self.answered = answered

    def create(self, message: ce.ConversationItemCreate) -> None:
        """Add the item; a message's audio clips are transcribed into it as they are recognised."""
        if not isinstance(message.item, ce.MessageItem):
            self._create_function_item(message)
            return
        item, clips = client_item(message.item, lambda audio: self._decode_item_audio(audio, message.event_id),
                                  event_id=message.event_id)
        previous = self.conversation.add(item, previous_item_id=message.previous_item_id,
                                         event_id=message.event_id, from_client=True)
        self.emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        if not clips:
            self.emit(Outgoing(event("conversation.item.done", previous_item_id=previous, item=item.wire())))
        if item.role == "user" and any(p.type == "input_text" for p in item.parts):
            # typed input is VITA's third state: always addressed to the agent
            self.emit(Outgoing(event("bargein.listen.segment", item_id=item.id, decision="text",
                                     reasons=["typed input"], action="keep")))
        for index, clip in clips:
            self.transcriber.start(item, clip, content_index=index)

    def _create_function_item(self, message: ce.ConversationItemCreate) -> None:
        """A client's function call, or its answer to one: the output must name a call of this conversation."""
        assert not isinstance(message.item, ce.MessageItem)
        item = function_item(message.item)
        if item.type == "function_call" and item.call is not None \
                and self.conversation.function_call(item.call.call_id) is not None:
            raise ProtocolError(f"the conversation already holds a function_call with call_id "
                                f"{item.call.call_id!r}: an output could not tell them apart", code="invalid_value",
                                param="item.call_id", event_id=message.event_id)
        if item.type == "function_call_output" and item.call is not None:
            call_id = item.call.call_id
            if self.conversation.function_call(call_id) is None:
                raise ProtocolError(f"no function_call with call_id {call_id!r} in this conversation",
                                    code="invalid_value", param="item.call_id", event_id=message.event_id)
            if any(other.type == "function_call_output" and other.call is not None and other.call.call_id == call_id
                   for other in self.conversation):
                raise ProtocolError(f"the function call {call_id!r} already has an output", code="invalid_value",
                                    param="item.call_id", event_id=message.event_id)
        previous = self.conversation.add(item, previous_item_id=message.previous_item_id, event_id=message.event_id,
                                         from_client=True)
        if item.type == "function_call_output" and item.call is not None:  # in the conversation: now it is answered
            self.answered(item.call.call_id)
        self.emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        self.emit(Outgoing(event("conversation.item.done", previous_item_id=previous, item=item.wire())))

    def _decode_item_audio(self, audio: str, event_id: str | None) -> Any:
        try:
            return self.audio_in.decode_clip(decode_base64(audio))
        except AudioFormatError as error:
            raise ProtocolError(str(error), code="invalid_audio", param="item.content.audio",
                                event_id=event_id) from None
