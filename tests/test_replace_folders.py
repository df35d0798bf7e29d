"""``--force`` and ``--fresh`` never delete what syntaxnmt did not write (issue 25).

``export-ct2 -o . --force`` deleted the current directory, ``export-ct2 --checkpoint D/best.pt -o D
--force`` the checkpoint being exported. The refusals below happen before the checkpoint is read,
so these tests need neither CTranslate2 nor a trained model (``test_export_ct2.py`` replaces a
real export).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syntaxnmt.cli import main
from syntaxnmt.data.prepare import prepared_arrays
from syntaxnmt.decoding import ct2_export as export_module
from syntaxnmt.decoding.ct2_export import MARKER, export_ct2
from syntaxnmt.errors import UserError
from syntaxnmt.experiments import demo
from syntaxnmt.textio import write_marker


def run_cli(capsys, *argv) -> tuple[int, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


def one_line_error(code: int, err: str) -> str:
    assert code == 2 and err.count("\n") == 1 and err.startswith("syntaxnmt: error: "), err
    return err


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user's folder, the current directory, holding a checkpoint and notes."""
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    (home / "runs" / "best.pt").write_bytes(b"the weights")
    (home / "notes.txt").write_text("mine")
    monkeypatch.chdir(home)
    return home


def test_force_refuses_the_current_directory_and_its_parents(capsys, home):
    before = files_of(home.parent)
    for out, why in ((".", "is the current directory"), ("..", "is a parent of the current directory"), (str(home), "is the current directory")):
        err = one_line_error(*run_cli(capsys, "export-ct2", "--checkpoint", "runs/best.pt", "-o", out, "--force"))
        assert f"error: {out}: {why}" in err
    assert files_of(home.parent) == before


def test_force_refuses_the_folder_of_the_checkpoint_being_exported(capsys, home):
    write_marker(home / "runs", MARKER, export_module.WRITTEN_BY)  # even one that looks like an export
    before = files_of(home)
    for out in ("runs", str(home / "runs")):
        err = one_line_error(*run_cli(capsys, "export-ct2", "--checkpoint", "runs/best.pt", "-o", out, "--force"))
        assert f"error: {out}: holds runs/best.pt;" in err
    assert files_of(home) == before


def test_force_refuses_a_folder_it_did_not_write(capsys, home):
    other = home / "other"
    other.mkdir()
    (other / "data.txt").write_text("not an export")
    (other / MARKER).write_text('{"written_by": "someone else"}\n')  # a marker must say export-ct2
    err = one_line_error(*run_cli(capsys, "export-ct2", "--checkpoint", "runs/best.pt", "-o", "other", "--force"))
    assert f"error: other: not written by `syntaxnmt export-ct2` (no {MARKER} in it)" in err
    assert (other / "data.txt").read_text() == "not an export"
    (home / "link").symlink_to(other)
    err = one_line_error(*run_cli(capsys, "export-ct2", "--checkpoint", "runs/best.pt", "-o", "link", "--force"))
    assert "error: link: is a symbolic link;" in err and (other / "data.txt").is_file()


def test_force_replaces_its_own_export(home, monkeypatch):
    """An export carries the marker; ``force`` swaps a marked folder for the new export and leaves
    no temporary folder behind."""
    written = []

    def fake_export(model, cfg, toks, out, quantization="float32"):
        written.append(quantization)
        (out / "model.bin").write_text(quantization)

    monkeypatch.setattr("syntaxnmt.decoding.ct2_export.load_model", lambda path, device: (None, None, None))
    monkeypatch.setattr(export_module, "write_export", fake_export)
    out = export_ct2("runs/best.pt", "ct2")
    assert out == Path("ct2") and (home / "ct2" / "model.bin").read_text() == "float32"
    marker = json.loads((home / "ct2" / MARKER).read_text())
    assert marker["written_by"] == "syntaxnmt export-ct2" and marker["checkpoint"] == str(home / "runs" / "best.pt")
    with pytest.raises(UserError, match="exists and is not an empty folder"):
        export_ct2("runs/best.pt", "ct2", "int8")
    export_ct2("runs/best.pt", "ct2", "int8", force=True)
    assert (home / "ct2" / "model.bin").read_text() == "int8" and written == ["float32", "int8"]
    assert sorted(p.name for p in home.iterdir()) == ["ct2", "notes.txt", "runs"]  # no temporaries
    assert (home / "runs" / "best.pt").read_bytes() == b"the weights"


# ---------------------------------------------------------------- demo --fresh


def test_demo_fresh_refuses_a_folder_it_did_not_write(capsys, home):
    before = files_of(home)
    err = one_line_error(*run_cli(capsys, "demo", "--dir", ".", "--fresh"))
    assert "error: .: is the current directory" in err
    err = one_line_error(*run_cli(capsys, "demo", "--dir", "runs", "--fresh"))
    assert "error: runs: not a folder written by `syntaxnmt demo` (it holds best.pt)" in err
    assert files_of(home) == before


def test_demo_fresh_removes_a_demo_folder(home):
    old = home / "old-demo"  # written by a version without the marker: only the demo's own names
    (old / "corpus").mkdir(parents=True)
    (old / "demo.yaml").write_text("name: demo\n")
    (old / "test.hyp").write_text("")
    demo.refuse_to_remove(old)
    marked = home / "demo"
    marked.mkdir()
    write_marker(marked, demo.MARKER, demo.WRITTEN_BY)
    (marked / "extra.txt").write_text("")
    demo.refuse_to_remove(marked)
    (old / "mine.txt").write_text("")
    with pytest.raises(UserError, match="it holds mine.txt"):
        demo.refuse_to_remove(old)


# ---------------------------------------------------------------- prepare


def test_prepare_removes_only_its_own_arrays(tmp_path):
    ours = ["train.src.data.npy", "train.src.offsets.npy", "dev.heads.data.npy", "train.upos.offsets.npy", "train.align.data.npy"]
    theirs = ["embeddings.npy", "train.npy", "test.src.data.npy", "train.mine.data.npy"]
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"")
    assert sorted(p.name for p in prepared_arrays(tmp_path)) == sorted(ours)
