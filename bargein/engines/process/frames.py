"""The engine-process wire format: tagged values that cannot run code when read. Standard library only.

A message is one length-prefixed frame of a :class:`multiprocessing.connection.Connection` (``send_bytes``),
holding one value written as a tag byte and its body:

- ``N`` None, ``T`` True, ``F`` False; ``i`` an int in 64 bits, ``I`` a larger one as decimal text;
  ``f`` a float (64 bits);
- ``s`` text (UTF-8) and ``b`` bytes, each a 32-bit length and the raw bytes;
- ``l`` a list, ``t`` a tuple, ``d`` a dict: a 32-bit count and the items (a dict's as key, value);
- ``a`` an array: its dtype (``<f4``: numbers only), its shape (a tuple of ints) and its raw bytes;
- ``o`` an object: a type's name from the reader's allow-list and one value, its fields (a dataclass's
  in their order, as a tuple).

Reading builds nothing but these values, and objects only through the ``construct`` callback the reader
passes (bargein's lists the value types engines exchange: :mod:`bargein.engines.process.wire`), so a worker
whose process is compromised can send the server wrong values, never code; what will not parse raises
:class:`WireError` (a :class:`ValueError`: the supervisor counts the worker broken and restarts it).
The file imports nothing from bargein, so the Mandarin voice's worker, in its own virtualenv, loads it by
path (numpy only when an array is read).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

MAX_FRAME_BYTES = 256 * 1024 * 1024
"""The longest frame a reader accepts (a recogniser's clip or a clause's audio are a few MiB)."""
MAX_DEPTH = 64
"""Values nested deeper than this are refused (a hostile frame must not exhaust the reader's stack)."""
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_DTYPE = re.compile(r"[<>|=]?[biufc][1-9][0-9]?")

Describe = Callable[[Any], "tuple[str, Any] | None"]
"""An object's allow-listed type name and its fields (any value), or None for a value that may not be sent."""
Construct = Callable[[str, Any], Any]
"""Builds an allow-listed object from its type name and fields (raises for a name not allowed)."""


class WireError(ValueError):
    """A value that may not be written, or a frame that does not parse (torn, hostile, too deep)."""


def encode(value: Any, describe: Describe | None = None) -> bytes:
    """``value`` as one frame's bytes; objects beyond the plain values go through ``describe``."""
    out = bytearray()
    _put(out, value, describe, 0)
    return bytes(out)


def _put(out: bytearray, value: Any, describe: Describe | None, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if value is None:
        out += b"N"
    elif value is True or value is False:
        out += b"T" if value else b"F"
    elif isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            out += b"i"
            out += _I64.pack(value)
        else:
            _blob(out, b"I", str(int(value)).encode())
    elif isinstance(value, float):
        out += b"f"
        out += _F64.pack(value)
    elif isinstance(value, str):
        _blob(out, b"s", value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _blob(out, b"b", bytes(value))
    elif isinstance(value, (tuple, list)):
        out += b"t" if isinstance(value, tuple) else b"l"
        out += _U32.pack(len(value))
        for item in value:
            _put(out, item, describe, depth + 1)
    elif isinstance(value, Mapping):
        _put_dict(out, value, describe, depth)
    elif type(value).__module__ == "numpy" and type(value).__name__ == "ndarray":
        _put_array(out, value)
    elif type(value).__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar: its Python value
        _put(out, value.item(), describe, depth)
    else:
        described = describe(value) if describe is not None else None
        if described is None:
            raise WireError(f"a {type(value).__qualname__} cannot cross the engine-process wire")
        name, fields = described
        out += b"o"
        _blob(out, b"s", name.encode())
        _put(out, fields, describe, depth + 1)


def _put_dict(out: bytearray, value: Mapping[Any, Any], describe: Describe | None, depth: int) -> None:
    out += b"d"
    out += _U32.pack(len(value))
    for key, item in value.items():
        _put(out, key, describe, depth + 1)
        _put(out, item, describe, depth + 1)


def _put_array(out: bytearray, array: Any) -> None:
    dtype = array.dtype.str
    if not _DTYPE.fullmatch(dtype):
        raise WireError(f"an array of {dtype} cannot cross the engine-process wire (numbers only)")
    out += b"a"
    _blob(out, b"s", dtype.encode())
    out += b"t"
    out += _U32.pack(array.ndim)
    for size in array.shape:
        out += b"i"
        out += _I64.pack(size)
    _blob(out, b"b", array.tobytes())


def _blob(out: bytearray, tag: bytes, data: bytes) -> None:
    out += tag
    out += _U32.pack(len(data))
    out += data


def decode(frame: bytes, construct: Construct | None = None) -> Any:
    """The value ``frame`` holds; objects are built by ``construct`` (none allowed without it)."""
    reader = _Reader(bytes(frame), construct)
    try:
        value = reader.value(0)
    except WireError:
        raise
    except (struct.error, UnicodeDecodeError, TypeError, ValueError, KeyError, IndexError) as error:
        raise WireError(f"unreadable frame: {type(error).__name__}: {error}") from None
    if reader.at != len(frame):
        raise WireError(f"{len(frame) - reader.at} stray bytes after the value")
    return value


class _Reader:
    def __init__(self, data: bytes, construct: Construct | None) -> None:
        self.data = data
        self.at = 0
        self.construct = construct

    def take(self, size: int) -> bytes:
        start, self.at = self.at, self.at + size
        if self.at > len(self.data):
            raise WireError("the frame ends inside a value")
        return self.data[start:self.at]

    def count(self) -> int:
        number: int = _U32.unpack_from(self.data, self.at)[0]  # struct.error past the end: a WireError
        self.at += 4
        if number > len(self.data) - self.at:  # every item takes a byte at least: a lie about the count
            raise WireError("a count larger than the frame")
        return number

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise WireError("value nested too deeply")
        tag = self.data[self.at]  # IndexError past the end: a WireError
        self.at += 1
        if tag == 0x73:  # s
            return str(self.take(self.count()), "utf-8", "surrogatepass")
        if tag == 0x69:  # i
            number: int = _I64.unpack_from(self.data, self.at)[0]
            self.at += 8
            return number
        if tag in (0x6C, 0x74):  # l, t
            items = [self.value(depth + 1) for _ in range(self.count())]
            return items if tag == 0x6C else tuple(items)
        if tag == 0x64:  # d
            return self.mapping(depth)
        if tag == 0x6F:  # o
            return self.object(depth)
        if tag == 0x4E:  # N
            return None
        if tag in (0x54, 0x46):  # T, F
            return tag == 0x54
        if tag == 0x66:  # f
            real: float = _F64.unpack_from(self.data, self.at)[0]
            self.at += 8
            return real
        if tag == 0x62:  # b
            return self.take(self.count())
        if tag == 0x61:  # a
            return self.array(depth)
        if tag == 0x49:  # I
            text = self.take(self.count())
            if not re.fullmatch(rb"-?[0-9]{1,4300}", text):
                raise WireError("a malformed large int")
            return int(text)
        raise WireError(f"unknown tag {bytes([tag])!r}")

    def mapping(self, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        for _ in range(self.count()):
            key = self.value(depth + 1)
            result[key] = self.value(depth + 1)
        return result

    def object(self, depth: int) -> Any:
        name = self.value(depth + 1)
        if not isinstance(name, str):
            raise WireError("a malformed object")
        fields = self.value(depth + 1)
        if self.construct is None:
            raise WireError(f"an object ({name!r}) where none may be")
        return self.construct(name, fields)

    def array(self, depth: int) -> Any:
        dtype, shape, raw = (self.value(depth + 1) for _ in range(3))
        if not (isinstance(dtype, str) and _DTYPE.fullmatch(dtype) and isinstance(shape, tuple)
                and all(isinstance(size, int) and size >= 0 for size in shape) and isinstance(raw, bytes)):
            raise WireError("a malformed array")
        import numpy as np

        array = np.frombuffer(bytearray(raw), dtype=np.dtype(dtype))  # a bytearray: writable, as unpickled
        return array.reshape(shape)  # a size that does not fit the shape raises ValueError: a WireError


def send(conn: Connection, value: Any, describe: Describe | None = None) -> None:
    """Write ``value`` as one frame on ``conn``."""
    conn.send_bytes(encode(value, describe))


def receive(conn: Connection, construct: Construct | None = None) -> Any:
    """Read one frame from ``conn`` (blocking) and its value; :class:`WireError` for one that will not parse."""
    return decode(conn.recv_bytes(MAX_FRAME_BYTES), construct)
