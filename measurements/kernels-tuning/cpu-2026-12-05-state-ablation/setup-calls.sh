# On the CPU machine, from the repository root: the GPU host's bundle and the state pass's ablation modules
# in .carry/calls/ (git-ignored), each kernels/prefill.py with one diff of this folder applied; cprobe.py
# from ../cpu-2026-12-05-state-fold/.
set -eu
A=measurements/kernels-tuning/cpu-2026-12-05-state-ablation
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
for name in chain noload chainnoload; do
  cp kernels/prefill.py .carry/calls/prefill_$name.py
  patch -s --fuzz=0 --no-backup-if-mismatch .carry/calls/prefill_$name.py < $A/state-$name.diff
done
cp measurements/kernels-tuning/cpu-2026-12-05-state-fold/cprobe.py .carry/calls/
printf '%s\n' '#!/bin/sh' \
  'exec python3 -P -c "import kda_stubs, sys; from kdakit.cli import main; sys.argv=['"'"'kdakit'"'"']+sys.argv[1:]; sys.exit(main())" "$@"' \
  > .carry/calls/kd
chmod +x .carry/calls/kd
