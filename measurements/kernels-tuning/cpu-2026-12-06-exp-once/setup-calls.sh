# On the CPU machine, from the repository root, with intra's exp2 made opaque to Triton's layout pass
# (`_EXP2_ONCE` in kernels/prefill.py) in the working tree: the GPU host's bundle (kdakit's wheel from this
# tree), and in .carry/calls/ (git-ignored) the module before the change as `prefill_before`, cprobe.py and
# fold_err.py from ../cpu-2026-12-05-state-fold/, and the kit's CLI with the host's stand-ins.
set -eu
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
git show 8273ac0:kernels/prefill.py > .carry/calls/prefill_before.py
cp measurements/kernels-tuning/cpu-2026-12-05-state-fold/cprobe.py measurements/kernels-tuning/cpu-2026-12-05-state-fold/fold_err.py .carry/calls/
printf '%s\n' '#!/bin/sh' \
  'exec python3 -P -c "import kda_stubs, sys; from kdakit.cli import main; sys.argv=['"'"'kdakit'"'"']+sys.argv[1:]; sys.exit(main())" "$@"' \
  > .carry/calls/kd
chmod +x .carry/calls/kd
