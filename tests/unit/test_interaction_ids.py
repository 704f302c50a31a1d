"""Interaction ids: deterministic from (step, key, kind, resource set), so a re-park rejoins them;
a different resource set is a different interaction."""

from __future__ import annotations

from models.store import interaction_id
from tasks.outcomes import Park, interaction_specs
from tasks.sdk import Permission


def test_interaction_id__is_deterministic() -> None:
    a = interaction_id("step-1", "shell", "permission", ["deploy api"])
    assert a == interaction_id("step-1", "shell", "permission", ["deploy api"])
    assert len(a) == 32 and int(a, 16) >= 0


def test_interaction_id__depends_on_the_resource_set_not_its_order_or_repeats() -> None:
    base = interaction_id("step-1", "shell", "permission", ["a", "b"])
    assert interaction_id("step-1", "shell", "permission", ["b", "a"]) == base
    assert interaction_id("step-1", "shell", "permission", ["a", "b", "a"]) == base


def test_interaction_id__differs_for_a_different_resource_set() -> None:
    base = interaction_id("step-1", "shell", "permission", ["deploy api"])
    assert interaction_id("step-1", "shell", "permission", ["deploy web"]) != base
    assert interaction_id("step-1", "shell", "permission", ["deploy api", "deploy web"]) != base
    assert interaction_id("step-1", "shell", "permission", []) != base


def test_interaction_id__differs_for_step_key_and_kind() -> None:
    base = interaction_id("step-1", "k", "question", None)
    assert interaction_id("step-2", "k", "question", None) != base
    assert interaction_id("step-1", "k2", "question", None) != base
    assert interaction_id("step-1", "k", "permission", None) != base
    assert interaction_id("step-1", "k", "question", []) == base


def test_interaction_id__is_not_fooled_by_separators_in_names() -> None:
    assert interaction_id("a", "b|c", "question", None) != interaction_id("a|b", "c", "question", None)
    assert interaction_id("s", "k", "permission", ["x,y"]) != interaction_id("s", "k", "permission", ["x", "y"])


def test_permission_spec__resource_set_is_normalized_as_the_id_sees_it() -> None:
    park = Park(
        continuation="t.finish@1",
        interactions=[Permission(key="p", action="a", resources=["b", "a", "b"], target="team:ops")],
    )
    (spec,) = interaction_specs(park.interactions)
    assert spec.resources == ["a", "b"]
    assert interaction_id("s", spec.key, spec.kind, spec.resources) == interaction_id(
        "s", "p", "permission", ["b", "a"]
    )
