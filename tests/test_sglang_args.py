"""The committed snapshot of SGLang's server arguments must be what the pinned sglang wheel defines."""

import warnings

import pytest

from kdakit.facts import pins, profiles
from kdakit.facts.errors import UsageError
from kdakit.launch import plan, serve, sglang_args


def test_snapshot_matches_the_pinned_wheel():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        live = sglang_args.extract()
    assert live["sglang_version"] == pins.package("sglang")
    assert sglang_args.SNAPSHOT.read_text() == sglang_args.json.dumps(live, indent=1) + "\n", (
        "snapshot is stale: run `make sglang-args`"
    )


@pytest.mark.parametrize("sku", ["h200", "b200"])
@pytest.mark.parametrize("arm", sorted(profiles.arms()))
def test_every_plan_parses_with_sglangs_own_parser(sku, arm):
    try:
        rendered = plan.render(sku, arm)
    except UsageError as exc:  # a kernel that cannot run on this SKU's GPU (test_kernel_contracts.py)
        assert "cannot run on" in str(exc)
        return
    assert serve.check_with_live_parser(rendered) is True


def test_live_parser_rejects_what_sglang_rejects():
    bad = plan.render("h200", "helion")
    bad.argv += ["--cuda-graph-backend-prefill", "sometimes"]
    with pytest.raises(sglang_args.UsageError, match="SGLang's own parser rejects"):
        serve.check_with_live_parser(bad)
