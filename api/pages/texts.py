"""Every sentence the Decisions page shows about an outcome, in one place."""

from __future__ import annotations

BAD_TOKEN = "That token is not valid. Paste the token you were given (it starts with pk_)."
WRONG_KIND = (
    "The Decisions page is for people: {name} is an {kind} principal. Sign in with a human's or an admin's token."
)
FORM_EXPIRED = "This form has expired (the page was open in another session). The page has been reloaded: try again."
SESSION_ENDED = "Your session has ended. Sign in again."
BAD_ID = "There is no prompt with that id."

ANSWERED = "Answered “{prompt}”. The run resumes once every question of its step is settled."
APPROVED = "Approved: {prompt}"
REJECTED = "Rejected: {prompt}"
RECORDED = "Your response to “{prompt}” is recorded; it needs {quorum} responses in all."
# A team's wait (docs/teams.md), on its card and on the run page.
PROGRESS = "{n} of {m} {verdict}"
PROGRESS_REJECTED = " · rejected: {names}"
STILL_NEEDED = "{k} more needed"
YOU_MAY = "; you may {act}"
YOU_DID = "; you {verdict}"
LEVEL = "level {level} reached ({who})"
DECIDED_BY = "decided by {by} at level {level}"
HANDED = "{by} handed it to {to}"
HANDED_ON = "{by} handed {place}'s place to {to}"
IN_PLACE = "{who} (for {place})"

DELEGATED = "Handed your place on “{prompt}” to {to}: they answer it in your place now, and you no longer may."
CANCELED = "Canceled. The run {run} and every question still open in its step are canceled."

CONFLICT = "Too late: this prompt was already {status}{by}. Your answer was not recorded."
CONFLICT_CANCEL = "This prompt was already {status}{by}; it cannot be canceled any more."
GONE = "This prompt can no longer be answered: {why}. Nothing was recorded."
GONE_RUN = "its run is {run_status}"
GONE_WHY = {
    "expired": "it expired",
    "canceled": "it was canceled",
    "interrupted": "it was interrupted (its run could not go on)",
}
INVALID = "That answer does not fit the question, so nothing was recorded:"
NOT_JSON = "{label}: not valid JSON ({problem})"
NOT_STORABLE = "The answer holds what cannot be stored: {problem}"
FORBIDDEN = (
    "You hold no place on this prompt (no grant on its target any more, or you handed your place on), so it"
    " cannot be answered by you."
)
NOT_FOUND = "There is no prompt with that id."
NO_RUN_PROMPT = "That run has no prompt you may cancel it through."

RUN_NOT_FOUND = "There is no run {id}."
RUN_FORBIDDEN = "{name} holds no grant on the target of run {id}, so its history cannot be shown."
