"""The safetensors file format read and written with NumPy alone (no torch, no safetensors package).

A file is: 8 bytes, the header's length n as a little-endian unsigned 64-bit integer; n bytes of
JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into
the data that follows, plus an optional "__metadata__" entry of strings); then the raw data,
little-endian, row-major. See https://github.com/huggingface/safetensors (format section).

bfloat16 has no NumPy dtype. It is float32 with the low 16 bits of the mantissa dropped, so
reading shifts each 16-bit pattern into the high half of a 32-bit word, and writing rounds the
float32 bit pattern to the nearest even 16-bit one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..errors import BertkitError

# safetensors dtype name -> NumPy dtype of the stored bytes (BF16: raw 16-bit patterns)
DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
FLOATS = ("F64", "F32", "F16", "BF16")
MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 patterns -> float32: the pattern becomes the top half of the word."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> uint16 bfloat16 patterns, rounding to nearest, ties to even (as torch does).
    Adding 0x7FFF plus the lowest kept bit before truncating rounds up exactly when the dropped
    half is above one half, or equal to it with an odd kept part. NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    nan = np.isnan(x)
    return np.where(nan, (bits >> 16) | 0x0040, rounded).astype(np.uint16)


class SafetensorsFile:
    """Tensors of one file by name, decoded on request (a checkpoint may hold tensors the caller
    skips, e.g. integer buffers, which then need no decoding)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            data = self.path.read_bytes()
        except OSError as e:
            raise BertkitError(f"{self.path}: cannot read ({e.strerror})") from None
        if len(data) < 8:
            raise BertkitError(f"{self.path}: not a safetensors file (shorter than its 8-byte header length)")
        n = int.from_bytes(data[:8], "little")
        if n > MAX_HEADER or 8 + n > len(data):
            raise BertkitError(f"{self.path}: not a safetensors file (header length {n} does not fit the file)")
        try:
            header = json.loads(data[8:8 + n].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise BertkitError(f"{self.path}: not a safetensors file (the header is not JSON)") from None
        if not isinstance(header, dict):
            raise BertkitError(f"{self.path}: not a safetensors file (the header is not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        self.header = header
        self.buffer = memoryview(data)[8 + n:]

    def keys(self) -> list[str]:
        return list(self.header)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header[name]["shape"])

    def dtype(self, name: str) -> str:
        return self.header[name]["dtype"]

    def get(self, name: str, dtype=None) -> np.ndarray:
        """The tensor `name`; floating-point tensors converted to `dtype` when given."""
        entry = self.header[name]
        try:
            kind, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BertkitError(f"{self.path}: malformed header entry for {name!r}") from None
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise BertkitError(f"{self.path}: tensor {name!r} has shape {list(shape)}: sizes are whole numbers >= 0")
        if kind not in DTYPES:
            raise BertkitError(f"{self.path}: tensor {name!r} has dtype {kind}, which bertkit's NumPy "
                               f"reader does not decode (it reads {', '.join(DTYPES)})")
        stored = DTYPES[kind]
        if not 0 <= begin <= end <= len(self.buffer) or end - begin != int(np.prod(shape)) * stored.itemsize:
            raise BertkitError(f"{self.path}: tensor {name!r}: data_offsets {[begin, end]} do not match "
                               f"shape {list(shape)} of {kind}")
        array = np.frombuffer(self.buffer[begin:end], dtype=stored).reshape(shape)
        if kind == "BF16":
            array = bf16_to_float32(array)
        if dtype is not None and kind in FLOATS:
            array = array.astype(dtype)
        return np.array(array)  # a native-endian copy that owns its memory


SAVED_AS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64", None: None}


def save_dtype(dtype) -> str | None:
    """A dtype to save in, by name (SAVED_AS; None: each tensor's own), from a name or NumPy's
    float16 / 32 / 64 (a type or a dtype, as build() and from_pretrained take them), else an error."""
    if dtype is not None and not isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            pass  # (refused below, as given)
    if not isinstance(dtype, (str, type(None))) or dtype not in SAVED_AS:
        raise BertkitError(f"unknown dtype {dtype!r}; choose one of bfloat16, float16, float32, float64")
    return dtype


def save_file(tensors: dict[str, np.ndarray], path: str | os.PathLike, dtype: str | None = None,
              metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (float16/32/64 or integer arrays) to `path`. `dtype` "bfloat16",
    "float16", "float32" or "float64" converts every floating-point tensor on the way."""
    dtype = save_dtype(dtype)
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, value in tensors.items():
        value = np.asarray(value)
        kind = next((k for k, d in DTYPES.items() if d == value.dtype.newbyteorder("<") and k != "BF16"), None)
        if kind in FLOATS and SAVED_AS[dtype] is not None:
            kind = SAVED_AS[dtype]
        if kind is None:
            raise BertkitError(f"tensor {name!r}: dtype {value.dtype} has no safetensors equivalent")
        if kind == "BF16":
            raw = float32_to_bf16(value).tobytes()
        else:
            raw = np.ascontiguousarray(value, dtype=DTYPES[kind]).tobytes()
        header[name] = {"dtype": kind, "shape": list(value.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad with spaces so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for raw in chunks:
            f.write(raw)
