# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: prefill
# module copies in .carry/calls/ (git-ignored) for cprobe.py. prefill_noout: the state pass without the
# output (its two dots and store): not a kernel, a bound on what moving the output out of the sequential
# loop could save. prefill_split (make_split.py): that move made, the output in a kernel of its own;
# prefill_split4: the split at 4 stages (its state pass needs 106 KB at 3). prefill_s2: the state pass at 2
# stages (4 need 242 KB of shared memory, past the 227 an SM has). prefill_presorder (check-1x16.sh): the
# module before the state pass's step order changed.
set -eu
python3 measurements/kernels-tuning/cpu-2026-12-07-output-bound/make_split.py
python3 - <<'PY'
STATE = '"state": {"block_sizes": [16], "num_warps": 4, "num_stages": 3, "indexing": "pointer"},  # [V tile]'


def at_stages(text, stages):
    cfg = STATE
    assert text.count(cfg) == 1
    return text.replace(cfg, cfg.replace('"num_stages": 3', f'"num_stages": {stages}'))


main = open("kernels/prefill.py").read()
out = """                o = _dot32(qg, state_b) + _dot32(aqk, v_new)
                hl.store(o_rows, [token[:, None], v_cols[None, :]], o.to(o_rows.dtype),
                         extra_mask=valid[:, None])  # fmt: skip
"""
assert main.count(out) == 1
open(".carry/calls/prefill_noout.py", "w").write(main.replace(out, ""))
open(".carry/calls/prefill_s2.py", "w").write(at_stages(main, 2))
open(".carry/calls/prefill_split4.py", "w").write(at_stages(open(".carry/calls/prefill_split.py").read(), 4))
PY
git show 103bf5f:kernels/prefill.py > .carry/calls/prefill_presorder.py
