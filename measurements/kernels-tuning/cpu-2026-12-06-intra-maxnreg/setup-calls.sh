# On the CPU machine, from the repository root: the GPU host's bundle, and in .carry/calls/ (git-ignored)
# copies of kernels/prefill.py: intra's default config capped at 128 registers (r128); intra as one program
# a block pair (intra-pairs.diff), at its default, capped, and with a 16-wide K slice; cprobe.py from ../cpu-2026-12-05-state-fold/
# and the kit's CLI with the host's stand-ins.
set -eu
A=measurements/kernels-tuning/cpu-2026-12-06-intra-maxnreg
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
intra='    "intra": {"block_sizes": [32], "num_warps": 1, "num_stages": 2, "indexing": "pointer"},  # [K slice]'
capped='    "intra": {"block_sizes": [32], "num_warps": 1, "num_stages": 2, "indexing": "pointer", "maxnreg": 128},'
k16='    "intra": {"block_sizes": [16], "num_warps": 1, "num_stages": 2, "indexing": "pointer"},'
cp kernels/prefill.py .carry/calls/prefill_intra_pairs.py
patch -s --fuzz=0 --no-backup-if-mismatch .carry/calls/prefill_intra_pairs.py < $A/intra-pairs.diff
for variant in "prefill.py intra_r128 capped" "../.carry/calls/prefill_intra_pairs.py intra_pairs_r128 capped" \
    "../.carry/calls/prefill_intra_pairs.py intra_pairs_k16 k16"; do
  set -- $variant
  eval "config=\$$3"
  python3 - "$intra" "$config" kernels/$1 .carry/calls/prefill_$2.py <<'PY'
import sys
old, new, src, dst = sys.argv[1:]
text = open(src).read()
assert text.count(old + "\n") == 1
open(dst, "w").write(text.replace(old + "\n", new + "\n"))
PY
done
cp measurements/kernels-tuning/cpu-2026-12-05-state-fold/cprobe.py .carry/calls/
printf '%s\n' '#!/bin/sh' \
  'exec python3 -P -c "import kda_stubs, sys; from kdakit.cli import main; sys.argv=['"'"'kdakit'"'"']+sys.argv[1:]; sys.exit(main())" "$@"' \
  > .carry/calls/kd
chmod +x .carry/calls/kd
