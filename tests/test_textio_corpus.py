"""Tests for syntaxnmt.textio (strict UTF-8 plain/gzip reading, atomic writes) and syntaxnmt.data.corpus."""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import sys

import pytest

from syntaxnmt.data.corpus import length_filter, read_parallel
from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write, atomic_write_text, iter_lines, iter_stream_lines, read_input, read_lines, read_text, remove_stale_temporaries, write_lines

LINES = ["the dog sees a cat .", "", "  ", "Grüße, 世界 !", "last line"]


def _plain(path, lines):
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def _gz(path, lines):
    with gzip.open(path, "wb") as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


# ---------------------------------------------------------------- reading


def test_plain_and_gzip_read_identically(tmp_path):
    plain = read_lines(_plain(tmp_path / "a.txt", LINES))
    packed = read_lines(_gz(tmp_path / "a.txt.gz", LINES))
    assert plain == packed == LINES


def test_line_endings_are_stripped_but_not_other_whitespace(tmp_path):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\n two \r\nthree")
    assert read_lines(path) == ["one", " two ", "three"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nstill fine\nbro\xffken\nafter\n")
    with pytest.raises(UserError) as exc:
        read_lines(path)
    assert f"{path}:3:" in str(exc.value) and "UTF-8" in str(exc.value)


def test_invalid_utf8_in_gzip_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"ok\n\xc3\x28 broken\n")
    with pytest.raises(UserError) as exc:
        read_lines(path)
    assert f"{path}:2:" in str(exc.value)


def test_valid_lines_before_an_error_are_yielded(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"a\nb\n\xff\n")
    it = iter_lines(path)
    assert next(it) == "a" and next(it) == "b"
    with pytest.raises(UserError):
        next(it)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_lines(tmp_path / "missing.txt")
    with pytest.raises(UserError, match="directory"):
        read_lines(tmp_path)


def test_corrupt_gzip_is_a_user_error(tmp_path):
    path = tmp_path / "corrupt.gz"
    path.write_bytes(b"this is not gzip data\n")
    with pytest.raises(UserError, match="corrupt.gz"):
        read_lines(path)
    truncated = tmp_path / "truncated.gz"
    _gz(tmp_path / "full.gz", [f"line {i}" for i in range(2000)])
    truncated.write_bytes((tmp_path / "full.gz").read_bytes()[:200])
    with pytest.raises(UserError, match="truncated.gz"):
        read_lines(truncated)


# ---------------------------------------------------------------- input hygiene (issue 49): BOM, line limit


BOM = "\ufeff".encode("utf-8")


def test_a_byte_order_mark_at_the_start_is_removed_from_files_gzip_stdin_and_whole_texts(tmp_path, monkeypatch):
    plain = tmp_path / "bom.txt"
    plain.write_bytes(BOM + b"every dog\n\xef\xbb\xbfkept inside\n")
    packed = tmp_path / "bom.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    expected = ["every dog", "\ufeffkept inside"]  # only the file's first character is a byte-order mark
    assert read_lines(plain) == read_lines(packed) == expected
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(plain.read_bytes())))
    assert read_input(None) == expected
    assert read_text(plain) == "every dog\n\ufeffkept inside\n"


def test_a_utf16_file_is_refused_as_such(tmp_path):
    path = tmp_path / "utf16.txt"
    path.write_bytes("a red house .\n".encode("utf-16"))
    with pytest.raises(UserError, match=rf"^{path}:1: starts with a UTF-16 byte-order mark"):
        read_lines(path)
    with pytest.raises(UserError, match="UTF-16"):
        read_text(path)


def test_a_line_over_the_limit_names_the_file_and_line(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"short\n" + b"x" * 11 + b"\nafter\n")
    with open(path, "rb") as f:
        lines = iter_stream_lines(f, path, max_line_bytes=10)
        assert next(lines) == "short"
        with pytest.raises(UserError, match=rf"^{path}:2: line longer than 10 bytes"):
            next(lines)
    assert list(iter_stream_lines(io.BytesIO(b"x" * 10 + b"\r\n"), path, max_line_bytes=10)) == ["x" * 10]


def test_an_input_without_end_is_an_error_not_unbounded_memory(tmp_path):
    with pytest.raises(UserError, match=r"^/dev/zero:1: line longer than 1,048,576 bytes"):
        read_lines("/dev/zero")
    with pytest.raises(UserError, match=r"^<stdin>:1: line longer"):
        list(iter_stream_lines(io.BytesIO(b"y" * 100), "<stdin>", max_line_bytes=50))


def test_a_whole_text_over_its_limit_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: 1\n" * 10)
    with pytest.raises(UserError, match=rf"^{path}: larger than 20 bytes"):
        read_text(path, max_bytes=20)
    path.write_bytes(b"a: 1\nb: 2\nc: \xff\n")
    with pytest.raises(UserError, match=rf"^{path}:3: invalid UTF-8"):
        read_text(path)


def test_every_command_reads_a_byte_order_mark_alike(tmp_path, monkeypatch, capsys):
    """Issue 49: ``evaluate`` scored identical text 98.30, ``parse`` tagged '\ufeffevery' NUM."""
    from syntaxnmt.cli import main

    text = "every dog barks .\nthe man sees a red house .\n"
    (tmp_path / "ref.txt").write_text(text, encoding="utf-8")
    (tmp_path / "hyp.txt").write_bytes(BOM + text.encode("utf-8"))
    main(["evaluate", "--hyp", str(tmp_path / "hyp.txt"), "--ref", str(tmp_path / "ref.txt")])
    assert "BLEU = 100.00" in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BOM + text.encode("utf-8"))))
    main(["parse"])
    out = capsys.readouterr().out
    words = [row.split("\t") for row in out.splitlines() if row and not row.startswith("#")]
    assert "# text = every dog barks .\n" in out and words[0][1:4] == ["every", "_", "DET"]


# ---------------------------------------------------------------- writing


def test_write_lines_round_trip_and_no_temp_files(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    write_lines(path, LINES)
    assert read_lines(path) == LINES
    assert os.listdir(path.parent) == ["out.txt"]


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "keep.txt"
    atomic_write_text(path, "old\n")

    def explode(f):
        f.write(b"half of the new content")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        atomic_write(path, explode)
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_write_to_a_fifo_goes_through_it_and_leaves_it_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is waiting (the text fits the pipe's buffer)
    try:
        write_lines(fifo, ["first", "second"])
        assert os.read(reader, 65536) == b"first\nsecond\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_write_to_dev_full_is_a_user_error_and_leaves_the_device():
    with pytest.raises(UserError, match=r"^/dev/full: cannot write \(") as e:
        atomic_write_text("/dev/full", "x" * 100_000)
    assert ".tmp" not in str(e.value)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_write_to_a_directory_is_a_user_error(tmp_path):
    target = tmp_path / "folder"
    target.mkdir()
    (target / "inside.txt").write_text("kept")
    with pytest.raises(UserError, match="folder: is a directory"):
        write_lines(target, ["a"])
    assert (target / "inside.txt").read_text() == "kept"


def test_failed_write_names_the_target_and_leaves_no_temporary(tmp_path):
    """A full disk during an atomic write: the error names the file the user asked for (not the
    temporary), the old file is intact and no temporary is left."""
    path = tmp_path / "out.txt"
    atomic_write_text(path, "old\n")

    def disk_full(f):
        f.write(b"half of it")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UserError) as e:
        atomic_write(path, disk_full)
    assert str(e.value) == f"{path}: cannot write ({os.strerror(errno.ENOSPC)})"
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]


# ---------------------------------------------------------------- parallel text


def test_read_parallel_drops_and_counts_empty_pairs(tmp_path):
    src = _plain(tmp_path / "s.txt", ["a b", "", "c", "d e", "   ", "f"])
    tgt = _gz(tmp_path / "t.txt.gz", ["A B", "X", "", "D E", "Y", "F"])
    par = read_parallel(src, tgt)
    assert par.src == ["a b", "d e", "f"]
    assert par.tgt == ["A B", "D E", "F"]
    assert par.line_numbers == [1, 4, 6]
    assert par.counts == {"read": 6, "empty": 3}


def test_read_parallel_line_count_mismatch(tmp_path):
    src = _plain(tmp_path / "src.txt", ["a", "b", "c"])
    tgt = _plain(tmp_path / "tgt.txt", ["A", "B"])
    with pytest.raises(UserError) as exc:
        read_parallel(src, tgt)
    msg = str(exc.value)
    assert str(src) in msg and str(tgt) in msg
    assert "3" in msg and "2" in msg


def test_read_parallel_invalid_utf8_and_missing_file(tmp_path):
    src = _plain(tmp_path / "src.txt", ["a", "b"])
    bad = tmp_path / "tgt.txt"
    bad.write_bytes(b"A\n\xfe\n")
    with pytest.raises(UserError, match=rf"{bad}:2:"):
        read_parallel(src, bad)
    with pytest.raises(UserError, match="nope.txt"):
        read_parallel(src, tmp_path / "nope.txt")


def test_length_filter_counts_each_rule_once():
    # (src, tgt) lengths; min 2, max 10, ratio 2.0
    pairs = [
        (5, 5),  # kept
        (1, 5),  # too short (also a bad ratio: counted under the first rule only)
        (2, 2),  # kept (boundary)
        (11, 4),  # too long (also a bad ratio)
        (10, 10),  # kept (boundary)
        (3, 7),  # bad ratio
        (4, 8),  # kept: ratio exactly 2
        (0, 0),  # too short
    ]
    keep, dropped = length_filter([s for s, _ in pairs], [t for _, t in pairs], min_len=2, max_len=10, max_ratio=2.0)
    assert keep == [0, 2, 4, 6]
    assert dropped == {"too_short": 2, "too_long": 1, "bad_ratio": 1}
    assert len(keep) + sum(dropped.values()) == len(pairs)


def _temporaries(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_respects_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_lines(tmp_path / "new.txt", ["a"])
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o640  # mkstemp alone gives 0600
        os.umask(0o002)
        write_lines(tmp_path / "group.txt", ["a"])
        assert (tmp_path / "group.txt").stat().st_mode & 0o777 == 0o664
        (tmp_path / "group.txt").chmod(0o600)  # a rewritten file keeps the mode it was given
        write_lines(tmp_path / "group.txt", ["b"])
        assert (tmp_path / "group.txt").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_write_killed_by_sigkill_leaves_a_temporary_that_the_next_start_removes(tmp_path):
    """kill -9 during a write leaves ``.NAME.syntaxnmt-PID.XXXXXXXX.tmp``: the next write of NAME (or a
    training or prepare start, which clean their folder) removes it; a live writer's is kept."""
    import signal
    import subprocess
    import sys
    import time

    target = tmp_path / "last.pt"
    writer = "import sys, time\nfrom syntaxnmt.textio import atomic_write\natomic_write(sys.argv[1], lambda f: (f.write(b'x' * 1000), f.flush(), time.sleep(60)))"
    proc = subprocess.Popen([sys.executable, "-c", writer, str(target)])
    deadline = time.monotonic() + 60
    while not _temporaries(tmp_path):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (left,) = _temporaries(tmp_path)
    assert left.startswith(f".last.pt.syntaxnmt-{proc.pid}.")
    alive = tmp_path / f".best.pt.syntaxnmt-{os.getpid()}.abcd1234.tmp"  # this process is writing it
    alive.write_bytes(b"")
    assert [p.name for p in remove_stale_temporaries(tmp_path)] == [left]
    assert _temporaries(tmp_path) == [alive.name]
    proc = subprocess.Popen([sys.executable, "-c", writer, str(target)])
    while len(_temporaries(tmp_path)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    write_lines(target, ["done"])  # the next write of the same file
    assert _temporaries(tmp_path) == [alive.name] and target.read_text() == "done\n"


def test_stale_temporary_cleanup_removes_only_its_own_and_enters_subfolders(tmp_path):
    """Issue 49: the cleanup removed a user's ``.backup.2024.tmp/`` folder (any ``.NAME.X.tmp``),
    recursively, and never looked below the top of a run (a kill during a periodic ``step-N.pt``
    write left its temporary forever). Now only ``.NAME.syntaxnmt-PID.XXXXXXXX.tmp`` of a dead
    writer goes, in subfolders too with ``recursive``."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True).stdout.strip()
    users = [tmp_path / ".backup.2024.tmp", tmp_path / ".notes.txt.123.tmp", tmp_path / ".config.yaml.k2j4h5g6.tmp", tmp_path / "checkpoints" / ".mine.1.tmp"]
    users[0].mkdir()
    (users[0] / "precious.txt").write_text("mine")
    for p in users[1:]:
        p.parent.mkdir(exist_ok=True)
        p.write_text("mine")
    ours = [tmp_path / f".last.pt.syntaxnmt-{dead}.abcd_123.tmp", tmp_path / "checkpoints" / f".step-00000006.pt.syntaxnmt-{dead}.zz99yy88.tmp"]
    for p in ours:
        p.write_bytes(b"half")
    assert remove_stale_temporaries(tmp_path) == [ours[0]]
    ours[0].write_bytes(b"half")
    assert sorted(remove_stale_temporaries(tmp_path, recursive=True)) == sorted(ours)
    assert all(p.exists() for p in users) and (users[0] / "precious.txt").read_text() == "mine"


def test_a_write_protected_output_is_refused_as_cp_refuses_it(tmp_path):
    """Issue 49: a 0444 file was replaced through the rename; now it is refused and kept."""
    target = tmp_path / "out.txt"
    target.write_text("read-only\n")
    target.chmod(0o444)
    with pytest.raises(UserError, match="out.txt: cannot write \\(Permission denied"):
        write_lines(target, ["new"])
    assert target.read_text() == "read-only\n" and _temporaries(tmp_path) == []
