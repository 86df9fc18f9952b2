from __future__ import annotations

from stages.provenance.hashing import dir_md5, folder_manifest, md5_file, path_hashes


def test_folder_hash_is_the_one_dvc_computes(tmp_path):
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta
    from dvc_data.hashfile.tree import Tree

    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "sub" / "b.bin").write_bytes(bytes(range(256)) * 50)
    (tmp_path / "sub" / "deeper" / "c.json").write_text('{"x": 1}')
    manifest = folder_manifest(tmp_path)
    assert sorted(manifest) == ["a.txt", "sub/b.bin", "sub/deeper/c.json"]
    tree = Tree()
    for rel, md5 in manifest.items():
        tree.add(tuple(rel.split("/")), Meta(), HashInfo("md5", md5))
    tree.digest()
    assert dir_md5(manifest) == tree.hash_info.value
    assert path_hashes(tmp_path) == (tree.hash_info.value, manifest)


def test_a_file_hash_is_its_md5_and_bytecode_caches_do_not_count(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    assert path_hashes(tmp_path / "m.py") == (md5_file(tmp_path / "m.py"), {"": md5_file(tmp_path / "m.py")})
    before = path_hashes(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00cache")
    assert path_hashes(tmp_path) == before
    (tmp_path / "n.py").write_text("y = 2\n")
    assert path_hashes(tmp_path) != before
