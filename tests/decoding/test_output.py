"""Tests for syntaxnmt.decoding.output: raw lines in, one output line per input line."""

from __future__ import annotations

from conftest import run_translate, untrained_checkpoint


def test_empty_and_blank_lines_translate_to_empty_lines(trained_run, corpus, tmp_path):
    sources = corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:2]
    alone = run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, "\n".join(sources) + "\n")
    mixed = run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt"], tmp_path, f"\n{sources[0]}\n  \t \n{sources[1]}\n")
    assert alone.returncode == 0 and mixed.returncode == 0, mixed.stderr.decode()
    first, second = alone.stdout.decode().splitlines()
    assert mixed.stdout.decode().split("\n") == ["", first, "", second, ""]  # 4 lines, 2 of them empty
    nbest = run_translate(["--checkpoint", f"{trained_run.work_dir}/best.pt", "--nbest", "2"], tmp_path, f"{sources[0]}\n\n")
    assert nbest.stdout.decode().splitlines()[-1] == "1 |||  ||| 0.0000"


def test_over_long_line_is_cut_with_a_warning_naming_it(make_config, corpus, tmp_path):
    cfg = make_config({"model": {"max_positions": 24, "positions": "none"}})  # reads 22 subwords
    path = untrained_checkpoint(cfg, tmp_path / "short.pt")
    words = corpus["test"]["src"].read_text(encoding="utf-8").split()
    src = tmp_path / "in.txt"
    src.write_text(f"{' '.join(words[:5])}\n{' '.join(words[:60])}\n", encoding="utf-8")
    proc = run_translate(["--checkpoint", str(path), "-i", str(src), "--beam", "1"], tmp_path, "")
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(proc.stdout.decode().splitlines()) == 2
    warnings = [line for line in proc.stderr.decode().splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"syntaxnmt: warning: {src}:2: ")
    assert warnings[0].endswith("subwords, only the first 22 are translated (the model's max_positions)")
