// Live run status on the Decisions page, from the cookie-authenticated event stream (/decisions/stream).
// Each event updates the status badges of its run; a prompt that closes meanwhile stops being answerable.
"use strict";
(function () {
  const body = document.body;
  const url = body.dataset.stream;
  const live = document.getElementById("live");
  if (!url || !window.EventSource) {
    if (live) live.textContent = "reload for updates";
    return;
  }
  const terminal = new Set((body.dataset.terminal || "").split(" "));
  const runStatus = {
    "run.created": "running",
    "continuation.ready": "running",
    "step.parked": "waiting",
    "run.completed": "completed",
    "run.failed": "failed",
    "run.canceled": "canceled",
    "run.interrupted": "interrupted",
  };
  const closedAs = {
    "interaction.answered": "answered",
    "interaction.rejected": "rejected",
    "interaction.canceled": "canceled",
    "interaction.expired": "expired",
    "interaction.interrupted": "interrupted",
  };

  function close(card, text) {
    for (const form of card.querySelectorAll("form")) {
      for (const element of form.elements) element.disabled = true;
      form.hidden = true;
    }
    const note = card.querySelector(".closed-note");
    if (note) {
      note.textContent = text;
      note.hidden = false;
    }
    card.classList.add("closed");
  }

  const source = new EventSource(url);
  source.onopen = function () {
    live.textContent = "live";
    live.className = "live on";
  };
  source.onerror = function () {
    live.textContent = "reconnecting…";
    live.className = "live off";
  };
  source.onmessage = function (message) {
    const event = JSON.parse(message.data);
    const run = CSS.escape(event.run_id);
    const status = runStatus[event.type];
    if (status) {
      for (const badge of document.querySelectorAll('[data-run="' + run + '"]')) {
        badge.textContent = status;
        badge.className = "status status-" + status;
      }
      if (terminal.has(status)) {
        for (const card of document.querySelectorAll('article[data-run-of="' + run + '"]')) {
          close(card, "Its run is " + status + ": this prompt is no longer answerable.");
        }
      }
    }
    const state = closedAs[event.type];
    const id = event.data && event.data.interaction_id;
    if (state && typeof id === "string") {
      const who = event.data.answered_by || event.data.canceled_by;
      for (const card of document.querySelectorAll('article[data-run-of][data-interaction="' + CSS.escape(id) + '"]')) {
        close(card, "This prompt was " + state + (who ? " by " + who : "") + ": it is no longer answerable.");
      }
    }
  };
})();
