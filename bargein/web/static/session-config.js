// The session configuration the page asks for, and the conversation language it keeps in step with the server.

export class SessionConfig {
  /** @param {HTMLSelectElement} languageSelect the page's language choice ('' = the server's default) */
  constructor(languageSelect) {
    this.select = languageSelect;
    // The session's language before the page changed it (from session.created): "server default" goes back to
    // it. A session.update whose transcription object leaves `language` out keeps the current one, so it must be
    // named (null when the server left it to the recogniser). Unknown until session.created: then nothing is sent.
    this.serverLanguage = undefined;
  }

  /** A new session: its own session.created tells the server's language. */
  reset() {
    this.serverLanguage = undefined;
  }

  /** session.created arrived. */
  created(session) {
    this.serverLanguage = session?.audio?.input?.transcription?.language ?? null;
  }

  transcription() {
    const language = this.select.value;
    if (language) return { language };
    return this.serverLanguage === undefined ? {} : { language: this.serverLanguage };
  }

  /** The language changed during a session: it applies from the next turn on. */
  languageUpdate() {
    const input = { transcription: this.transcription() };
    return { type: 'session.update', session: { type: 'realtime', audio: { input } } };
  }

  /** The first session.update: audio both ways, server VAD that answers and interrupts, the language. */
  sessionUpdate() {
    return {
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['audio'],
        audio: {
          input: {
            format: { type: 'audio/pcm', rate: 24000 },
            turn_detection: { type: 'server_vad', create_response: true, interrupt_response: true },
            transcription: this.transcription(),
          },
          output: { format: { type: 'audio/pcm', rate: 24000 } },
        },
      },
    };
  }
}
