# On the CPU machine, from the repository root, on the transition tree: the GPU host's bundle (kdakit's wheel
# holds the transition kernel), and main's prefill as the module .carry/calls/prefill_base.py for cprobe.py.
set -eu
bash measurements/kernels-tuning/cpu-2026-12-06-next-calls/setup-calls.sh
git show main:kernels/prefill.py > .carry/calls/prefill_base.py
