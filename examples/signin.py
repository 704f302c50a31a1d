"""A question with a sensitive field: the one-time code reaches the continuation, and nothing else."""

from pydantic import BaseModel, Field

from tasks.sdk import Complete, Fail, Park, Question, continuation, step

CODE = {
    "type": "object",
    "properties": {"user": {"type": "string", "minLength": 1}, "otp": {"type": "string", "pattern": "^[0-9]{6}$"}},
    "required": ["user", "otp"],
    "additionalProperties": False,
}


class SignIn(BaseModel):
    site: str = Field(default="example.com", min_length=1, max_length=200)


@step("signin.ask", payload=SignIn)
def ask(ctx, payload):
    return Park(continuation="signin.check@1", snapshot={"site": payload.site}, interactions=[
        Question(key="code", prompt="Your user name and the 6-digit code from your phone?", schema=CODE,
                 target="example", sensitive=["otp"], expires_in=600),
    ])  # fmt: skip


@continuation("signin.check", version=1)
def check(ctx, snapshot, answers):
    code = answers["code"]
    if code.status != "answered":
        return Fail(f"no code arrived ({code.status})")
    # The code is readable here only: it is erased in this continuation's commit.
    return Complete(
        result={"site": snapshot["site"], "user": code.value["user"], "code_digits": len(code.value["otp"])}
    )
