// Camera: a live preview and a JPEG still every few seconds, handed to the page as a data URL.
//
// Frames are scaled down (longest side `maxSide`) before encoding: a vision model needs a few hundred pixels, and
// every frame travels inside a JSON event on the same socket as the audio.

export class Camera {
  /**
   * @param {HTMLVideoElement} video preview element
   * @param {{onFrame: (dataUrl: string) => void, everyMs?: number, maxSide?: number, quality?: number}} opts
   */
  constructor(video, { onFrame, everyMs = 3000, maxSide = 640, quality = 0.7 }) {
    this.video = video;
    this.onFrame = onFrame;
    this.everyMs = everyMs;
    this.maxSide = maxSide;
    this.quality = quality;
    this.stream = null;
    this.timer = null;
    this.canvas = document.createElement('canvas');
  }

  get on() {
    return this.stream !== null;
  }

  async start() {
    if (!navigator.mediaDevices?.getUserMedia) throw new Error('camera unavailable: the page needs https or localhost');
    this.stream = await navigator.mediaDevices.getUserMedia({
      video: { width: { ideal: 640 }, height: { ideal: 480 }, facingMode: 'user' },
    });
    this.video.srcObject = this.stream;
    this.video.hidden = false;
    await this.video.play();
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
    clearInterval(this.timer);
    this.timer = null;
    for (const t of this.stream?.getTracks() ?? []) t.stop();
    this.stream = null;
    this.video.srcObject = null;
    this.video.hidden = true;
  }
}
