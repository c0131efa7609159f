# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: two prefill
# module copies whose kernels Triton compiles with DISABLE_MMA_V3=1 (mma.sync with register operands instead
# of wgmma from shared memory), as .carry/calls/prefill_state_mma2.py (the state pass) and
# prefill_mma2_both.py (the state pass and recompute). Each copy renames those kernels' functions, so their
# Triton source (and compile cache) is not main's.
set -eu
python3 - <<'PY'
text = open("kernels/prefill.py").read()
launch = "        return bound(*args)\n    except OutOfResources:"
env_launch = ("        os.environ['DISABLE_MMA_V3'] = '1'\n        try:\n            return bound(*args)\n"
              "        finally:\n            os.environ.pop('DISABLE_MMA_V3')\n    except OutOfResources:")
recompute_call = '    kernels["recompute"](\n'
env_recompute = '    os.environ["DISABLE_MMA_V3"] = "1"\n' + recompute_call
recompute_end = "        kg, qg, decay, float(scale), raw_beta, HV, group,\n    )  # fmt: skip\n"
for old, count in ((launch, 1), (recompute_call, 1), (recompute_end, 1), ("_state_pass_fn", 2),
                   ("_recompute_fn", 2)):
    assert text.count(old) == count, old
state = text.replace(launch, env_launch).replace("_state_pass_fn", "_state_pass_mma2_fn")
both = state.replace(recompute_call, env_recompute).replace(
    recompute_end, recompute_end + '    os.environ.pop("DISABLE_MMA_V3")\n').replace("_recompute_fn", "_recompute_mma2_fn")
open(".carry/calls/prefill_state_mma2.py", "w").write(state)
open(".carry/calls/prefill_mma2_both.py", "w").write(both)
PY
