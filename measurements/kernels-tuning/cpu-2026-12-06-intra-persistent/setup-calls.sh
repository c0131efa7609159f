# On the CPU machine, from the repository root: the GPU host's bundle, and in .carry/calls/ (git-ignored)
# copies of kernels/prefill.py whose intra default runs on a persistent grid (Helion's `pid_type`
# persistent_blocked / persistent_interleaved, `num_sm_multiplier` programs an SM), with and without a
# 128-register cap; cprobe.py from ../cpu-2026-12-05-state-fold/.
set -eu
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
python3 - <<'PY'
import re
base = '    "intra": {"block_sizes": [32], "num_warps": 1, "num_stages": 2, "indexing": "pointer"},  # [K slice]\n'
arms = {
    "pb_m8": '"pid_type": "persistent_blocked", "num_sm_multiplier": 8',
    "pb_m16_r128": '"pid_type": "persistent_blocked", "num_sm_multiplier": 16, "maxnreg": 128',
    "pi_m16_r128": '"pid_type": "persistent_interleaved", "num_sm_multiplier": 16, "maxnreg": 128',
    "pb_m16_r128_s1": '"pid_type": "persistent_blocked", "num_sm_multiplier": 16, "maxnreg": 128',
}
text = open("kernels/prefill.py").read()
assert text.count(base) == 1
for arm, extra in arms.items():
    stages = 1 if arm.endswith("_s1") else 2
    config = (f'    "intra": {{"block_sizes": [32], "num_warps": 1, "num_stages": {stages}, '
              f'"indexing": "pointer", {extra}}},\n')
    open(f".carry/calls/prefill_intra_{arm}.py", "w").write(text.replace(base, config))
PY
cp measurements/kernels-tuning/cpu-2026-12-05-state-fold/cprobe.py .carry/calls/
