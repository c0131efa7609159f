"""Print what images.mk needs from pins.toml (stdlib only, so `make image` works before kdakit is installed).

python3 images/pins_args.py build-args   ->  --build-arg TORCH_VERSION=... (every pinned version)
python3 images/pins_args.py base         ->  the default base image
"""

import importlib.util
import sys
from pathlib import Path

# kdakit/facts/pins.py is pins.toml's one reader; loaded from its file, as kdakit may not be installed yet.
_SPEC = importlib.util.spec_from_file_location(
    "kdakit_pins", Path(__file__).resolve().parents[1] / "kdakit/facts/pins.py"
)
_PINS = sys.modules[_SPEC.name] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_PINS)
# Dockerfile build argument -> (pins.toml table, key)
BUILD_ARGS = {
    "TORCH_VERSION": ("packages", "torch"),
    "TRITON_VERSION": ("packages", "triton"),
    "SGLANG_VERSION": ("packages", "sglang"),
    "HELION_VERSION": ("packages", "helion"),
    "LM_EVAL_VERSION": ("packages", "lm-eval"),
    "SGL_EVAL_VERSION": ("packages", "sgl-eval"),
    "CUDA_VERSION": ("cuda", "version"),
}


def main(what: str) -> str:
    pins = _PINS.load()
    if what == "base":
        return pins["image"]["base"]
    if what == "torch-index":
        return pins["cuda"]["torch_index_url"]
    if what == "build-args":
        args = [f"--build-arg {arg}={pins[table][key]}" for arg, (table, key) in BUILD_ARGS.items()]
        label = ",".join(
            f"{key if table == 'packages' else table}={pins[table][key]}"
            for table, key in BUILD_ARGS.values()
        )
        return " ".join(args) + f" --build-arg PINS={label}"
    raise SystemExit(f"usage: {sys.argv[0]} build-args|base|torch-index")


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else ""))
