"""`kdakit kernels sweep` (kernels/tools/sweep.py): the case list, the CPU-interpretable part of a worker
under Triton's interpreter at tiny shapes (SGLang's Triton chunk_kda as reference and, trimming the padded
gate rows itself, as the arm; kdakit's and SGLang's Helion decode refusing K = V = 96), a planted padded-row
bug, and the parent's row-by-row record when a worker is cut short. kdakit's Helion prefill itself is compared
with the fp64 reference on the CPU in test_prefill.py; here it would cost half a minute of compilation."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
from kdakit.kernels.tools import sweep
from kdakit.kernels.tools.testing import fresh_upstream, interpreter

torch = pytest.importorskip("torch")

TINY = sweep.SweepConfig(
    lengths=(17, 1), heads=(1,), layouts=("fixed", "varlen"), precisions=("float32",), head_dim=16,
    gate_padding=8, activations="float32",
)  # fmt: skip


def test_the_default_sweep_is_the_prs_216_cases_plus_t1_probes_first():
    planned = sweep.cases(sweep.SweepConfig())
    assert sum(1 for c in planned if c.length > 1) == 216
    first_group = {(c.heads, c.layout, c.precision) for c in planned if c.length == 1}
    assert len(first_group) == 12 and all(c.length == 1 for c in planned[:12])
    assert sweep.Case(9, 4, "varlen", "float32").lengths(2) == [9, 5]


@pytest.fixture(scope="module")
def kernels():
    """SGLang's Triton chunk_kda imported under the interpreter, and kdakit's entry points."""
    with fresh_upstream():
        try:
            triton, prefill, decode = sweep.load_arm("helion-kdakit")
        except Exception as exc:  # noqa: BLE001 - no SGLang here: nothing to compare with
            pytest.skip(f"SGLang's kernels unavailable: {exc}")
        yield triton, prefill, decode


def _work(tmp_path, loaded, cfg=TINY):
    from kdakit.kernels.tools import interpret

    with interpreter(), interpret.sglang_builtin_aliases():
        case_list = sweep.cases(cfg)
        return sweep.worker("helion-kdakit", cfg, tmp_path / "rows.jsonl", device="cpu", loaded=loaded,
                            case_list=case_list)  # fmt: skip


def _trims(triton):
    """SGLang's Triton chunk_kda fed only its tokens' gate/beta rows: the contract a Helion arm keeps."""

    def arm(**kw):
        n = kw["q"].shape[1]
        return triton(**{**kw, "g": kw["g"][:, :n], "beta": kw["beta"][:, :n]})

    return arm


def test_a_worker_runs_t1_first_writes_every_row_and_checks_the_decode_refusal(kernels, tmp_path):
    triton, _, decode = kernels
    rows = _work(tmp_path, (triton, _trims(triton), decode))
    written = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert written == rows  # every row on disk as it finished
    assert rows[0]["length"] == 1
    cases = [r for r in rows if "case" in r]
    assert len(cases) == 4 and all(r["ok"] for r in cases), [r for r in cases if not r["ok"]]
    refusal = rows[-1]
    assert refusal["check"] == "decode-non-power-of-two" and refusal["ok"], refusal
    assert refusal["error"].startswith("ValueError: ") and "96" in refusal["error"]
    result = sweep.summarize(rows, TINY, ["helion-kdakit"])
    summary = result["summary"]["helion-kdakit"]
    assert summary["passed"] == 2 and summary["probes"] == {"expected": 2, "run": 2, "passed": 2}
    assert not sweep.any_failure(result)
    assert "| kdakit Helion | 2 / 2 | 2 / 2 | T1 H1 fixed float32 |" in sweep.render(result)


def test_sglangs_helion_decode_refuses_odd_head_dims_too(kernels):
    from kdakit.kernels.tools import upstream

    decode = upstream.load().helion_packed_decode
    if decode is None:
        pytest.skip("SGLang's Helion decode does not import here")
    refusal = sweep.decode_refusal(decode, "cpu")
    assert refusal["ok"] and "power-of-two" in refusal["error"], refusal


def test_an_arm_that_reads_the_padded_gate_rows_fails(kernels, tmp_path):
    """The planted bug: an arm taking the last T gate/beta rows (the padding) instead of the first T."""
    triton, _, decode = kernels

    def reads_padding(**kw):
        n = kw["q"].shape[1]
        return triton(**{**kw, "g": kw["g"][:, -n:], "beta": kw["beta"][:, -n:]})

    cfg = dataclasses.replace(TINY, lengths=(17,), layouts=("varlen",))
    assert _work(tmp_path, (triton, _trims(triton), decode), cfg)[0]["ok"]
    rows = _work(tmp_path, (triton, reads_padding, decode), cfg)
    assert not rows[-2]["ok"] and rows[-2]["rel_err"]["out"] > 0.1


def test_a_worker_cut_short_keeps_its_rows_and_is_named(tmp_path, monkeypatch):
    row = {"arm": "helion-kdakit", "case": "T2 H2 fixed float32", "length": 2, "heads": 2, "layout": "fixed",
           "precision": "float32", "status": "ok", "ok": True,
           "rel_err": {"out": 1e-3, "prefill_state": 2e-3}}  # fmt: skip
    line = json.dumps(json.dumps(row))
    code = f"import sys, time; open(sys.argv[1], 'a').write({line} + '\\n'); time.sleep(60)"
    monkeypatch.setattr(
        sweep, "worker_command", lambda arm, cfg, path, *shard: [sys.executable, "-c", code, str(path)]
    )
    result = sweep.run(["helion-kdakit"], TINY, tmp_path, timeout_s=3, log=lambda m: None)
    assert result["worker_exits"] == {"helion-kdakit": "cut short after 3 s"}
    assert result["summary"]["helion-kdakit"]["run"] == 1 and sweep.any_failure(result)
    assert json.loads((tmp_path / sweep.RESULT_NAME).read_text())["rows"] == [row]


def test_an_arm_split_over_workers_starts_every_process_with_t1_and_runs_each_case_once():
    planned = sweep.cases(sweep.SweepConfig())
    parts = sweep.shards(planned, 5)
    assert len(parts) == 5 and all(part[0].length == 1 for part in parts)
    assert sorted(c.key() for part in parts for c in part) == sorted(c.key() for c in planned)
    assert max(map(len, parts)) - min(map(len, parts)) <= 2
    assert len(sweep.shards(planned, 100)) == 12  # never more processes than T = 1 probes
    assert sweep.shards(planned, 0) == [planned]


def test_each_worker_process_runs_its_shard_and_only_the_first_checks_the_decode(tmp_path, monkeypatch):
    """The real worker command in fresh processes, with worker() replaced by a stand-in module (loaded
    through KDAKIT_PRELOAD, as the GPU host loads its stubs) that records what each process was given."""
    (tmp_path / "standin_worker.py").write_text(
        "import json\n"
        "from kdakit.kernels.tools import sweep\n"
        "def worker(arm, cfg, rows_path, case_list=None, decode_check=True):\n"
        "    with open(rows_path, 'a') as f:\n"
        "        for c in case_list:\n"
        "            row = {'arm': arm, **sweep.dataclasses.asdict(c), 'case': c.key(), 'status': 'ok',\n"
        "                   'ok': True, 'rel_err': {'out': 0.0, 'prefill_state': 0.0}}\n"
        "            f.write(json.dumps(row) + '\\n')\n"
        "        if decode_check:\n"
        "            f.write(json.dumps({'arm': arm, 'check': 'decode-non-power-of-two', 'ok': True,\n"
        "                                'error': 'ValueError: K=96'}) + '\\n')\n"
        "sweep.worker = worker\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("KDAKIT_PRELOAD", "standin_worker")
    cfg = dataclasses.replace(sweep.SweepConfig(), lengths=(1, 2, 3, 64), heads=(4,), precisions=("float32",))
    result = sweep.run(
        ["helion-kdakit", "helion-upstream"], cfg, tmp_path / "out", 120, lambda m: None, workers=2
    )
    assert result["worker_exits"] == {"helion-kdakit": 0, "helion-upstream": 0}
    for arm in ("helion-kdakit", "helion-upstream"):
        s = result["summary"][arm]
        assert (s["run"], s["passed"], s["probes"]["run"]) == (6, 6, 2), s
        assert s["first_case"].startswith("T1 ") and s["decode_refusal"]["ok"]
        keys = [r["case"] for r in result["rows"] if r["arm"] == arm and "case" in r]
        assert sorted(keys) == sorted(c.key() for c in sweep.cases(cfg))  # every case once
    assert sum(1 for r in result["rows"] if r.get("check")) == 2  # one decode check per arm
    assert not sweep.any_failure(result)
