"""Reading a SentencePiece model file (spm.model) without sentencepiece or protobuf.

An spm.model is one protobuf `ModelProto` message (sentencepiece_model.proto). We need only a
few fields, and the protobuf wire format is small: a message is a run of (tag, value) records,
tag = field number << 3 | wire type, with wire types 0 (varint), 1 (8 bytes), 2 (length-prefixed
bytes: strings and nested messages) and 5 (4 bytes: floats). Unknown fields are skipped, so newer
files with more fields still read.

    ModelProto:      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
    SentencePiece:   1 piece (string), 2 score (float), 3 type (1 normal, 2 unknown, 3 control,
                     4 user-defined, 5 unused, 6 byte)
    TrainerSpec:     3 model_type (1 unigram, 2 bpe, 3 word, 4 char), 40 unk_id
    NormalizerSpec:  2 precompiled_charsmap (bytes: the compiled NFKC-like rule table, e.g.
                     "nmt_nfkc", that `tokenizers.normalizers.Precompiled` replays)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import BertkitError

PIECE_KINDS = {1: "normal", 2: "unknown", 3: "control", 4: "user", 5: "unused", 6: "byte"}
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


@dataclass(frozen=True)
class SpmModel:
    pieces: list[tuple[str, float]]   # (piece, log-probability score), in id order
    kinds: list[str]                  # PIECE_KINDS value of each piece
    model_type: str
    unk_id: int
    charsmap: bytes = b""             # the normalizer's precompiled_charsmap; empty for "identity"

    @property
    def piece_strings(self) -> list[str]:
        return [p for p, _ in self.pieces]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each record: ints for varints and fixed widths, bytes for
    length-prefixed values."""
    i = 0
    while i < len(data):
        tag, i = _varint(data, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = int.from_bytes(data[i:i + 8], "little"), i + 8
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        elif wire == 5:
            value, i = int.from_bytes(data[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if i > len(data):
            raise ValueError("truncated record")
        yield field, value


def read_spm_model(path: Path) -> SpmModel:
    try:
        data = Path(path).read_bytes()
        pieces, kinds = [], []
        model_type, unk_id, charsmap = 1, 0, b""  # proto defaults
        for field, value in _fields(data):
            if field == 1:
                piece, score, kind = "", 0.0, 1
                for f, v in _fields(value):
                    if f == 1:
                        piece = v.decode("utf-8")
                    elif f == 2:
                        score = struct.unpack("<f", v.to_bytes(4, "little"))[0]
                    elif f == 3:
                        kind = v
                pieces.append((piece, score))
                kinds.append(PIECE_KINDS.get(kind, "normal"))
            elif field == 2:
                for f, v in _fields(value):
                    if f == 3:
                        model_type = v
                    elif f == 40:
                        unk_id = v
            elif field == 3:
                charsmap = next((v for f, v in _fields(value) if f == 2), charsmap)
    except (ValueError, TypeError, UnicodeDecodeError, AttributeError, struct.error) as e:
        raise BertkitError(f"{path}: not a readable SentencePiece model ({e})") from None
    if not pieces:
        raise BertkitError(f"{path}: not a SentencePiece model (no pieces found)")
    return SpmModel(pieces, kinds, MODEL_TYPES.get(model_type, str(model_type)), unk_id, bytes(charsmap))
