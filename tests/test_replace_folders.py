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
    assert "error: runs: not a folder written by `syntaxnmt demo` (no .syntaxnmt-demo in it; it holds best.pt)" in err
    assert files_of(home) == before


def test_demo_fresh_refuses_an_unmarked_folder_of_demo_names(capsys, home):
    """Issue 49: a user's own ``corpus/`` and ``run/best.pt`` were deleted because their names are
    the demo's (the unmarked folder was taken for an older demo's): an unmarked folder is never removed."""
    mine = home / "project"
    (mine / "corpus").mkdir(parents=True)
    (mine / "corpus" / "train.src").write_text("my corpus\n")
    (mine / "run").mkdir()
    (mine / "run" / "best.pt").write_bytes(b"my trained model")
    before = files_of(home)
    err = one_line_error(*run_cli(capsys, "demo", "--dir", "project", "--fresh", "--minutes", "0.01"))
    assert "error: project: not a folder written by `syntaxnmt demo` (no .syntaxnmt-demo in it; it holds corpus, run)" in err
    assert files_of(home) == before


def test_demo_fresh_refuses_a_marked_folder_holding_what_the_user_added(capsys, home):
    """Issue 49: ``--fresh`` on the demo's own folder deleted ``my_experiment/best.pt`` and
    ``NOTES.md`` a user had added; checked entry by entry (``corpus/`` holds the corpus' files only)."""
    marked = home / "demo"
    (marked / "corpus").mkdir(parents=True)
    write_marker(marked, demo.MARKER, demo.WRITTEN_BY)
    for name in ("demo.yaml", "test.hyp", "corpus/train.src", "run/last.pt"):
        (marked / name).parent.mkdir(exist_ok=True)
        (marked / name).write_text("the demo's")
    demo.refuse_to_remove(marked)  # only its own: removable
    (marked / "NOTES.md").write_text("mine")
    (marked / "my_experiment").mkdir()
    (marked / "my_experiment" / "best.pt").write_bytes(b"mine")
    (marked / "corpus" / "mine.src").write_text("mine")
    before = files_of(home)
    err = one_line_error(*run_cli(capsys, "demo", "--dir", "demo", "--fresh", "--minutes", "0.01"))
    assert "error: demo: holds what `syntaxnmt demo` did not write (NOTES.md, corpus/mine.src, my_experiment);" in err
    assert files_of(home) == before


def test_demo_refuses_to_write_into_a_folder_of_the_users_files_without_force(capsys, home, monkeypatch):
    """Issue 49: ``demo --dir P`` (no ``--fresh``) wrote its corpus over the user's
    ``corpus/train.src``; now a folder the demo did not write is refused unless ``--force``."""
    mine = home / "project"
    (mine / "corpus").mkdir(parents=True)
    (mine / "corpus" / "train.src").write_text("my corpus\n")
    before = files_of(home)
    err = one_line_error(*run_cli(capsys, "demo", "--dir", "project", "--minutes", "0.01"))
    assert "error: project: holds files `syntaxnmt demo` did not write (corpus); it writes into a new or empty folder or one it wrote: give another folder, or --force" in err
    assert files_of(home) == before
    reached = []
    monkeypatch.setattr(demo, "write_corpus", lambda folder, seed: reached.append(folder) or (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        demo.run_demo(mine, minutes=0.01, force=True)
    assert reached == [mine / "corpus"] and not (mine / demo.MARKER).exists()  # --force: written into, left unmarked


# ---------------------------------------------------------------- prepare


def test_prepare_removes_only_its_own_arrays(tmp_path):
    ours = ["train.src.data.npy", "train.src.offsets.npy", "dev.heads.data.npy", "train.upos.offsets.npy", "train.align.data.npy"]
    theirs = ["embeddings.npy", "train.npy", "test.src.data.npy", "train.mine.data.npy"]
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"")
    assert sorted(p.name for p in prepared_arrays(tmp_path)) == sorted(ours)


def test_force_refuses_an_export_holding_a_file_the_user_added(home, monkeypatch):
    """Issue 49: ``export-ct2 --force`` deleted a file the user had added to an export. The marker
    lists the export's entries; anything else in the folder is listed in a refusal and kept."""
    monkeypatch.setattr("syntaxnmt.decoding.ct2_export.load_model", lambda path, device: (None, None, None))
    monkeypatch.setattr(export_module, "write_export", lambda model, cfg, toks, out, quantization="float32": (out / "model.bin").write_text(quantization))
    export_ct2("runs/best.pt", "ct2")
    assert json.loads((home / "ct2" / MARKER).read_text())["entries"] == ["model.bin"]
    (home / "ct2" / "NOTES.md").write_text("how I use this export")
    before = files_of(home)
    with pytest.raises(UserError, match=r"ct2: holds what `syntaxnmt export-ct2` did not write \(NOTES.md\); --force replaces only an export holding nothing else"):
        export_ct2("runs/best.pt", "ct2", "int8", force=True)
    assert files_of(home) == before
