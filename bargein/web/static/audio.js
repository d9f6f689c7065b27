// Audio graph of the page: microphone -> capture worklet, and playback worklet -> speakers.
//
// One AudioContext at the device's own rate; both worklets resample to and from the protocol's 24 kHz
// themselves, so the page works whatever rate the hardware runs at (44.1 or 48 kHz) and in browsers that refuse to
// connect a microphone to a context of a different rate.

export class AudioEngine {
  /**
   * @param {{onFrame: (pcm: ArrayBuffer, peak: number) => void,
   *          onPlayback: (msg: object) => void}} handlers
   */
  constructor({ onFrame, onPlayback }) {
    this.onFrame = onFrame;
    this.onPlayback = onPlayback;
    this.ctx = null;
    this.micStream = null;
    this.capture = null;
    this.playback = null;
    this.clearSeq = 0;
    this.pendingClears = new Map();
  }

  /** Builds the graph. Playback always starts; a microphone failure is thrown after playback is ready. */
  async start({ prebufferMs = 60 } = {}) {
    // 'interactive' asks for the smallest output buffer the device allows: it is part of first-audio latency.
    this.ctx = new AudioContext({ latencyHint: 'interactive' });
    await this.ctx.audioWorklet.addModule(new URL('./playback-worklet.js', import.meta.url));
    await this.ctx.audioWorklet.addModule(new URL('./capture-worklet.js', import.meta.url));
    this.playback = new AudioWorkletNode(this.ctx, 'bargein-playback', {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [this.ctx.destination.channelCount >= 2 ? 2 : 1],
      processorOptions: { prebufferMs },
    });
    this.playback.port.onmessage = (e) => this.onPlaybackMessage(e.data);
    this.playback.connect(this.ctx.destination);
    if (this.ctx.state !== 'running') await this.ctx.resume();

    if (!navigator.mediaDevices?.getUserMedia) {
      throw new Error('microphone unavailable: the page needs https (or localhost) and a browser with getUserMedia');
    }
    this.micStream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
    });
    const source = this.ctx.createMediaStreamSource(this.micStream);
    this.capture = new AudioWorkletNode(this.ctx, 'bargein-capture', {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      channelCount: 1,
      channelCountMode: 'explicit',
    });
    this.capture.port.onmessage = (e) => {
      if (e.data.type === 'frame') this.onFrame(e.data.pcm, e.data.peak);
    };
    // A node must reach the destination to be pulled by the renderer; a muted gain keeps the mic inaudible.
    const sink = this.ctx.createGain();
    sink.gain.value = 0;
    source.connect(this.capture).connect(sink).connect(this.ctx.destination);
  }

  get sampleRate() {
    return this.ctx ? this.ctx.sampleRate : 0;
  }

  onPlaybackMessage(msg) {
    if (msg.type === 'cleared') {
      const resolve = this.pendingClears.get(msg.reqId);
      this.pendingClears.delete(msg.reqId);
      if (resolve) resolve(msg);
    }
    this.onPlayback(msg);
  }

  /** Queues one `response.output_audio.delta` (pcm16 24 kHz bytes) for the item. */
  play(itemId, pcmBytes) {
    if (!this.playback) return;
    this.playback.port.postMessage({ type: 'audio', itemId, pcm: pcmBytes }, [pcmBytes]);
  }

  /** A paused reply resumes: the item's played cursor restarts at `playedMs`. */
  seek(itemId, playedMs) {
    this.playback?.port.postMessage({ type: 'seek', itemId, playedMs });
  }

  /** Marks the item's audio complete so its tail plays without waiting for more. */
  end(itemId) {
    this.playback?.port.postMessage({ type: 'end', itemId });
  }

  /** Stops playback at once; resolves with the worklet's report of what each cut item had played. */
  clear() {
    if (!this.playback) return Promise.resolve({ items: [], current: null });
    const reqId = ++this.clearSeq;
    return new Promise((resolve) => {
      this.pendingClears.set(reqId, resolve);
      this.playback.port.postMessage({ type: 'clear', reqId });
    });
  }

  setMuted(muted) {
    // A disabled track delivers digital silence, so the server's stream clock keeps running in step with time.
    for (const t of this.micStream?.getAudioTracks() ?? []) t.enabled = !muted;
  }

  /** performance.now() time at which a sample at `contextTime` reaches the speakers (best estimate). */
  contextToPerf(contextTime) {
    if (!this.ctx) return performance.now();
    const ts = this.ctx.getOutputTimestamp ? this.ctx.getOutputTimestamp() : null;
    if (ts && ts.performanceTime > 0) return ts.performanceTime + (contextTime - ts.contextTime) * 1000;
    const out = (this.ctx.outputLatency || 0) + (this.ctx.baseLatency || 0);
    return performance.now() + (contextTime - this.ctx.currentTime + out) * 1000;
  }

  async stop() {
    for (const t of this.micStream?.getTracks() ?? []) t.stop();
    this.micStream = null;
    for (const resolve of this.pendingClears.values()) resolve({ items: [], current: null });
    this.pendingClears.clear();
    if (this.ctx) await this.ctx.close();
    this.ctx = null;
    this.capture = null;
    this.playback = null;
  }
}
