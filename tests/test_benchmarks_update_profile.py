"""benchmarks/update_profile.py: the products' share of an update and the bound it sets (tiny model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "update_profile.py"


class Event:
    def __init__(self, key: str, us: float, flops: int = 0, count: int = 1):
        self.key, self.self_cpu_time_total, self.flops, self.count = key, us, flops, count


def test_the_summary_counts_only_the_products_and_derives_the_bound():
    bench = load_script(SCRIPT)
    events = [Event("aten::mm", 600_000, 60 * 10**9, 20), Event("aten::addmm", 200_000, 20 * 10**9, 4), Event("_Attention", 150_000), Event("aten::copy_", 50_000, count=40)]
    s = bench.summarize(events, updates=2, tokens=8000, top=2)
    assert s["products_gflop_per_update"] == 40.0 and s["products_ms_per_update"] == 400.0
    assert s["products_gflops"] == 100.0 and s["products_share"] == 0.8
    assert s["tok_s_products_only"] == 10_000 and s["tok_s_profiled"] == 8_000  # 8000 tokens in 0.8 s of products, 1 s in all
    assert [r["name"] for r in s["top"]] == ["aten::mm", "aten::addmm"] and s["top"][0]["calls_per_update"] == 10


def test_profiles_a_tiny_model_end_to_end(make_config, tmp_path):
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(make_config().model_dump(mode="json")), encoding="utf-8")
    out = tmp_path / "profile.json"
    cmd = [sys.executable, str(SCRIPT), "--config", str(cfg_path), "--updates", "2", "--warmup", "1", "--threads", "1", "--top", "3", "--reference", "128", "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["products_gflop_per_update"] > 0 and 0 < doc["products_share"] < 1 and len(doc["top"]) == 3
    assert doc["tok_s_products_only"] > doc["tok_s_profiled"] > 0 and doc["machine"]["load_average_after"] is not None
    assert "aten::addmm" in [row["name"] for row in doc["top"]] or "aten::mm" in [row["name"] for row in doc["top"]]  # ATen's products, whatever the tests' kernel setting
    assert "if everything but the products cost nothing" in r.stdout and "products (aten::mm, aten::addmm):" in r.stdout


def test_a_missing_config_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--config", str(tmp_path / "none.yaml")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [f"update_profile: {tmp_path / 'none.yaml'} not found (benchmarks/side_by_side.py writes the default; or give --config)"]
