"""Node label requirements with Karpenter's exact set semantics (pkg/scheduling/requirement.go)."""

from __future__ import annotations

import pytest

from adapters.kubernetes.node_requirements import Requirement, combine, incompatibility, requirement

# Karpenter's own compatibility table (pkg/scheduling/requirements_test.go, "Compatibility"): row
# ``existing.Compatible(incoming)``, "+" where it succeeds. The first table is for a well-known label
# (topology.kubernetes.io/zone, AllowUndefinedWellKnownLabels), the second for a custom one (strict).
NAMES = [
    *("unconstrained", "exists", "doesNotExist", "inA", "inB", "inAB", "notInA", "in1", "in9", "in19"),
    *("notIn12", "greaterThan1", "greaterThan9", "lessThan1", "lessThan9"),
]
WELL_KNOWN_TABLE = """
unconstrained  +++++++++++++++
exists         ++-++++++++++++
doesNotExist   +-+---+---+----
inA            ++-+-+----+----
inB            ++--+++---+----
inAB           ++-++++---+----
notInA         +++-+++++++++++
in1            ++----++-+----+
in9            ++----+-++++---
in19           ++----++++++--+
notIn12        +++++++-+++++++
greaterThan1   ++----+-+++++-+
greaterThan9   ++----+---+++--
lessThan1      ++----+---+--++
lessThan9      ++----++-+++-++
"""
# Identical but for the first row: a pool that does not define a custom label refuses pods that
# need a value of it.
CUSTOM_TABLE = WELL_KNOWN_TABLE.replace("unconstrained  +++++++++++++++", "unconstrained  +-+---+---+----")

SPECS: dict[str, tuple[str, tuple[str, ...]] | None] = {
    "unconstrained": None,
    "exists": ("Exists", ()),
    "doesNotExist": ("DoesNotExist", ()),
    "inA": ("In", ("A",)),
    "inB": ("In", ("B",)),
    "inAB": ("In", ("A", "B")),
    "notInA": ("NotIn", ("A",)),
    "in1": ("In", ("1",)),
    "in9": ("In", ("9",)),
    "in19": ("In", ("1", "9")),
    "notIn12": ("NotIn", ("1", "2")),
    "greaterThan1": ("Gt", ("1",)),
    "greaterThan9": ("Gt", ("9",)),
    "lessThan1": ("Lt", ("1",)),
    "lessThan9": ("Lt", ("9",)),
}


def requirements_of(name: str, key: str) -> dict[str, Requirement]:
    spec = SPECS[name]
    return {} if spec is None else combine([requirement(key, spec[0], spec[1])])


def table_cases(table: str, key: str) -> list[tuple[str, str, str, bool]]:
    rows = [line.split() for line in table.strip().splitlines()]
    return [(key, row[0], incoming, row[1][i] == "+") for row in rows for i, incoming in enumerate(NAMES)]


@pytest.mark.parametrize(
    ("key", "existing", "incoming", "compatible"),
    table_cases(WELL_KNOWN_TABLE, "topology.kubernetes.io/zone") + table_cases(CUSTOM_TABLE, "example.com/zone"),
)
def test_compatibility_matches_karpenters_table(key, existing, incoming, compatible):
    verdict = incompatibility(requirements_of(existing, key), requirements_of(incoming, key))
    assert (verdict is None) is compatible, verdict


def test_gt_and_lt_are_strict_integer_bounds():
    above = requirement("gpu-count", "Gt", ["2"])
    below = requirement("gpu-count", "Lt", ["8"])
    assert (above.gte, below.lte) == (3, 7)
    assert [v for v in ("2", "3", "8", "x", "2.5", "") if above.allows(v)] == ["3", "8"]
    assert [v for v in ("7", "8", "-4", "x") if below.allows(v)] == ["7", "-4"]
    assert requirement("n", "Gte", ["2"]).allows("2") and not requirement("n", "Gte", ["2"]).allows("1")
    assert requirement("n", "Lte", ["2"]).allows("2") and not requirement("n", "Lte", ["2"]).allows("3")
    # Go's strconv.Atoi: a sign and leading zeros are fine, Python's underscores and spaces are not.
    assert above.allows("+04") and not above.allows("1_0") and not above.allows(" 5")


def test_gt_max_int_matches_nothing():
    never = requirement("n", "Gt", [str(2**63 - 1)])
    assert never.operator == "DoesNotExist"
    assert not never.allows(str(2**63 - 1))


def test_intersection_keeps_values_within_bounds_and_drops_bounds_of_finite_sets():
    both = requirement("n", "In", ["1", "4", "9", "x"]).intersection(requirement("n", "Gt", ["2"]))
    assert both == Requirement("n", complement=False, values=frozenset({"4", "9"}))
    window = requirement("n", "Gt", ["2"]).intersection(requirement("n", "Lt", ["6"]))
    assert (window.complement, window.gte, window.lte) == (True, 3, 5)
    empty = requirement("n", "Gt", ["5"]).intersection(requirement("n", "Lt", ["5"]))
    assert empty.operator == "DoesNotExist"
    excluded = requirement("n", "NotIn", ["a"]).intersection(requirement("n", "NotIn", ["b"]))
    assert (excluded.operator, excluded.values) == ("NotIn", frozenset({"a", "b"}))
    assert requirement("n", "Exists").intersection(requirement("n", "NotIn", ["a"])).operator == "NotIn"


def test_combine_intersects_everything_said_about_a_key():
    combined = combine([requirement("zone", "In", ["a", "b"]), requirement("zone", "NotIn", ["b"])])
    assert combined["zone"] == Requirement("zone", complement=False, values=frozenset({"a"}))


def test_deprecated_label_keys_are_normalized():
    assert requirement("beta.kubernetes.io/instance-type", "In", ["p5.48xlarge"]).key == (
        "node.kubernetes.io/instance-type"
    )
    assert requirement("failure-domain.beta.kubernetes.io/zone", "Exists").key == "topology.kubernetes.io/zone"


@pytest.mark.parametrize(("operator", "values"), [("Near", ["x"]), ("Gt", []), ("Gt", ["1", "2"]), ("Lt", ["one"])])
def test_operators_and_bounds_the_api_refuses_raise(operator, values):
    with pytest.raises(ValueError, match=r"operator|integer"):
        requirement("k", operator, values)


def test_incompatibility_says_why():
    pool = combine([requirement("node.kubernetes.io/instance-type", "In", ["g5.xlarge"])])
    pod = combine([requirement("node.kubernetes.io/instance-type", "In", ["p5.48xlarge"])])
    assert incompatibility(pool, pod) == (
        "the pod needs node.kubernetes.io/instance-type In [p5.48xlarge], "
        "its nodes have node.kubernetes.io/instance-type In [g5.xlarge]"
    )
    custom = combine([requirement("nvidia.com/gpu.product", "In", ["H100"])])
    assert incompatibility({}, custom) == (
        'label "nvidia.com/gpu.product" has no value on its nodes (the pod needs nvidia.com/gpu.product In [H100])'
    )


def test_provider_labels_are_well_known():
    pod = combine([requirement("karpenter.k8s.aws/instance-gpu-name", "In", ["a100"])])
    assert incompatibility({}, pod) is None
