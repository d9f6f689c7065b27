"""WebRTC calls (OpenAI's GA shape): ``POST /v1/realtime/calls`` answers an SDP offer, audio travels as Opus RTP
tracks and the Realtime events on the ``oai-events`` data channel, over the same session as the WebSocket."""
