"""Launch profiles and arms, read from the TOML files in kdakit/facts/profiles/ (their only definition)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from kdakit.facts.errors import UsageError

PROFILES_DIR = Path(__file__).parent / "profiles"
KDA_BACKEND_FLAGS = (
    "--linear-attn-prefill-backend",
    "--linear-attn-decode-backend",
    "--linear-attn-verify-backend",
)


def _read(name: str) -> dict:
    with open(PROFILES_DIR / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


@cache
def arms() -> dict[str, dict]:
    return _read("arms")


def skus() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml") if p.stem != "arms" and "sku" in _read(p.stem))


@dataclass
class Profile:
    """Everything that decides the server launch for one SKU and arm, before user overrides."""

    sku: str
    arm: str
    model: str
    gpu_model: str
    gpu_count: int
    deploy: dict
    flags: dict[str, object] = field(default_factory=dict)  # ordered: model, SKU, arm
    env: dict[str, str] = field(default_factory=dict)


def load(sku: str, arm: str) -> Profile:
    if sku not in skus():
        raise UsageError(f"unknown SKU {sku!r}; known: {', '.join(skus())}")
    if arm not in arms():
        raise UsageError(f"unknown arm {arm!r}; known: {', '.join(arms())}")
    sku_data = _read(sku)
    model = _read(sku_data["profile"])
    arm_data = arms()[arm]
    flags = {**model["flags"], **sku_data["flags"]}
    flags.update({flag: arm_data["kda_backend"] for flag in KDA_BACKEND_FLAGS})
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(sku_data["gpu_count"]))}
    env.update(model.get("env", {}))
    env.update(arm_data.get("env", {}))
    return Profile(
        sku=sku,
        arm=arm,
        model=model["model"]["name"],
        gpu_model=sku_data["gpu_model"],
        gpu_count=sku_data["gpu_count"],
        deploy=dict(model["deploy"]),
        flags=flags,
        env=env,
    )
