# On the CPU machine, from the repository root: the GPU host's bundle and every variant module of
# next-call.sh in .carry/calls/ (git-ignored), each built from the working tree's kernels/prefill.py.
set -eu
O=measurements/kernels-tuning/cpu-2026-12-05-next-variants
F=measurements/kernels-tuning/cpu-2026-12-05-state-fold
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
variant() {  # variant NAME DIFF...: kernels/prefill.py with the diffs applied, as .carry/calls/prefill_NAME.py
  local name=$1; shift
  cp kernels/prefill.py .carry/calls/prefill_$name.py
  for d in "$@"; do patch -s --fuzz=0 --no-backup-if-mismatch .carry/calls/prefill_$name.py < $d; done
}
variant hoist $O/intra-hoist.diff
variant rmin $O/recompute-minimum.diff
variant state1 $O/state-pass-1.diff
variant state2 $O/state-pass-2.diff
variant gate1 $O/gate-1.diff
variant gate2 $O/gate-2.diff
variant fold $F/state-fold.diff
variant foldt $F/state-fold-blocks.diff
variant foldtma $F/state-fold-blocks.diff $F/state-blocks-tma.diff
variant all_1 $O/intra-hoist.diff $F/state-fold.diff $O/gate-1.diff
variant all_2 $O/intra-hoist.diff $F/state-fold.diff $O/gate-2.diff
cp $F/fold_err.py $F/cprobe.py .carry/calls/
printf '%s\n' '#!/bin/sh' \
  'exec python3 -P -c "import kda_stubs, sys; from kdakit.cli import main; sys.argv=['"'"'kdakit'"'"']+sys.argv[1:]; sys.exit(main())" "$@"' \
  > .carry/calls/kd
chmod +x .carry/calls/kd
