// Streaming band-limited resampler shared by the capture and playback worklets.
//
// Why not linear interpolation: taking 48 kHz microphone audio down to 24 kHz without a low-pass filter folds
// everything above 12 kHz back into the speech band (aliasing), which hurts the VAD and ASR. A windowed-sinc
// kernel does the filtering and the interpolation in one step. The kernel is tabulated once (fine phase grid,
// linear interpolation between table points) so the audio thread never calls Math.sin per tap.

const TABLE_RESOLUTION = 512; // table points per input sample of kernel offset

/** Blackman window on [-1, 1]; zero outside. */
function blackman(x) {
  if (x <= -1 || x >= 1) return 0;
  const t = (x + 1) / 2; // 0..1
  return 0.42 - 0.5 * Math.cos(2 * Math.PI * t) + 0.08 * Math.cos(4 * Math.PI * t);
}

/**
 * Converts a float32 stream from `inRate` to `outRate`, chunk by chunk, with no gaps or clicks between chunks.
 * Latency: `halfWidth` input samples (about 0.3 ms at 48 kHz).
 */
export class StreamResampler {
  /**
   * @param {number} inRate input sample rate in Hz
   * @param {number} outRate output sample rate in Hz
   * @param {number} zeroCrossings kernel half-width in zero crossings of the low-pass sinc
   */
  constructor(inRate, outRate, zeroCrossings = 8) {
    this.inRate = inRate;
    this.outRate = outRate;
    this.step = inRate / outRate; // input samples advanced per output sample
    this.bypass = inRate === outRate;
    // Cut a little below the lower Nyquist so the transition band stays out of the passband's alias image.
    this.cutoff = Math.min(1, outRate / inRate) * 0.92;
    this.halfWidth = Math.ceil(zeroCrossings / this.cutoff);
    const n = this.halfWidth * TABLE_RESOLUTION + 2;
    this.table = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const d = i / TABLE_RESOLUTION;
      const arg = Math.PI * this.cutoff * d;
      const sinc = d === 0 ? 1 : Math.sin(arg) / arg;
      this.table[i] = this.cutoff * sinc * blackman(d / this.halfWidth);
    }
    this.reset();
  }

  /** Forgets all history (used when playback is cleared, so old audio cannot ring into new audio). */
  reset() {
    // Pre-pad with zeros so the first output sample has a full left wing.
    this.buf = new Float32Array(this.halfWidth * 2);
    this.len = this.halfWidth;
    this.pos = this.halfWidth; // position of the next output sample, in buffer input-sample units
  }

  /** Kernel value at offset d (input samples, any sign). */
  kernel(d) {
    const x = Math.abs(d) * TABLE_RESOLUTION;
    const i = x | 0;
    if (i >= this.table.length - 1) return 0;
    const f = x - i;
    return this.table[i] + (this.table[i + 1] - this.table[i]) * f;
  }

  /**
   * Feeds `input` and returns every output sample that is now fully determined.
   * @param {Float32Array} input
   * @returns {Float32Array}
   */
  push(input) {
    if (this.bypass) return input.slice();
    this.append(input);
    const hw = this.halfWidth;
    // The number of outputs whose right wing is already in the buffer.
    const last = this.len - hw; // need floor(pos) + hw < len
    const count = Math.max(0, Math.ceil((last - this.pos) / this.step));
    const out = new Float32Array(count);
    const buf = this.buf;
    let pos = this.pos;
    for (let o = 0; o < count; o++) {
      const base = Math.floor(pos);
      let acc = 0;
      for (let k = base - hw + 1; k <= base + hw; k++) {
        acc += buf[k] * this.kernel(pos - k);
      }
      out[o] = acc;
      pos += this.step;
    }
    this.pos = pos;
    this.compact();
    return out;
  }

  /** Pushes enough silence to release the samples still held back for the right wing of the kernel. */
  flush() {
    return this.push(new Float32Array(this.halfWidth + 1));
  }

  append(input) {
    if (this.len + input.length > this.buf.length) {
      const grown = new Float32Array(Math.max(this.buf.length * 2, this.len + input.length));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    this.buf.set(input, this.len);
    this.len += input.length;
  }

  /** Drops input that no future output sample can reach, keeping the buffer small. */
  compact() {
    const keepFrom = Math.floor(this.pos) - this.halfWidth + 1;
    if (keepFrom <= 0) return;
    this.buf.copyWithin(0, keepFrom, this.len);
    this.len -= keepFrom;
    this.pos -= keepFrom;
  }
}
