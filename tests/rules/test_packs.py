"""Rule-pack loading, validation errors and hashing."""

import copy

import pytest
import yaml

from rules import PackError, load_pack
from rules.packs import PACK_DIR, parse_pack


@pytest.mark.parametrize("domain", ["finance", "medical", "legal"])
def test_bundled_packs_load(domain: str) -> None:
    pack = load_pack(domain)
    assert pack.domain == domain and pack.rules
    assert len(pack.hash) == 64


def raw(domain: str = "medical") -> dict:
    return yaml.safe_load((PACK_DIR / f"{domain}.yaml").read_text())


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["rules"][1].update(severity="urgent"), "rules[1] (id 'med.indication.label'): field 'severity'"),
        (lambda d: d["rules"][0].update(on_fail="explode"), "rules[0] (id 'med.dose.max_daily'): field 'on_fail'"),
        (lambda d: d["rules"][2].update(validator="medical.nope"), "rules[2] (id 'med.interaction.known'): field 'validator'"),
        (lambda d: d["rules"][0].pop("description"), "rules[0] (id 'med.dose.max_daily'): field 'description'"),
        (lambda d: d["rules"][3].update(surprise=1), "rules[3] (id 'med.icd10cm.code'): field 'surprise'"),
        (lambda d: d["rules"][1].update(id=d["rules"][0]["id"]), "rules[1] (id 'med.dose.max_daily'): field 'id'"),
        (lambda d: d.pop("version"), "field 'version'"),
        (lambda d: d.update(domain="astrology"), "field 'domain'"),
    ],
)
def test_malformed_pack_names_rule_and_field(mutate, expected: str) -> None:
    data = copy.deepcopy(raw())
    mutate(data)
    with pytest.raises(PackError) as info:
        parse_pack(data, origin="test.yaml")
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def test_hash_changes_with_content_not_with_formatting(tmp_path) -> None:
    data = raw()
    reformatted = tmp_path / "same.yaml"
    reformatted.write_text(yaml.safe_dump(data, default_flow_style=True))
    assert load_pack(reformatted).hash == load_pack("medical").hash
    data["rules"][0]["severity"] = "low"
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(data))
    assert load_pack(changed).hash != load_pack("medical").hash


def test_missing_and_invalid_files(tmp_path) -> None:
    with pytest.raises(PackError, match="no rule pack"):
        load_pack(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("rules: [unclosed")
    with pytest.raises(PackError, match="not valid YAML"):
        load_pack(broken)


def test_intents_filter_rules() -> None:
    data = raw()
    data["rules"][0]["intents"] = ["medical-diagnosis"]
    pack = parse_pack(data)
    assert "med.dose.max_daily" in {r.id for r in pack.rules_for("medical-diagnosis")}
    assert "med.dose.max_daily" not in {r.id for r in pack.rules_for("code-completion")}
    assert len(pack.rules_for(None)) == len(pack.rules)


def test_cached_hash_is_the_canonical_digest_and_is_not_carried_into_a_changed_copy() -> None:
    import hashlib
    import json

    pack = load_pack("medical")
    first = pack.hash   # computed once, then kept: verify() reads it for every sentence
    assert pack.hash is first
    canonical = json.dumps(pack.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    assert first == hashlib.sha256(canonical.encode()).hexdigest()
    assert "hash" not in pack.model_dump()   # not a field: never stored or compared as one
    data = raw()
    data["version"] = "2099.1.1"
    assert parse_pack(data).hash != first   # a different pack, its own hash
