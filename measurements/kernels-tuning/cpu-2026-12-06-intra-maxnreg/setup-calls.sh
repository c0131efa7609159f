# On the CPU machine, from the repository root: the GPU host's bundle, and in .carry/calls/ (git-ignored)
# two copies of kernels/prefill.py whose intra default config caps registers at 128 (K slice 32 and 16),
# cprobe.py from ../cpu-2026-12-05-state-fold/ and the kit's CLI with the host's stand-ins.
set -eu
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
intra='    "intra": {"block_sizes": [32], "num_warps": 1, "num_stages": 2, "indexing": "pointer"},  # [K slice]'
for variant in "r128 32" "k16r128 16"; do
  set -- $variant
  capped="    \"intra\": {\"block_sizes\": [$2], \"num_warps\": 1, \"num_stages\": 2, \"indexing\": \"pointer\", \"maxnreg\": 128},"
  grep -qxF "$intra" kernels/prefill.py
  python3 - "$intra" "$capped" kernels/prefill.py .carry/calls/prefill_intra_$1.py <<'PY'
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
