"""Reviews over HTTP: the queue and reviews are scoped to the reviewer's tenant, a review of verdicts that
changed since is refused (409), and bad reviews get a 400 naming the claim."""

from __future__ import annotations

import pytest

from auditor.auth.keys import create_key
from auditor.jobs import scoring
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


@pytest.fixture
def setup(app_factory, monkeypatch):
    # Live scoring must not move the verdicts under the test's feet: the embedded worker's evaluator fails
    # every record (a failed evaluation is never current), and the test lands its own evaluations.
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:Unscored")
    client = app_factory()
    database = client.app.state.services.database
    with database.session() as session:
        keys = {name: create_key(session, tenant=tenant, role="reviewer")[1]
                for name, tenant in (("acme", "acme"), ("other", "other"))}
    mine = append_output(database, "[false] Rates rose in 2022. Gold is a metal.", tenant="acme")
    theirs = append_output(database, "[false] Bonds are stocks.", tenant="other")
    first = scoring.score_record(database, MarkerEvaluator("m/1"), scoring.ScoreRequest(mine))
    scoring.score_record(database, MarkerEvaluator("m/1"), scoring.ScoreRequest(theirs))
    return client, database, {k: {"Authorization": f"Bearer {v}"} for k, v in keys.items()}, mine, theirs, first


def test_reviews_are_scoped_and_refused_when_the_verdicts_moved_on(setup) -> None:
    client, database, headers, mine, theirs, first = setup
    queue = client.get("/v1/reviews/queue", headers=headers["acme"]).json()["data"]
    assert [r["id"] for r in queue] == [mine]
    review = {"evaluation_id": first.evaluation_id, "claims": [{"claim_index": 0, "decision": "confirm"}]}
    assert client.post(f"/v1/audits/{theirs}/reviews", json=review, headers=headers["acme"]).status_code == 404
    newer = scoring.score_record(database, MarkerEvaluator("m/2"), scoring.ScoreRequest(mine))   # a re-score lands
    stale = client.post(f"/v1/audits/{mine}/reviews", json=review, headers=headers["acme"])
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "verdicts_changed"
    review["evaluation_id"] = newer.evaluation_id
    assert client.post(f"/v1/audits/{mine}/reviews", json=review, headers=headers["acme"]).status_code == 201


@pytest.mark.parametrize(("item", "message"), [
    ({"claim_index": 1, "decision": "false_positive"}, "false_positive disputes a contradicted verdict"),
    ({"claim_index": 0, "decision": "false_negative"}, "already contradicted"),
    ({"decision": "false_negative"}, "missed claim"),
    ({"claim_index": 0, "decision": "maybe"}, "decision"),
])
def test_bad_reviews_are_400(setup, item, message) -> None:
    client, _, headers, mine, _, _ = setup
    response = client.post(f"/v1/audits/{mine}/reviews", json={"claims": [item]}, headers=headers["acme"])
    assert response.status_code == 400 and message in response.json()["error"]["message"], response.text
