"""Joining Parquet parts written by shard workers into one file without decoding: the bytes equal one writer's."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.cleaning.parquet_concat import concat, encode, read_footer

SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("n", pa.int64())])


def table(rows: int, seed: int = 0, width: int = 40) -> pa.Table:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(500)]
    return pa.table({"id": [f"d{i}" for i in range(rows)],
                     "text": [" ".join(rng.choices(words, k=rng.randint(1, width))) for _ in range(rows)],
                     "n": list(range(rows))}, schema=SCHEMA)


@pytest.mark.parametrize("rows, width, group", [(5000, 40, 2048), (3000, 1000, 2048), (3, 5, 2048)])
def test_parts_joined_equal_one_writer_byte_for_byte(tmp_path, rows, width, group):
    # width 1000: the text dictionary passes the writer's 1 MB limit after 1,024 rows and falls back to plain pages
    full = table(rows, width=width)
    pq.write_table(full, tmp_path / "one.parquet", compression="zstd", row_group_size=group)
    parts = []
    for k, lo in enumerate(range(0, rows, 2 * group)):
        parts.append(tmp_path / f"part{k}.parquet")
        pq.write_table(pa.Table.from_pylist(full.slice(lo, 2 * group).to_pylist(), schema=SCHEMA), parts[-1],
                       compression="zstd", row_group_size=group)
    assert concat(parts, tmp_path / "joined.parquet") == rows
    assert (tmp_path / "joined.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    assert pq.read_table(tmp_path / "joined.parquet").equals(full)
    assert not list(tmp_path.glob(".*"))  # no temporary left


def test_the_footer_decodes_and_encodes_to_the_same_bytes(tmp_path):
    t = table(3000).replace_schema_metadata({"k": "v" * 300})
    pq.write_table(t, tmp_path / "a.parquet", compression="zstd", row_group_size=500)
    meta, start = read_footer(tmp_path / "a.parquet")
    assert encode(meta) == (tmp_path / "a.parquet").read_bytes()[start:-8]


def test_key_value_metadata_comes_from_the_template(tmp_path):
    full = table(4100)
    with_meta = full.replace_schema_metadata({"origin": "the template"})
    pq.write_table(with_meta, tmp_path / "one.parquet", compression="zstd", row_group_size=2048)
    pq.write_table(with_meta.schema.empty_table(), tmp_path / "template.parquet", compression="zstd")
    parts = [tmp_path / "p0.parquet", tmp_path / "p1.parquet"]
    pq.write_table(full.slice(0, 2048), parts[0], compression="zstd", row_group_size=2048)
    pq.write_table(full.slice(2048), parts[1], compression="zstd", row_group_size=2048)
    concat(parts, tmp_path / "joined.parquet", like=tmp_path / "template.parquet")
    assert (tmp_path / "joined.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    assert pq.read_schema(tmp_path / "joined.parquet").metadata == {b"origin": b"the template"}


def test_a_part_of_another_schema_or_with_a_page_index_is_refused_naming_it(tmp_path):
    pq.write_table(table(10), tmp_path / "a.parquet")
    pq.write_table(table(10).rename_columns(["id", "body", "n"]), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match="b.parquet: its schema or writer differs"):
        concat([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out.parquet")
    pq.write_table(table(10), tmp_path / "c.parquet", write_page_index=True)
    with pytest.raises(ValueError, match="c.parquet: holds a page index"):
        concat([tmp_path / "a.parquet", tmp_path / "c.parquet"], tmp_path / "out.parquet")
    (tmp_path / "d.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="d.parquet: not a readable Parquet file"):
        concat([tmp_path / "d.parquet"], tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists() and not list(tmp_path.glob(".*"))
