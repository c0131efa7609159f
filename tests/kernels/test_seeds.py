"""`kdakit kernels seeds` (kernels/tools/seeds.py) on the CPU with stand-in children: a per-layer verify bench
cut short at its share of the budget still gives its rows, the sweep follows within what is left, and both
tables land in seeds.txt and are printed last."""

from __future__ import annotations

import json
import socket
import sys

from kdakit.kernels.tools import seeds, sweep, verify_layer


def test_a_bench_cut_short_keeps_its_rows_and_the_sweep_still_runs(tmp_path, monkeypatch, capsys):
    out_dir = tmp_path / "r" / socket.gethostname()
    layer_row = {"phase": verify_layer.PHASE, "shape": "1x6", "shape_label": "1 × 6", "floor_us": 1.5,
                 "arms": {"triton:snapshots": {"status": "ok", "check": {"ok": True},
                                               "per_call": {"median": 17.3}}}}  # fmt: skip
    partial = json.dumps({"kind": "kdakit.kernels-bench.partial", "rows": [layer_row]})
    bench = (
        f"import pathlib, time; d = pathlib.Path({str(out_dir)!r}); d.mkdir(parents=True, exist_ok=True); "
        f"(d / 'kernels-bench.partial.json').write_text({partial!r}); time.sleep(60)"
    )
    monkeypatch.setattr(seeds, "child_command", lambda args: [sys.executable, "-c", bench])
    case = {"case": "T2 H4 fixed float32", "length": 2, "heads": 4, "layout": "fixed", "precision": "float32"}
    worker = (
        "import json, sys; arm = sys.argv[1]; f = open(sys.argv[2], 'a'); "
        f"f.write(json.dumps({{'arm': arm, **{case!r}, 'status': 'ok', 'ok': True, "
        "'rel_err': {'out': 1e-3, 'prefill_state': 1e-3}}) + '\\n'); "
        "f.write(json.dumps({'arm': arm, 'check': 'decode-non-power-of-two', 'ok': True, "
        "'error': 'ValueError: K=96'}) + '\\n')"
    )
    monkeypatch.setattr(
        sweep, "worker_command", lambda arm, cfg, path, *shard: [sys.executable, "-c", worker, arm, str(path)]
    )
    monkeypatch.setattr(sweep, "default_workers", lambda arms: 1)  # one stand-in process per arm
    assert seeds.run(tmp_path, "r", budget_s=5.0, log=lambda m: None) == 1  # the bench was cut short
    printed = capsys.readouterr().out
    assert "| 1 × 6 | 17.30 |" in printed and "(partial: the bench exited cut short after 2 s)" in printed
    assert (
        "| kdakit Helion | 1 / 216 (1 run) |" in printed and "| SGLang Helion | 1 / 216 (1 run) |" in printed
    )
    assert (out_dir / seeds.TABLE_NAME).read_text() == printed
    assert len(list(out_dir.iterdir())) <= 8
