"""The Decisions page over HTTP (in-process): sign-in cookie, CSRF, escaping, and every answer outcome as a
readable message. Continuations are driven in this process, as a worker would."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from models.tables import Interaction
from parkway.db import transaction
from tests.api.conftest import ADMIN, AGENT, HUMAN, STRANGER, Actors, drive
from tests.pages.conftest import Forms, start_driven
from tests.support import run_row

PAGE = "/decisions"


@pytest.fixture
def browser_like(client: TestClient, actors: Actors) -> TestClient:
    """The shared client signed out, as a fresh browser would be."""
    client.cookies.clear()
    return client


def pending_id(client: TestClient, actors: Actors, run_id: str, key: str = "q") -> str:
    listed = client.get("/v1/interactions", params={"run_id": run_id}, headers=actors.auth(HUMAN)).json()["items"]
    return str(next(i["id"] for i in listed if i["key"] == key))


def sign_in(client: TestClient, token: str) -> None:
    """Sign in as a fresh browser session would (no cookies of an earlier session)."""
    client.cookies.clear()
    login = Forms(client.get(PAGE).text).forms["/decisions/login"]
    response = client.post(f"{PAGE}/login", data={**login, "token": token}, follow_redirects=False)
    assert response.status_code == 303, response.text


def form_of(html: str, interaction_id: str) -> dict[str, str]:
    return Forms(html).forms[f"/decisions/interactions/{interaction_id}/answer"]


def notice(page: str) -> str:
    found = re.search(r'<div class="notice[^"]*"[^>]*id="notice">(.*?)</div>', page, re.S)
    assert found, page[:2000]
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1))).strip())


# --------------------------------------------------------------------------- signing in


def test_sign_in__sets_an_httponly_strict_cookie_and_never_renders_the_token(
    browser_like: TestClient, actors: Actors
) -> None:
    page = browser_like.get(PAGE)
    assert page.status_code == 200 and 'action="/decisions/login"' in page.text
    login = Forms(page.text).forms["/decisions/login"]
    token = actors.tokens[HUMAN]
    response = browser_like.post(f"{PAGE}/login", data={**login, "token": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == PAGE
    cookies = response.headers.get_list("set-cookie")
    session = next(c for c in cookies if c.startswith("parkway_session="))
    assert "HttpOnly" in session and "SameSite=strict" in session and "Path=/;" in session
    signed_in = browser_like.get(PAGE)
    assert f"signed in as <strong>{HUMAN}</strong>" in signed_in.text
    assert token not in signed_in.text
    assert signed_in.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in signed_in.headers["content-security-policy"]
    # Signing out clears the cookie: the next visit is the sign-in form again
    logout = Forms(signed_in.text).forms["/decisions/logout"]
    assert browser_like.post(f"{PAGE}/logout", data=logout, follow_redirects=False).status_code == 303
    assert 'action="/decisions/login"' in browser_like.get(PAGE).text


@pytest.mark.parametrize(
    ("who", "code", "says"),
    [("bad", 401, "That token is not valid"), (AGENT, 403, "is for people"), ("no-csrf", 403, "expired")],
)
def test_sign_in__refused_with_a_sentence(
    browser_like: TestClient, actors: Actors, who: str, code: int, says: str
) -> None:
    login = Forms(browser_like.get(PAGE).text).forms["/decisions/login"]
    token = {"bad": "pk_forged", "no-csrf": actors.tokens[HUMAN]}.get(who) or actors.tokens[who]
    data = {**login, "token": token}
    if who == "no-csrf":
        data["csrf"] = "0" * 64
    response = browser_like.post(f"{PAGE}/login", data=data, follow_redirects=False)
    assert response.status_code == code and says in response.text
    assert "parkway_session=" not in response.headers.get("set-cookie", "")


# --------------------------------------------------------------------------- CSRF and escaping


def test_answer__without_this_sessions_csrf_token_is_refused_and_nothing_is_stored(
    browser_like: TestClient, actors: Actors
) -> None:
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": "CSRF?"})
    iid = pending_id(browser_like, actors, run_id)
    sign_in(browser_like, actors.tokens[HUMAN])
    fields = form_of(browser_like.get(PAGE).text, iid)
    for forged in ({**fields, "csrf": ""}, {**fields, "csrf": "f" * 64}):
        refused = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data={**forged, "value": "x"})
        assert refused.status_code == 403 and "This form has expired" in notice(refused.text)
    # A form of an earlier session does not verify in a new one, even for the same token
    sign_in(browser_like, actors.tokens[HUMAN])
    stale = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data={**fields, "value": "x"})
    assert stale.status_code == 403
    with transaction() as session:
        assert session.get_one(Interaction, iid).status == "pending"


def test_page__escapes_prompts_and_schema_text(browser_like: TestClient, actors: Actors) -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    schema = {"type": "string", "enum": [evil, "ok"], "description": evil}
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": evil, "schema": schema})
    pending_id(browser_like, actors, run_id)
    sign_in(browser_like, actors.tokens[HUMAN])
    page = browser_like.get(PAGE).text
    assert evil not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page


# --------------------------------------------------------------------------- outcomes


def test_answer__exact_retry_of_a_double_submit_gets_the_same_receipt(browser_like: TestClient, actors: Actors) -> None:
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": "Twice?"})
    iid = pending_id(browser_like, actors, run_id)
    sign_in(browser_like, actors.tokens[HUMAN])
    fields = {**form_of(browser_like.get(PAGE).text, iid), "value": "yes"}
    first = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data=fields)
    again = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data=fields)
    assert first.status_code == again.status_code == 200
    assert notice(first.text).startswith("Answered “Twice?”") and notice(again.text).startswith("Answered")
    drive(run_id)
    assert run_row(run_id).result == {"status": "answered", "value": "yes"}


def test_answer__409_410_and_422_are_sentences_on_the_page(browser_like: TestClient, actors: Actors) -> None:
    sign_in(browser_like, actors.tokens[HUMAN])
    # 422: the value does not fit the schema; nothing stored, a valid answer afterwards still wins
    schema = {"type": "string", "enum": ["now", "tonight"]}
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": "When?", "schema": schema})
    iid = pending_id(browser_like, actors, run_id)
    fields = form_of(browser_like.get(PAGE).text, iid)
    invalid = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data={**fields, "value": "never"})
    assert invalid.status_code == 422
    assert "does not fit the question" in notice(invalid.text) and "'never' is not one of" in notice(invalid.text)
    # 409: another response won (over the API) before the page's form was posted
    fields = form_of(invalid.text, iid)
    won = browser_like.post(
        f"/v1/interactions/{iid}/answer", json={"response_id": "api", "value": "now"}, headers=actors.auth(HUMAN)
    )
    assert won.status_code == 200
    late = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data={**fields, "value": "tonight"})
    assert late.status_code == 409
    assert notice(late.text).startswith(f"Too late: this prompt was already answered by {HUMAN}")
    # 410: the wait ended (canceled over the API) before the page's form was posted
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": "Still there?"})
    iid = pending_id(browser_like, actors, run_id)
    page = browser_like.get(PAGE).text
    fields, cancel_fields = form_of(page, iid), Forms(page).forms[f"{PAGE}/runs/{run_id}/cancel"]
    canceled = browser_like.post(
        f"/v1/interactions/{iid}/cancel", json={"response_id": "c"}, headers=actors.auth(HUMAN)
    )
    assert canceled.status_code == 200
    gone = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data={**fields, "value": "x"})
    assert gone.status_code == 410 and "it was canceled" in notice(gone.text)
    # And canceling it from the page is a 410 too, never a 500
    again = browser_like.post(f"{PAGE}/runs/{run_id}/cancel", data=cancel_fields)
    assert again.status_code == 410 and "it was canceled" in notice(again.text)


def test_answer__a_sensitive_value_is_never_echoed_back_in_a_422(browser_like: TestClient, actors: Actors) -> None:
    run_id = start_driven(browser_like, actors, "pages.deploy", {"service": "search"})
    iid = pending_id(browser_like, actors, run_id, key="plan")
    sign_in(browser_like, actors.tokens[HUMAN])
    fields = form_of(browser_like.get(PAGE).text, iid)
    posted = {**fields, "value.window": "now", "value.replicas": "2", "value.otp": "98-76"}
    invalid = browser_like.post(f"{PAGE}/interactions/{iid}/answer", data=posted)
    assert invalid.status_code == 422 and "otp:" in notice(invalid.text)
    assert "98-76" not in invalid.text


def test_page__lists_a_pending_prompt_on_a_dead_run_as_not_answerable(browser_like: TestClient, actors: Actors) -> None:
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": "Orphaned?"})
    iid = pending_id(browser_like, actors, run_id)
    with transaction() as session:  # a run that ended while its question stayed pending (before a sweep)
        session.execute(text("UPDATE runs SET status = 'failed' WHERE id = :id"), {"id": run_id})
    sign_in(browser_like, actors.tokens[HUMAN])
    page = browser_like.get(PAGE).text
    assert f"/decisions/interactions/{iid}/answer" not in page
    ended = page.split("No longer answerable", 1)[1]
    assert "Orphaned?" in ended and "run failed" in ended


def test_page__shows_only_granted_targets_and_refuses_an_answer_without_a_grant(
    browser_like: TestClient, actors: Actors
) -> None:
    run_id = start_driven(browser_like, actors, "pages.ask", {"prompt": "For ops only"})
    iid = pending_id(browser_like, actors, run_id)
    sign_in(browser_like, actors.tokens[HUMAN])
    fields = form_of(browser_like.get(PAGE).text, iid)
    sign_in(browser_like, actors.tokens[STRANGER])
    page = browser_like.get(PAGE).text
    assert "For ops only" not in page
    stranger_csrf = Forms(page).forms["/decisions/logout"]["csrf"]
    refused = browser_like.post(
        f"{PAGE}/interactions/{iid}/answer", data={**fields, "csrf": stranger_csrf, "value": "mine"}
    )
    assert refused.status_code == 403 and "no grant" in notice(refused.text)
    with transaction() as session:
        assert session.get_one(Interaction, iid).status == "pending"


def test_stream__needs_a_signed_in_session(browser_like: TestClient) -> None:
    assert browser_like.get(f"{PAGE}/stream").status_code == 401


# --------------------------------------------------------------------------- the inbox


def test_inbox__one_card_per_run_with_one_cancel_and_for_me_is_the_default_view(
    browser_like: TestClient, actors: Actors
) -> None:
    run_id = start_driven(browser_like, actors, "pages.deploy", {"service": "inbox"})
    ids = {key: pending_id(browser_like, actors, run_id, key) for key in ("shell", "plan")}
    # A human granted on the target: the run's prompts are one card, with one "Cancel run"
    sign_in(browser_like, actors.tokens[HUMAN])
    page = browser_like.get(PAGE).text
    card = re.search(rf'<article class="card" data-run-of="{run_id}">(.*?)</article>', page, re.S)
    assert card is not None
    listed = re.findall(r'<div class="prompt" data-interaction="([^"]+)"', card.group(1))
    assert sorted(listed) == sorted(ids.values())
    assert card.group(1).count("Cancel run") == 1
    assert re.findall(r'<span class="count" id="count">(\d+)</span>', page) == [str(page.count('<div class="prompt" '))]
    # An admin holding no grant on it: not "for me" (the default), but under "all I may see"
    sign_in(browser_like, actors.tokens[ADMIN])
    assert run_id not in browser_like.get(PAGE).text
    assert f'data-run-of="{run_id}"' in browser_like.get(PAGE, params={"view": "all"}).text
    # The live page's fragment follows the same view
    fragment = f"{PAGE}/runs/{run_id}/card"
    assert browser_like.get(fragment).status_code == 204
    shown = browser_like.get(fragment, params={"view": "all"})
    assert shown.status_code == 200 and f'data-run-of="{run_id}"' in shown.text
    assert Forms(shown.text).forms[f"/decisions/runs/{run_id}/cancel"]["csrf"]
    # (no answer form: holding no place on the prompts, the admin's answer would be refused)
    assert f"/decisions/interactions/{ids['plan']}/answer" not in Forms(shown.text).forms
    browser_like.cookies.clear()
    assert browser_like.get(fragment).status_code == 401
    # "Cancel run" still cancels once the prompt listed first was answered elsewhere
    sign_in(browser_like, actors.tokens[HUMAN])
    cancel_form = Forms(browser_like.get(PAGE).text).forms[f"{PAGE}/runs/{run_id}/cancel"]
    first = listed[0]
    value = {"approved": True} if first == ids["shell"] else {"window": "now", "replicas": 1, "otp": "123456"}
    answered = browser_like.post(
        f"/v1/interactions/{first}/answer", json={"response_id": "inbox", "value": value}, headers=actors.auth(HUMAN)
    )
    assert answered.status_code == 200, answered.text
    canceled = browser_like.post(f"{PAGE}/runs/{run_id}/cancel", data=cancel_form)
    assert canceled.status_code == 200 and notice(canceled.text).startswith("Canceled.")


def test_prompts__a_step_s_prompts_listed_in_the_order_it_declared_them_on_the_card_and_the_api(
    client: TestClient, actors: Actors
) -> None:
    # Given a step that parked on eight questions at once (one created_at; ids that sort otherwise)
    from tests.pages.flows import ORDERED_KEYS

    run_id = start_driven(client, actors, "pages.ordered", {})
    declared = list(ORDERED_KEYS)

    # When its prompts are read: the run, its interactions one page at a time, the Decisions card
    run = client.get(f"/v1/runs/{run_id}", headers=actors.auth(HUMAN)).json()
    paged, cursor = [], None
    while True:
        params = {"run_id": run_id, "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/interactions", params=params, headers=actors.auth(HUMAN)).json()
        paged += [i["key"] for i in page["items"]]
        if (cursor := page["next"]) is None:
            break
    admin = client.get("/v1/interactions", params={"status": "pending", "limit": 200}, headers=actors.auth(ADMIN))
    sign_in(client, actors.tokens[HUMAN])
    card = client.get(f"{PAGE}/runs/{run_id}/card").text

    # Then every list has them in the declared order
    assert [i["key"] for i in run["interactions"]] == declared
    assert paged == declared
    assert [i["key"] for i in admin.json()["items"] if i["run_id"] == run_id] == declared
    assert re.findall(r'data-prompt="The (\w+) question"', card) == declared


def test_card__says_what_the_run_is_about_in_the_title_its_step_gave_it(client: TestClient, actors: Actors) -> None:
    # Given a step that titles its run, and one that does not
    titled = start_driven(client, actors, "pages.ordered", {"title": "Deploy  billing <to> prod"})
    plain = start_driven(client, actors, "pages.ordered", {})

    # When its card, its page and the API are read
    sign_in(client, actors.tokens[HUMAN])
    card, page = client.get(f"{PAGE}/runs/{titled}/card").text, client.get(f"/runs/{titled}").text
    run = client.get(f"/v1/runs/{titled}", headers=actors.auth(HUMAN)).json()

    # Then each leads with the title (one line, escaped), the workflow's name beside it; untitled: the name
    assert "<h3>Deploy billing &lt;to&gt; prod <span" in card and "pages.ordered" in card
    assert "<h1>Deploy billing &lt;to&gt; prod</h1>" in page
    assert run["title"] == "Deploy billing <to> prod" and run["workflow"] == "pages.ordered"
    assert "<h3>pages.ordered</h3>" in client.get(f"{PAGE}/runs/{plain}/card").text
    assert client.get(f"/v1/runs/{plain}", headers=actors.auth(HUMAN)).json()["title"] is None
