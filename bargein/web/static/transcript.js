// The conversation view: the user's words as they are recognised, and the agent's words as they are spoken.
//
// The agent's transcript usually arrives ahead of its audio. To show words as they are *heard*, every transcript
// delta is stamped with how much audio of the item had arrived when it came (a knot: audio ms -> character
// index); the playback cursor is then mapped through those knots. On barge-in the text after the cut position is
// shown struck through: that part was never heard, and the server drops it from history.

/** Character index reached at `ms` of audio, by piecewise-linear interpolation over the knots. */
export function charsAt(knots, totalMs, length, ms) {
  // Knots sharing one audio time keep the first (smallest) index: text that raced ahead of the audio spreads
  // over the audio that follows instead of appearing all at once.
  const pts = [];
  for (const k of knots) if (pts.length === 0 || k.ms > pts[pts.length - 1].ms) pts.push(k);
  if (pts.length === 0 || pts[0].ms > 0) pts.unshift({ ms: 0, chars: 0 });
  if (totalMs > pts[pts.length - 1].ms) pts.push({ ms: totalMs, chars: length });
  else pts[pts.length - 1] = { ms: pts[pts.length - 1].ms, chars: length };
  if (ms <= 0) return 0;
  for (let i = 1; i < pts.length; i++) {
    const a = pts[i - 1];
    const b = pts[i];
    if (ms <= b.ms) return Math.round(a.chars + ((b.chars - a.chars) * (ms - a.ms)) / (b.ms - a.ms));
  }
  return length;
}

/** Moves a cut position back to the start of the word it falls in: a half-heard word counts as not heard. */
function snapToWord(text, idx) {
  if (idx >= text.length) return text.length;
  while (idx > 0 && !/\s/.test(text[idx - 1])) idx--;
  return idx;
}

export class ConversationView {
  /** @param {HTMLElement} root the scrolling log element */
  constructor(root) {
    this.root = root;
    this.users = new Map(); // item_id -> {el, partial, final}
    this.agents = new Map(); // item_id -> {el, text, knots, receivedMs, done, playedMs, cutMs}
  }

  entry(kind, itemId) {
    const el = document.createElement('div');
    el.className = `msg ${kind}`;
    el.dataset.itemId = itemId;
    const who = document.createElement('span');
    who.className = 'who';
    who.textContent = { user: 'you', tool: 'tool' }[kind] ?? 'agent';
    const body = document.createElement('span');
    body.className = 'body';
    el.append(who, body);
    this.root.append(el);
    this.scroll();
    return el;
  }

  scroll() {
    this.root.scrollTop = this.root.scrollHeight;
  }

  /** A built-in tool the server ran for the agent: its call and what it answered. */
  tool(callId, name, args, output) {
    const el = this.entry('tool', callId);
    el.querySelector('.body').textContent = `${name}(${args}) → ${output}`;
  }

  user(itemId) {
    let u = this.users.get(itemId);
    if (!u) {
      u = { el: this.entry('user', itemId), partial: '', final: null };
      this.users.set(itemId, u);
      this.renderUser(u);
    }
    return u;
  }

  userSpeaking(itemId) {
    this.user(itemId).el.classList.add('speaking');
  }

  userDelta(itemId, delta) {
    const u = this.user(itemId);
    u.partial += delta;
    this.renderUser(u);
  }

  userFinal(itemId, transcript) {
    const u = this.user(itemId);
    u.final = transcript;
    u.el.classList.remove('speaking');
    this.renderUser(u);
  }

  /** Segments that turned out to be noise (empty transcript) are dropped from the view. */
  userDiscard(itemId) {
    const u = this.users.get(itemId);
    if (u && !u.partial && !u.final) {
      u.el.remove();
      this.users.delete(itemId);
    }
  }

  renderUser(u) {
    const body = u.el.querySelector('.body');
    if (u.final !== null) {
      body.textContent = u.final;
      body.classList.remove('partial');
    } else {
      body.textContent = u.partial || '…';
      body.classList.add('partial');
    }
    this.scroll();
  }

  agent(itemId) {
    let a = this.agents.get(itemId);
    if (!a) {
      a = { el: this.entry('agent', itemId), text: '', knots: [], receivedMs: 0, done: false, playedMs: 0, cutMs: null,
        audio: false, heardText: null };
      this.agents.set(itemId, a);
    }
    return a;
  }

  agentAudio(itemId, ms) {
    const a = this.agent(itemId);
    a.audio = true;
    a.receivedMs += ms;
  }

  agentText(itemId, delta) {
    const a = this.agent(itemId);
    a.knots.push({ ms: a.receivedMs, chars: a.text.length });
    a.text += delta;
    this.renderAgent(a);
  }

  agentDone(itemId) {
    const a = this.agents.get(itemId);
    if (a) {
      a.done = true;
      this.renderAgent(a);
    }
  }

  agentPlayed(itemId, ms) {
    const a = this.agents.get(itemId);
    if (a && a.cutMs === null && ms !== a.playedMs) {
      a.playedMs = ms;
      this.renderAgent(a);
    }
  }

  /** Marks the item cut at `ms` of audio (the truncate we sent, or the server's `truncated` event). */
  agentCut(itemId, ms) {
    const a = this.agents.get(itemId);
    if (!a) return;
    a.cutMs = Math.max(0, ms);
    a.playedMs = a.cutMs;
    this.renderAgent(a);
  }

  /** The words the server kept of a cut item (`conversation.item.retrieved`): they replace the estimate. */
  agentHeard(itemId, transcript) {
    const a = this.agents.get(itemId);
    if (!a || a.cutMs === null) return;
    a.heardText = transcript;
    this.renderAgent(a);
  }

  /** The server resumed the item from `ms` (the pause was a false interruption): it is no longer cut. */
  agentResumed(itemId, ms) {
    const a = this.agents.get(itemId);
    if (!a) return;
    a.cutMs = null;
    a.heardText = null;
    a.playedMs = ms;
    a.receivedMs = ms;
    this.renderAgent(a);
  }

  /** The character index heard so far (or heard before the cut). */
  heardChars(a) {
    if (a.cutMs !== null && a.heardText !== null && a.text.startsWith(a.heardText)) return a.heardText.length;
    if (!a.audio) return a.cutMs === null ? a.text.length : 0;
    const ms = a.cutMs ?? a.playedMs;
    const idx = charsAt(a.knots, a.receivedMs, a.text.length, ms);
    return a.cutMs === null ? idx : snapToWord(a.text, idx);
  }

  renderAgent(a) {
    const body = a.el.querySelector('.body');
    const idx = this.heardChars(a);
    const spoken = document.createElement('span');
    spoken.className = 'spoken';
    spoken.textContent = a.text.slice(0, idx);
    const rest = document.createElement('span');
    rest.className = a.cutMs === null ? 'pending' : 'cut';
    rest.textContent = a.text.slice(idx);
    body.replaceChildren(spoken, rest);
    a.el.classList.toggle('interrupted', a.cutMs !== null);
    this.scroll();
  }

  /** Snapshot for the test hook. */
  snapshot() {
    const user = [...this.users.entries()].map(([itemId, u]) => ({ itemId, partial: u.partial, final: u.final }));
    const agent = [...this.agents.entries()].map(([itemId, a]) => ({
      itemId,
      text: a.text,
      heard: a.text.slice(0, this.heardChars(a)),
      cutMs: a.cutMs,
      receivedMs: a.receivedMs,
    }));
    return { user, agent };
  }
}
