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
