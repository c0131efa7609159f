# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: the
# V-first state pass variants as module copies for cprobe.py, and a kdakit wheel with vtu adopted (the tree
# of bb6113e, which the diffs are against, with state-vtu.diff applied) in .carry/vtwheel for call.sh's tests.
# vtu3 and vt128 are vtu and vt with only the state pass's default config changed.
set -eu
D=measurements/kernels-tuning/cpu-2026-12-07-state-vfirst
for v in vt vtu; do
  git show bb6113e:kernels/prefill.py > .carry/calls/prefill_$v.py
  patch -s .carry/calls/prefill_$v.py $D/state-$v.diff
done
python3 - <<'PY'
state = '"state": {"block_sizes": [64], "num_warps": 4, "num_stages": 2,'
configs = {
    ("vtu", "vtu3"): '"state": {"block_sizes": [64], "num_warps": 4, "num_stages": 3,',
    ("vt", "vt128"): '"state": {"block_sizes": [128], "num_warps": 8, "num_stages": 2,',
}
for (base, arm), config in configs.items():
    text = open(f".carry/calls/prefill_{base}.py").read()
    assert text.count(state) == 1
    open(f".carry/calls/prefill_{arm}.py", "w").write(text.replace(state, config))
PY
tree=$(mktemp -d)
git archive bb6113e | tar -x -C "$tree"
patch -s -d "$tree" -p1 < $D/state-vtu.diff
rm -rf .carry/vtwheel && mkdir -p .carry/vtwheel
python3 -m pip wheel -q --no-deps -w .carry/vtwheel "$tree" > /dev/null
rm -rf "$tree"
