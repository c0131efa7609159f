"""The per-layer verify phase (kernels/tools/verify_layer.py) on the CPU: SGLang's own conv1d update and
Triton verify (snapshots, and the ReplaySSM ring write) under Triton's interpreter at a tiny shape, kdakit's
verify beside them, every arm checked against Triton's snapshots; the timer replaced by a counter. SGLang's
commit fold casts a loop variable, which the interpreter cannot (`range` yields ints there), so on the CPU
the ring is folded by `_fold` below, written from the recurrence: the ring's contents are still checked."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from kdakit.kernels.tools import bench, table, verify_layer
from kdakit.kernels.tools.testing import fresh_upstream, interpreter

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def arms():
    """SGLang's kernels imported under the interpreter (Triton binds kernels to it at import)."""
    from kdakit.kernels.verify import helion_kda_verify

    with fresh_upstream() as upstream:
        try:
            up = upstream.load()
        except Exception as exc:  # noqa: BLE001 - no SGLang here: nothing to compare with
            pytest.skip(f"SGLang's kernels unavailable: {exc}")
        yield {
            "verify:triton": up.triton_recurrent,
            "verify:helion-kdakit": helion_kda_verify,
            "verify-layer:conv1d-update": up.conv1d_update,
            "verify-layer:replayssm-commit": _fold,
        }


def _fold(*, checkpoint_state, rawv_cache, rawk_cache, gk_cache, beta_cache, ssm_state_indices, accept_lens,
          num_k_heads, **_):  # fmt: skip
    """The accepted window replayed from the ring into the pool: per step, k L2-normalized, the state decayed
    by exp(gate) along K, then the delta rule with the ring's beta (value heads share key heads in groups)."""
    hv = checkpoint_state.shape[1]
    for slot, accepted in zip(ssm_state_indices.tolist(), accept_lens.tolist(), strict=True):
        state = checkpoint_state[slot].double()  # [HV, V, K]
        for t in range(accepted):
            for head in range(hv):
                k = rawk_cache[slot, head // (hv // num_k_heads), t].double()
                k = k / torch.sqrt((k * k).sum() + 1e-6)
                state[head] *= torch.exp(gk_cache[slot, head, t].double())[None, :]
                error = rawv_cache[slot, head, t].double() - state[head] @ k
                state[head] += beta_cache[slot, head, t].double() * torch.outer(error, k)
        checkpoint_state[slot] = state.to(checkpoint_state.dtype)


CFG = dataclasses.replace(bench.BenchConfig(), heads=2, value_heads=2, head_dim=16, draft_tokens=3)


def _row(arms, batch=2, do_bench=None, progress=None):
    fake = itertools.count(10)
    gen = torch.Generator().manual_seed(0)
    with interpreter():  # nested in the fixture's: the kernel calls run on the CPU
        return verify_layer.bench_row(
            CFG, batch, dict(arms), {"verify:helion-upstream": "not here"}, None, gen,
            do_bench=do_bench or (lambda fn: float(next(fake))), rounds=2, act_dtype=torch.float32,
            progress=progress,
        )  # fmt: skip


def test_every_arm_runs_conv_and_recurrence_and_matches_tritons_snapshots(arms):
    row = _row(arms)
    entries = row["arms"]
    assert entries["triton:snapshots"]["status"] == "ok"
    for key in ("helion-kdakit:snapshots", "triton:ring"):
        assert entries[key]["status"] == "ok", entries[key]
        assert entries[key]["check"]["ok"], entries[key]["check"]
    # the ring's fold leaves the pool at the last accepted step's snapshot (the check's "state")
    assert entries["triton:ring"]["check"]["rel_err"]["state"] < 1e-4
    assert entries["triton:ring"]["commit_fold"]["n"] == 2
    assert entries["helion-upstream:snapshots"]["status"] == "missing"
    assert entries["cute:snapshots"] == {"status": "missing", "error": verify_layer.CUTE_NOT_HERE}
    assert all(len(entries[k]["rounds"]) == 2 for k in entries if entries[k]["status"] == "ok")
    printed = "\n".join(table.verify_layer_table({"rows": [row]}))
    assert "| 2 × 3 |" in printed and "not on this GPU (needs SM100 + cutlass)" in printed


def test_progress_follows_each_check_and_each_timed_round(arms):
    """The per-layer verify reports as the bench's other phases do: a line after each arm's check and each
    timed round, the row handed over holding each arm's medians so far (summarized away at the end)."""
    seen = []

    def progress(message, row):
        seen.append((message, {k: list(e.get("timed_rounds_us", [])) for k, e in row["arms"].items()}))

    row = _row(arms, progress=progress)
    checked = [k for k, e in row["arms"].items() if e["status"] == "ok"]
    messages = [m for m, _ in seen]
    assert [m for m in messages if "timed" not in m] == [f"{k} ok" for k in checked]
    for key in checked:
        rounds = [m.rsplit(":", 1)[0] for m in messages if m.startswith(f"{key} timed")]
        assert rounds == [f"{key} timed, round 1 of 2", f"{key} timed, round 2 of 2"]
    first_timed = next(i for i, m in enumerate(messages) if "timed" in m)
    timed_key = messages[first_timed].split(" timed")[0]
    assert seen[first_timed][1][timed_key] == [10.0]  # the fake do_bench's first timing
    assert all("timed_rounds_us" not in e for e in row["arms"].values())


def test_an_arm_without_the_conv_update_or_a_ring_without_the_fold_fails_its_check(arms, monkeypatch):
    """The planted bugs: kdakit's recurrence fed the pre-conv rows, and the commit fold not run (the pool
    then still holds the committed state)."""
    real_verify = verify_layer.Layer.verify

    def verify(self, arm, fn, conv, mode):
        skip_conv = (
            (lambda *a, **k: self.x.view(self.batch, -1, self.dim).transpose(1, 2))
            if arm != "triton"
            else conv
        )
        return real_verify(self, arm, fn, skip_conv, mode)

    monkeypatch.setattr(verify_layer.Layer, "verify", verify)
    monkeypatch.setattr(verify_layer.Layer, "fold", lambda self, commit: None)
    row = _row(arms)
    assert row["arms"]["triton:snapshots"]["check"]["ok"]
    for key in ("helion-kdakit:snapshots", "triton:ring"):
        assert row["arms"][key]["status"] == "ok" and not row["arms"][key]["check"]["ok"], key


def test_the_layer_bytes_count_the_conv_and_the_ring_instead_of_snapshots():
    H = HV = 16
    K = V = 128
    snapshots = verify_layer.layer_bytes(48, 6, H, HV, K, V, "snapshots")
    ring = verify_layer.layer_bytes(48, 6, H, HV, K, V, "ring")
    recurrence = bench.cost_model.verify_bytes(48, 6, H, HV, K, V)
    assert 0 < snapshots - recurrence < 0.1 * recurrence  # the conv moves about 20 MB beside 358 MB
    assert ring < snapshots / 2  # six fp32 snapshots per request give way to a small ring and one fold


def test_a_verify_layer_run_prints_its_table_and_writes_a_record_without_its_rows(tmp_path):
    from kdakit.kernels.tools import bench_record

    row = verify_layer.bench_bytes_row(bench.BenchConfig(), 48)
    row["floor_us"], row["floor_ring_us"] = 90.0, 30.0
    row["arms"] = {
        "triton:snapshots": {"status": "ok", "check": {"ok": True}, "per_call": {"median": 89.75, "n": 3},
                             "single_call": {"median": None}},
        "cute:snapshots": {"status": "missing", "error": verify_layer.CUTE_NOT_HERE},
    }  # fmt: skip
    result = {"rows": [row], "copy_bandwidth": {"bytes_per_s": 4.3e12},
              "environment": {"gpu": "NVIDIA H200", "versions": {}}}  # fmt: skip
    printed = table.render_table(result)
    assert printed.startswith("Target verify per layer") and "| 48 × 6 | 89.75 |" in printed
    assert "| 90.00 / 30.00 |" in printed
    raw, record = bench_record.write_outputs(result, tmp_path, "layer")
    assert raw.is_file()
    if record is not None:  # jsonschema present: the record validates, without the per-layer rows
        assert json.loads(record.read_text())["metrics"]["rows"] == []
