"""Opus both ways with what PyAV leaves out: in-band FEC on the encoder, and FEC recovery on the decoder.

:class:`OpusEncoder` is libopus through PyAV (one 20 ms frame in, one packet out, on the caller's task), with in-band
FEC on: each packet also carries a coarse copy of the one before it (SILK's LBRR), so a receiver that lost a packet
recovers it from the next. :meth:`OpusEncoder.reset` starts the codec afresh: after a cut the next packet codes
silence from nothing, instead of the tail of the cut audio held in the codec's look-ahead and its smoothing.

:class:`FecDecoder` calls libopus's own ``opus_decode`` (through :mod:`ctypes`): PyAV's decoder cannot decode a
packet's FEC copy of the packet before it (``decode_fec``), nor run libopus's concealment for a packet never seen.
The library is the libopus that PyAV's wheel carries (``av.libs``), or the system's; where neither loads,
:func:`load_libopus` gives None and the caller decodes with PyAV, concealing loss with PLC only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fractions
import functools
import logging
import weakref
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)
OPUS_RATE = 48_000
TIME_BASE = fractions.Fraction(1, OPUS_RATE)
MAX_FRAME_SAMPLES = 5760
"""The longest Opus packet (120 ms at 48 kHz): the decoder's output buffer."""
EXPECTED_LOSS_PERCENT = 10
"""The loss the encoder codes FEC for: libopus puts LBRR into its packets only when told to expect some."""
FEC_BIT_RATE = 48_000
"""A voice's bitrate with room for the FEC copy (libopus codes LBRR in its SILK and hybrid modes only; a browser's
default is 32 kbit/s)."""


@functools.cache
def load_libopus() -> Any | None:
    """libopus as a :class:`ctypes.CDLL` with ``opus_decode``'s signature set, or None where none loads."""
    wheel_libs = Path(av.__file__).resolve().parent.parent / "av.libs"
    candidates = [str(path) for path in sorted(wheel_libs.glob("libopus*.so*"))]
    if (system := ctypes.util.find_library("opus")) is not None:
        candidates.append(system)
    for candidate in candidates:
        try:
            lib = ctypes.CDLL(candidate)
        except OSError:
            continue
        lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        lib.opus_decoder_create.restype = ctypes.c_void_p
        lib.opus_decode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                    ctypes.POINTER(ctypes.c_int16), ctypes.c_int, ctypes.c_int]
        lib.opus_decode.restype = ctypes.c_int
        lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
        lib.opus_decoder_destroy.restype = None
        return lib
    log.warning("no libopus to load: lost packets are concealed without Opus in-band FEC")
    return None


class FecDecoder:
    """One libopus decoder, mono at ``rate`` (48 kHz, or any rate Opus decodes at: 8, 12, 16 or 24 kHz, which libopus
    reaches inside its own synthesis): packets, concealment of a lost one, and its recovery from the next."""

    def __init__(self, lib: Any, rate: int = OPUS_RATE) -> None:
        error = ctypes.c_int(0)
        handle = lib.opus_decoder_create(rate, 1, ctypes.byref(error))
        if not handle or error.value != 0:
            raise RuntimeError(f"opus_decoder_create failed ({error.value})")
        self._lib = lib
        self._handle = handle
        self._pcm = (ctypes.c_int16 * MAX_FRAME_SAMPLES)()
        weakref.finalize(self, lib.opus_decoder_destroy, handle)

    def decode(self, payload: bytes) -> npt.NDArray[np.int16] | None:
        """The samples of one packet; None for a packet libopus refuses (corrupt)."""
        return self._run(payload, MAX_FRAME_SAMPLES, fec=False)

    def recover(self, next_payload: bytes, samples: int) -> npt.NDArray[np.int16] | None:
        """The lost packet before ``next_payload``, ``samples`` long, from that packet's FEC copy of it (libopus
        conceals it instead where the packet carries none). Decode ``next_payload`` itself next, as usual."""
        return self._run(next_payload, samples, fec=True)

    def conceal(self, samples: int) -> npt.NDArray[np.int16] | None:
        """``samples`` of libopus's packet-loss concealment (the voice continued and faded)."""
        return self._run(None, samples, fec=False)

    def _run(self, payload: bytes | None, samples: int, *, fec: bool) -> npt.NDArray[np.int16] | None:
        count = self._lib.opus_decode(self._handle, payload, len(payload) if payload else 0, self._pcm,
                                      min(samples, MAX_FRAME_SAMPLES), int(fec))
        if count < 0:
            log.debug("opus_decode failed (%d)", count)
            return None
        return np.ctypeslib.as_array(self._pcm)[:count].copy()


class OpusEncoder:
    """libopus (PyAV) at 48 kHz mono for speech, FEC on: one 20 ms frame of pcm16 in, one packet out."""

    def __init__(self, bit_rate: int = FEC_BIT_RATE, expected_loss_percent: int = EXPECTED_LOSS_PERCENT) -> None:
        self.bit_rate = bit_rate
        self.expected_loss_percent = expected_loss_percent
        self._codec: Any = None

    def reset(self) -> None:
        """Start afresh at the next frame: nothing of the audio before it is coded into the packets after."""
        self._codec = None

    def encode(self, samples: npt.NDArray[np.int16], pts: int) -> av.Packet[Any]:
        """The packet of one frame (960 samples) at ``pts`` on the 48 kHz RTP clock."""
        if self._codec is None:
            self._codec = self._open()
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = OPUS_RATE, pts, TIME_BASE
        packets = self._codec.encode(frame)
        # libopus gives one packet per 20 ms frame; were it ever to hold one back, a table-of-contents byte with
        # no frame (a 20 ms frame missing, which the receiver conceals) keeps the clock going
        packet = packets[0] if packets else av.Packet(bytes([0xF8]))
        packet.pts, packet.time_base = pts, TIME_BASE
        return packet

    def _open(self) -> Any:
        codec: Any = av.CodecContext.create("libopus", "w")
        codec.bit_rate, codec.format, codec.layout = self.bit_rate, "s16", "mono"
        codec.sample_rate, codec.time_base = OPUS_RATE, TIME_BASE
        codec.options = {"application": "voip", "fec": "1", "packet_loss": str(self.expected_loss_percent)}
        return codec


def with_inband_fec(sdp: str) -> str:
    """``sdp`` with ``useinbandfec=1`` on each Opus payload type: the receiver of this description takes FEC, so
    its peer codes it (a browser's encoder follows the remote description's fmtp; aiortc writes none for Opus)."""
    lines = sdp.split("\r\n")
    opus_types = [line.split()[0].split(":", 1)[1] for line in lines
                  if line.startswith("a=rtpmap:") and " opus/48000" in line.lower()]
    for payload_type in opus_types:
        fmtp = next((i for i, line in enumerate(lines) if line.startswith(f"a=fmtp:{payload_type} ")), None)
        if fmtp is None:
            rtpmap = next(i for i, line in enumerate(lines) if line.startswith(f"a=rtpmap:{payload_type} "))
            lines.insert(rtpmap + 1, f"a=fmtp:{payload_type} useinbandfec=1")
        elif "useinbandfec" not in lines[fmtp]:
            lines[fmtp] += ";useinbandfec=1"
    return "\r\n".join(lines)
