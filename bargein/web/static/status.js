// The page's status: the connection pill (and which buttons it enables), the agent's pill, the transport's pill
// and the error list. Everything shown is also kept on the test hook (window.bargeinTest).

export class StatusBar {
  /**
   * @param {Record<string, HTMLElement>} el conn, agent, transport, errors, and the connect, disconnect, mute buttons
   * @param {object} test the test hook: state, errors, transport and fallbackReason are written here
   */
  constructor(el, test) {
    this.el = el;
    this.test = test;
  }

  conn(state, text) {
    this.test.state = state;
    this.el.conn.dataset.state = state;
    this.el.conn.textContent = text ?? state;
    const live = state === 'connecting' || state === 'open' || state === 'connected';
    this.el.connect.disabled = live;
    this.el.disconnect.disabled = !live;
    this.el.mute.disabled = !live;
  }

  agent(state) {
    this.el.agent.dataset.state = state;
    this.el.agent.textContent = `agent ${state}`;
  }

  /** Which transport the session rides (`client.name`), and why not WebRTC when it fell back. */
  transport(client, fallbackReason) {
    this.test.transport = client?.name ?? null;
    this.test.fallbackReason = fallbackReason;
    if (!client) {
      this.el.transport.textContent = 'transport: –';
      this.el.transport.dataset.state = 'idle';
      return;
    }
    const webrtc = client?.name === 'WebRTC';
    this.el.transport.textContent = webrtc ? 'WebRTC' : `WebSocket${fallbackReason ? ' (WebRTC failed)' : ''}`;
    this.el.transport.dataset.state = webrtc ? 'connected' : 'fallback';
    this.el.transport.title = fallbackReason ? `WebRTC failed: ${fallbackReason}` : '';
  }

  error(source, err) {
    const e = typeof err === 'object' && err !== null ? err : { message: String(err) };
    const entry = { source, type: e.type ?? null, code: e.code ?? null, message: e.message ?? String(err),
      param: e.param ?? null, event_id: e.event_id ?? null, at: new Date().toISOString() };
    this.test.errors.push(entry);
    const li = document.createElement('li');
    const where = [entry.source, entry.type, entry.code].filter(Boolean).join(' / ');
    const param = entry.param ? ` (param ${entry.param})` : '';
    li.textContent = `${entry.at.slice(11, 19)} ${where}: ${entry.message}${param}`;
    this.el.errors.prepend(li);
  }

  /** A connection closed: the error to show, if any (a WebSocket's close code, a call's reason). */
  closed(detail, transportName) {
    if (detail.source === 'webrtc') {
      this.error('webrtc', { code: detail.code, message: detail.reason });
    } else if (detail.code !== 1000 && !detail.byClient) {
      // 1006 without a reason is what a browser reports when the server refused the handshake.
      const refused = detail.code === 1006 && !detail.reason;
      const hint = refused ? ' (refused or dropped: check the API key and the server log)' : '';
      const message = detail.code === null ? `connection closed: ${detail.reason}`
        : `connection closed (${detail.code}) ${detail.reason}${hint}`;
      this.error(transportName === 'WebRTC' ? 'webrtc' : 'socket', { code: detail.code, message });
    }
    const closedText = detail.code === null || detail.code === undefined ? 'closed' : `closed ${detail.code}`;
    this.conn('closed', detail.byClient ? 'disconnected' : closedText);
  }
}
