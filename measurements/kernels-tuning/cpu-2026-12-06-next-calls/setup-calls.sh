# On the CPU machine, from the repository root: the GPU host's bundle (kdakit's wheel from this tree), FLA's
# wheel, and the kit's CLI with the host's stand-ins as .carry/calls/kd.
set -eu
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
printf '%s\n' '#!/bin/sh' \
  'exec python3 -P -c "import kda_stubs, sys; from kdakit.cli import main; sys.argv=['"'"'kdakit'"'"']+sys.argv[1:]; sys.exit(main())" "$@"' \
  > .carry/calls/kd
chmod +x .carry/calls/kd
# intra's config neighbours, now that its K step is 1097 instructions instead of 1677 (ptxas, sm_90a: 2 warps
# 234 registers; K slice 16 233; 3 stages 248; none spills), as module copies for cprobe.py
python3 - <<'PY'
base = '    "intra": {"block_sizes": [32], "num_warps": 1, "num_stages": 2, "indexing": "pointer"},  # [K slice]\n'
arms = {"w2": ([32], 2, 2), "k16": ([16], 1, 2), "s3": ([32], 1, 3)}
text = open("kernels/prefill.py").read()
assert text.count(base) == 1
for arm, (blocks, warps, stages) in arms.items():
    config = (f'    "intra": {{"block_sizes": {blocks}, "num_warps": {warps}, "num_stages": {stages}, '
              f'"indexing": "pointer"}},\n')
    open(f".carry/calls/prefill_intra_{arm}.py", "w").write(text.replace(base, config))
PY
cp measurements/kernels-tuning/cpu-2026-12-05-state-fold/cprobe.py .carry/calls/
