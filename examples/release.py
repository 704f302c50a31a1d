"""The README's two-person approval with an escalation ("Approvals as teams make them", docs/teams.md): two
of on-call must approve a release, a nudge after ten minutes, the leads may approve too after an hour."""

from pydantic import BaseModel, Field

from tasks.sdk import Complete, Park, Permission, continuation, step


class Release(BaseModel):
    service: str = Field(min_length=1, max_length=100)


@step("release.request", payload=Release)
def release_request(ctx, payload):
    service = payload.service
    return Park(continuation="release.decide@1", snapshot={"service": service}, interactions=[
        Permission(key="deploy", action="deploy", resources=[service], target="team:oncall",
                   quorum=2,                              # two distinct approvals
                   remind_after=[600],                    # interaction.reminded after 10 minutes
                   escalate=[(3600, "team:leads")],       # after an hour the leads may approve too
                   expires_in=7200),                      # then, with fewer than two, expired
    ])  # fmt: skip


@continuation("release.decide", version=1)
def release_decide(ctx, snapshot, answers):
    decision = answers["deploy"]
    if not decision.approved:  # rejected by one of them, or expired
        return Complete(result={"deployed": False, "status": decision.status})
    return Complete(result={"deployed": True, "service": snapshot["service"],
                            "approvals": [(r.principal, r.level) for r in decision.responses]})  # fmt: skip
