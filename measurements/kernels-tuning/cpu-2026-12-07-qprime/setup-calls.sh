# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh and
# ../cpu-2026-12-07-output-bound/setup-calls.sh (prefill_presorder): prefill_qprime, kernels/prefill.py with
# qprime.diff, in .carry/calls/ (git-ignored) for cprobe.py.
set -eu
cp kernels/prefill.py .carry/calls/prefill_qprime.py
patch -s .carry/calls/prefill_qprime.py measurements/kernels-tuning/cpu-2026-12-07-qprime/qprime.diff
