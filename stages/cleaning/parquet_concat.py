"""Concatenate Parquet files written with the same schema and writer into one file, without decoding a page: the
parts' row-group bytes are copied one after another and their footers joined, every file offset shifted. The
result is byte-identical to one ``ParquetWriter`` writing the same row groups in order, so shard workers can
write the output's parts and the main process only copies bytes.

The footer is Thrift's compact protocol (parquet-format's ``FileMetaData``); it is decoded here into a tree that
keeps every field's id and type, so the re-encoded footer is the original's bytes but for the changed offsets.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"PAR1"

# Compact protocol type codes.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# parquet-format field ids (parquet.thrift) of the fields that hold file offsets or a row group's ordinal.
_FMD_NUM_ROWS, _FMD_ROW_GROUPS = 3, 4
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX = 2, 3, 4, 6
_CMD_OFFSETS = (9, 10, 11, 14)  # data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset


@dataclass
class Field:
    id: int
    type: int
    value: object  # int, float, bytes, bool, list[Field] (struct), ("list"|"set", elem type, items), ("map", ...)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t: int, in_container: bool = False):
        if t in (_TRUE, _FALSE):
            return self.byte() if in_container else t == _TRUE  # a container keeps its byte as written
        if t == _BYTE:
            return self.byte()
        if t in (_I16, _I32, _I64):
            return self.zigzag()
        if t == _DOUBLE:
            v = self.data[self.pos:self.pos + 8]
            self.pos += 8
            return v
        if t == _BINARY:
            n = self.varint()
            v = self.data[self.pos:self.pos + n]
            self.pos += n
            return v
        if t in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return ("list" if t == _LIST else "set", elem, [self.value(elem, True) for _ in range(size)])
        if t == _MAP:
            size = self.varint()
            kinds = self.byte() if size else 0
            k, v = kinds >> 4, kinds & 0x0F
            return ("map", kinds, [(self.value(k, True), self.value(v, True)) for _ in range(size)])
        if t == _STRUCT:
            return self.struct()
        raise ValueError(f"Parquet footer: unknown Thrift type {t} at byte {self.pos}")

    def struct(self) -> list[Field]:
        fields: list[Field] = []
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            delta, t = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            fields.append(Field(fid, t, self.value(t)))
            last = fid


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while n > 0x7F:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, t: int, v, in_container: bool = False) -> None:
        if t in (_TRUE, _FALSE):
            if in_container:
                self.out.append(v)
        elif t == _BYTE:
            self.out.append(v)
        elif t in (_I16, _I32, _I64):
            self.zigzag(v)
        elif t == _DOUBLE:
            self.out += v
        elif t == _BINARY:
            self.varint(len(v))
            self.out += v
        elif t in (_LIST, _SET):
            _, elem, items = v
            if len(items) < 15:
                self.out.append((len(items) << 4) | elem)
            else:
                self.out.append(0xF0 | elem)
                self.varint(len(items))
            for item in items:
                self.value(elem, item, True)
        elif t == _MAP:
            _, kinds, items = v
            self.varint(len(items))
            if items:
                self.out.append(kinds)
            for key, val in items:
                self.value(kinds >> 4, key, True)
                self.value(kinds & 0x0F, val, True)
        elif t == _STRUCT:
            self.struct(v)

    def struct(self, fields: list[Field]) -> None:
        last = 0
        for f in fields:
            t = (_TRUE if f.value else _FALSE) if f.type in (_TRUE, _FALSE) else f.type
            if 0 < f.id - last <= 15:
                self.out.append(((f.id - last) << 4) | t)
            else:
                self.out.append(t)
                self.zigzag(f.id)
            self.value(f.type, f.value)
            last = f.id
        self.out.append(0)


def _get(fields: list[Field], fid: int) -> Field | None:
    return next((f for f in fields if f.id == fid), None)


def read_footer(path: Path) -> tuple[list[Field], int]:
    """A Parquet file's decoded ``FileMetaData`` and the byte where it starts."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(size - 8)
        tail = fh.read(8)
        if size < 12 or head != MAGIC or tail[4:] != MAGIC:
            raise ValueError(f"{path}: not a readable Parquet file (no PAR1 magic)")
        length = struct.unpack("<I", tail[:4])[0]
        start = size - 8 - length
        fh.seek(start)
        raw = fh.read(length)
    reader = _Reader(raw)
    meta = reader.struct()
    if reader.pos != length:
        raise ValueError(f"{path}: the Parquet footer holds {length - reader.pos} bytes past its metadata")
    return meta, start


def encode(meta: list[Field]) -> bytes:
    w = _Writer()
    w.struct(meta)
    return bytes(w.out)


def _shift(row_group: list[Field], delta: int, ordinal: int) -> None:
    for f in row_group:
        if f.id == _RG_FILE_OFFSET:
            f.value += delta
        elif f.id == _RG_ORDINAL:
            f.value = ordinal
        elif f.id == _RG_COLUMNS:
            for chunk in f.value[2]:
                for c in chunk:
                    if c.id in (_CC_FILE_OFFSET, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX) and c.value:
                        c.value += delta
                    elif c.id == _CC_META:
                        for m in c.value:
                            if m.id in _CMD_OFFSETS and m.value:
                                m.value += delta


_FMD_KEY_VALUE = 5  # key_value_metadata (Arrow's schema, pandas' metadata): taken from ``like``


def concat(parts: list[Path], out: Path, like: Path | None = None) -> int:
    """Write ``parts`` (Parquet files written by the same writer with the same Parquet schema) as one file ``out``,
    row groups in order; returns its rows. The footer's other fields (the key-value metadata among them) come
    from ``like`` (default: the first part), a file of the same schema that may hold no rows. Raises ValueError
    naming the first part whose footer differs from ``like``'s in anything but row groups, rows and key-value
    metadata, or that holds a page index (its offsets are not rewritten)."""
    if not parts:
        raise ValueError("concat: no parts")
    first, _ = read_footer(like or parts[0])
    same = [f for f in first if f.id not in (_FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_KEY_VALUE)]
    groups: list = []
    rows = 0
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with open(tmp, "wb") as dst:
            dst.write(MAGIC)
            for part in parts:
                meta, start = read_footer(part)
                if [f for f in meta if f.id not in (_FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_KEY_VALUE)] != same:
                    raise ValueError(f"{part}: its schema or writer differs from {like or parts[0]}'s")
                delta = dst.tell() - 4
                for rg in (_get(meta, _FMD_ROW_GROUPS).value[2] if _get(meta, _FMD_ROW_GROUPS) else []):
                    if any(c.id in (_CC_OFFSET_INDEX, _CC_COLUMN_INDEX) for col in _get(rg, _RG_COLUMNS).value[2]
                           for c in col):
                        raise ValueError(f"{part}: holds a page index, which concat does not move")
                    _shift(rg, delta, len(groups))
                    groups.append(rg)
                rows += _get(meta, _FMD_NUM_ROWS).value
                with open(part, "rb") as src:
                    src.seek(4)
                    left = start - 4
                    while left:  # the row groups' bytes, unchanged
                        chunk = src.read(min(left, 1 << 24))
                        if not chunk:
                            raise ValueError(f"{part}: ends inside its row groups")
                        dst.write(chunk)
                        left -= len(chunk)
            merged = [Field(f.id, f.type, f.value) for f in first]
            for f in merged:
                if f.id == _FMD_NUM_ROWS:
                    f.value = rows
                elif f.id == _FMD_ROW_GROUPS:
                    f.value = ("list", _STRUCT, groups)
            footer = encode(merged)
            dst.write(footer + struct.pack("<I", len(footer)) + MAGIC)
            dst.flush()
            os.fsync(dst.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out)
    return rows
