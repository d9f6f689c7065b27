// Camera: a live preview and a JPEG still about once a second, handed to the page as a data URL.
//
// Frames are scaled down (longest side `maxSide`) before encoding: a vision model needs a few hundred pixels, and
// every frame travels inside a JSON event on the same socket as the audio.

export class Camera {
  /**
   * @param {HTMLVideoElement} video preview element
   * @param {{onFrame: (dataUrl: string) => void, everyMs?: number, maxSide?: number, quality?: number}} opts
   */
  constructor(video, { onFrame, everyMs = 1000, maxSide = 640, quality = 0.7 }) {
    this.video = video;
    this.onFrame = onFrame;
    this.everyMs = everyMs;
    this.maxSide = maxSide;
    this.quality = quality;
    this.stream = null;
    this.timer = null;
    this.generation = 0; // bumped by stop(): a start() still waiting for the camera gives it back
    this.canvas = document.createElement('canvas');
  }

  get on() {
    return this.stream !== null;
  }

  /** Opens the camera; a stop() while it is being granted wins (the stream is stopped, no timer is left). */
  async start() {
    if (!navigator.mediaDevices?.getUserMedia) throw new Error('camera unavailable: the page needs https or localhost');
    this.stop(); // never two streams: one would be forgotten, its camera left on
    const mine = ++this.generation;
    const stream = await navigator.mediaDevices.getUserMedia({
      video: { width: { ideal: 640 }, height: { ideal: 480 }, facingMode: 'user' },
    });
    if (mine !== this.generation) {
      for (const t of stream.getTracks()) t.stop();
      return;
    }
    this.stream = stream;
    this.video.srcObject = stream;
    this.video.hidden = false;
    try {
      await this.video.play();
    } catch (err) {
      if (mine !== this.generation) return; // stopped meanwhile: play() was interrupted, nothing to report
      this.stop();
      throw err;
    }
    if (mine !== this.generation) return;
    this.timer = setInterval(() => this.capture(), this.everyMs);
  }

  /** Grabs the current preview frame; returns the data URL or null when the video has no frame yet. */
  capture() {
    const v = this.video;
    if (!this.stream || v.videoWidth === 0) return null;
    const scale = Math.min(1, this.maxSide / Math.max(v.videoWidth, v.videoHeight));
    this.canvas.width = Math.round(v.videoWidth * scale);
    this.canvas.height = Math.round(v.videoHeight * scale);
    this.canvas.getContext('2d').drawImage(v, 0, 0, this.canvas.width, this.canvas.height);
    const url = this.canvas.toDataURL('image/jpeg', this.quality);
    this.onFrame(url);
    return url;
  }

  stop() {
    this.generation++;
    clearInterval(this.timer);
    this.timer = null;
    for (const t of this.stream?.getTracks() ?? []) t.stop();
    this.stream = null;
    this.video.srcObject = null;
    this.video.hidden = true;
  }
}
