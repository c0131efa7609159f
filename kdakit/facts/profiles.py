"""Launch profiles, the SKU registry and the arms, read from the TOML files in kdakit/facts/profiles/ (their
only definition).

The SKU registry is one file per SKU (`<sku>.toml`: the GPU it runs on, its launch rows, its tuned-configs
folder); Make, the playbooks, preflight, the report and autotune take the SKU set from here. Its import
needs only the standard library, so Make runs it before kdakit is installed:
`python3 -m kdakit.facts.profiles names`.
KDAKIT_PROFILES_DIR points it at another folder of profiles (a test's extra SKU).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from kdakit.facts.errors import UsageError

PROFILES_ENV = "KDAKIT_PROFILES_DIR"
PROFILES_DIR = Path(os.environ.get(PROFILES_ENV) or Path(__file__).parent / "profiles")
KDA_BACKEND_FLAGS = (
    "--linear-attn-prefill-backend",
    "--linear-attn-decode-backend",
    "--linear-attn-verify-backend",
)


def _read(name: str) -> dict:
    path = PROFILES_DIR / f"{name}.toml"
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"no profile {name!r}: {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from None


@cache
def _arms_file(folder: Path) -> dict:
    return _read("arms")


def arms() -> dict[str, dict]:
    """Every arm (a table of arms.toml with a kda_backend) by name."""
    return {
        name: value
        for name, value in _arms_file(PROFILES_DIR).items()
        if isinstance(value, dict) and "kda_backend" in value
    }


def kernel_set_arms() -> list[str]:
    """The arms that differ only in which kernels all three KDA phases run (one backend value, no other
    flags): the ones the kernel harnesses (lifecycle, served) can run as they are served."""
    return [name for name, spec in arms().items() if "verify_backend" not in spec and not spec.get("flags")]


def contracts() -> dict[str, dict]:
    """Where SGLang runs a kernel an arm may ask for (arms.toml's `contracts`), by name."""
    return dict(_arms_file(PROFILES_DIR).get("contracts", {}))


def backend_flags(arm: str) -> dict[str, str]:
    """The arm's three --linear-attn-{prefill,decode,verify}-backend values."""
    spec = arms()[arm]
    values = dict.fromkeys(KDA_BACKEND_FLAGS, spec["kda_backend"])
    if "verify_backend" in spec:
        values["--linear-attn-verify-backend"] = spec["verify_backend"]
    return values


def ab_arms() -> tuple[str, str]:
    """The pair an A/B compares, baseline first (arms.toml's `ab`)."""
    pair = tuple(_arms_file(PROFILES_DIR)["ab"])
    unknown = [a for a in pair if a not in arms()]
    if len(pair) != 2 or unknown:
        raise UsageError(f"{PROFILES_DIR / 'arms.toml'}: `ab` must name two of its arms, not {list(pair)}")
    return pair


def ab_protocols(pair: list[str] | tuple[str, ...]) -> dict[str, str] | None:
    """{'bench': ..., 'gsm8k': ...}: the protocols a published A/B of these arms used (arms.toml's
    `published_ab`); None for any other pair (the steps' own defaults, pr, apply)."""
    for entry in _arms_file(PROFILES_DIR).get("published_ab", []):
        if list(entry["arms"]) == list(pair):
            return {"bench": entry["bench_protocol"], "gsm8k": entry["gsm8k_protocol"]}
    return None


@dataclass(frozen=True)
class Sku:
    """One SKU of the registry: the GPU it runs on, its launch rows and its tuned kernel configs."""

    name: str
    profile: str  # the model profile it launches (<profile>.toml)
    gpu_model: str  # the GPU's name as nvidia-smi prints it; preflight wants every GPU's name to contain it
    gpu_count: int
    configs: str  # kernels/configs/<configs>/: the tuned kernel configs for this GPU
    gpu_capability: str | None = None  # CUDA compute capability "major.minor" (kernel contracts read it)
    default: bool = False  # the SKU Make uses when SKU= is not given
    flags: dict = field(default_factory=dict)


def skus() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml") if p.stem != "arms" and "sku" in _read(p.stem))


def sku(name: str) -> Sku:
    if name not in skus():
        raise UsageError(f"unknown SKU {name!r}; known: {', '.join(skus())}")
    data = _read(name)
    if data["sku"] != name:
        path = PROFILES_DIR / f"{name}.toml"
        raise UsageError(f"{path}: says sku {data['sku']!r}, its file name says {name!r}")
    return Sku(
        name=name,
        profile=data["profile"],
        gpu_model=data["gpu_model"],
        gpu_count=data["gpu_count"],
        configs=data["configs"],
        gpu_capability=data.get("gpu_capability"),
        default=data.get("default", False),
        flags=dict(data.get("flags", {})),
    )


def default_sku() -> str:
    marked = [name for name in skus() if sku(name).default]
    if len(marked) != 1:
        raise UsageError(f"{PROFILES_DIR}: exactly one SKU file must say `default = true` (found {marked})")
    return marked[0]


def sku_of_gpus(gpu_names: list[str] | str) -> str:
    """The one GPU -> SKU mapping: the registered SKU whose GPU is exactly these ('NVIDIA H200' -> 'h200');
    for a GPU the registry does not know, a slug of its name ('NVIDIA A100-SXM4-80GB' -> 'a100-sxm4-80gb');
    'unknown' for no GPU or GPUs of different models."""
    names = {n.strip().lower() for n in ([gpu_names] if isinstance(gpu_names, str) else gpu_names)}
    names.discard("")
    if len(names) != 1:
        return "unknown"
    (name,) = names
    for entry in map(sku, skus()):
        if entry.gpu_model.lower() == name:
            return entry.name
    return re.sub(r"[^a-z0-9]+", "-", name.removeprefix("nvidia ")).strip("-") or "unknown"


def configs_of(sku_name: str) -> str:
    """The tuned-configs folder of a SKU (kernels/configs/<configs>/); an unregistered GPU's slug as is."""
    return sku(sku_name).configs if sku_name in skus() else sku_name


def canonical_sku(sku_name: str | None) -> str:
    """A record's GPU model as the published tables spell it: 'h200' -> 'H200'; empty -> 'unknown'."""
    text = (sku_name or "").strip()
    return "unknown" if not text or text.lower() == "unknown" else text.upper()


@dataclass
class Profile:
    """Everything that decides the server launch for one SKU and arm, before user overrides."""

    sku: str
    arm: str
    model: str
    gpu_model: str
    gpu_count: int
    gpu_capability: str | None
    model_facts: dict  # the model profile's [model] table (name, KDA head dim, activation dtype)
    deploy: dict
    flags: dict[str, object] = field(default_factory=dict)  # ordered: model, SKU, arm
    env: dict[str, str] = field(default_factory=dict)


def load(sku_name: str, arm: str) -> Profile:
    entry = sku(sku_name)
    if arm not in arms():
        raise UsageError(f"unknown arm {arm!r}; known: {', '.join(arms())}")
    model = _read(entry.profile)
    arm_data = arms()[arm]
    flags = {**model["flags"], **entry.flags}
    flags.update(backend_flags(arm))
    flags.update(arm_data.get("flags", {}))
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(entry.gpu_count))}
    env.update(model.get("env", {}))
    env.update(arm_data.get("env", {}))
    return Profile(
        sku=sku_name,
        arm=arm,
        model=model["model"]["name"],
        gpu_model=entry.gpu_model,
        gpu_count=entry.gpu_count,
        gpu_capability=entry.gpu_capability,
        model_facts=dict(model["model"]),
        deploy=dict(model["deploy"]),
        flags=flags,
        env=env,
    )


def _run(args) -> int:
    if args.what == "names":
        print(" ".join(skus()))
    elif args.what == "default":
        print(default_sku())
    elif args.what == "ab":
        print(" ".join(ab_arms()))
    elif args.what == "ab-protocol":
        if not args.sku:
            raise UsageError("kdakit skus ab-protocol: name bench or gsm8k, then the arms")
        print((ab_protocols(args.arms) or {}).get(args.sku, ""))
    elif args.what == "show":
        if not args.sku:
            raise UsageError("kdakit skus show: name the SKU (kdakit skus show h200)")
        entry = asdict(sku(args.sku))
        del entry["flags"]
        print(json.dumps(entry, sort_keys=True))
    else:
        for name in skus():
            entry = sku(name)
            mark = " (default)" if entry.default else ""
            print(f"{name:10} {entry.gpu_count} x {entry.gpu_model:16} configs/{entry.configs}/{mark}")
    return 0


def add_arguments(p) -> None:
    p.add_argument(
        "what",
        nargs="?",
        choices=["table", "names", "default", "ab", "show", "ab-protocol"],
        default="table",
        help="table (default); names: the SKU names; default: Make's SKU; ab: the A/B arms; "
        "show SKU: one SKU as JSON; ab-protocol bench|gsm8k ARM ARM: the protocol a published A/B of those "
        "arms used (empty: none)",
    )
    p.add_argument("sku", nargs="?", help="for show: the SKU; for ab-protocol: bench or gsm8k")
    p.add_argument("arms", nargs="*", help="for ab-protocol: the A/B's arms, baseline first")


def register(sub) -> None:
    p = sub.add_parser("skus", help="the SKU registry (kdakit/facts/profiles/<sku>.toml) and the A/B arms")
    add_arguments(p)
    p.set_defaults(func=_run)


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python3 -m kdakit.facts.profiles")
    add_arguments(parser)
    try:
        sys.exit(_run(parser.parse_args()))
    except UsageError as e:
        sys.exit(f"kdakit skus: error: {e}")
