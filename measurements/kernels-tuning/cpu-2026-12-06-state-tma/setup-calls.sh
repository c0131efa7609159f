# On the CPU machine, from the repository root: the GPU host's bundle and the tensor-memory variant in
# .carry/calls/ (git-ignored): kernels/prefill.py with this folder's diff applied, beside the probes of
# ../cpu-2026-12-05-state-fold/.
set -eu
A=measurements/kernels-tuning/cpu-2026-12-06-state-tma
bash ../shared/tools/gpu-host/bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl fla-core==0.6.0 einops==0.8.2
mkdir -p .carry/calls
cp kernels/prefill.py .carry/calls/prefill_tma.py
patch -s --fuzz=0 --no-backup-if-mismatch .carry/calls/prefill_tma.py < $A/state-tma.diff
cp measurements/kernels-tuning/cpu-2026-12-05-state-fold/cprobe.py \
  measurements/kernels-tuning/cpu-2026-12-05-state-fold/fold_err.py .carry/calls/
