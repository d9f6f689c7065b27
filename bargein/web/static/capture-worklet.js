// Capture processor: microphone (AudioContext rate, mono) -> 24 kHz pcm16 frames of 20 ms, posted to the page.
//
// Runs on the audio thread so capture never stalls behind page work (rendering transcripts, JSON parsing).
// The page only base64-encodes each frame and sends it as `input_audio_buffer.append`.

import { StreamResampler } from './resampler.js';

const TARGET_RATE = 24000;
const FRAME_SAMPLES = TARGET_RATE / 50; // 20 ms

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    // `sampleRate` is the AudioContext rate, a global of the worklet scope.
    this.resampler = new StreamResampler(sampleRate, TARGET_RATE);
    this.frame = new Int16Array(FRAME_SAMPLES);
    this.fill = 0;
    this.peak = 0; // loudest sample in the current frame, for the page's level meter
    this.framesPosted = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0 || input[0].length === 0) return true;
    let mono = input[0];
    if (input.length > 1) {
      // Down-mix: a stereo device would otherwise send only its left channel.
      mono = new Float32Array(input[0].length);
      for (let c = 0; c < input.length; c++) {
        const ch = input[c];
        for (let i = 0; i < ch.length; i++) mono[i] += ch[i] / input.length;
      }
    }
    const out = this.resampler.push(mono);
    for (let i = 0; i < out.length; i++) {
      let s = out[i];
      if (s > 1) s = 1;
      else if (s < -1) s = -1;
      const a = s < 0 ? -s : s;
      if (a > this.peak) this.peak = a;
      this.frame[this.fill++] = s < 0 ? Math.round(s * 32768) : Math.round(s * 32767);
      if (this.fill === FRAME_SAMPLES) {
        const pcm = this.frame;
        this.port.postMessage({ type: 'frame', pcm: pcm.buffer, peak: this.peak, seq: this.framesPosted++ }, [
          pcm.buffer,
        ]);
        // The old buffer was transferred (detached); start a fresh one.
        this.frame = new Int16Array(FRAME_SAMPLES);
        this.fill = 0;
        this.peak = 0;
      }
    }
    return true;
  }
}

registerProcessor('bargein-capture', CaptureProcessor);
