// What the live pages share: the cookie-authenticated event stream (/decisions/stream, the body's
// data-stream), the "live" badge in the bar, and the status badges of runs ([data-run]).
"use strict";
window.parkwayLive = (function () {
  const runStatus = {
    "run.created": "running",
    "continuation.ready": "running",
    "step.parked": "waiting",
    "run.completed": "completed",
    "run.failed": "failed",
    "run.canceled": "canceled",
    "run.interrupted": "interrupted",
  };

  function say(text, state) {
    const live = document.getElementById("live");
    if (!live) return;
    live.textContent = text;
    live.className = "live" + (state ? " " + state : "");
  }

  // The status an event moves its run to, shown on every badge of that run; null when it moves none.
  function follow(event) {
    const status = runStatus[event.type] || null;
    if (status) {
      for (const badge of document.querySelectorAll('[data-run="' + CSS.escape(event.run_id) + '"]')) {
        badge.textContent = status;
        badge.className = "status status-" + status;
      }
    }
    return status;
  }

  function open(onEvent) {
    const url = document.body.dataset.stream;
    if (!url || !window.EventSource) {
      say("reload for updates", "off");
      return null;
    }
    const source = new EventSource(url);
    source.onopen = function () {
      say("live", "on");
    };
    source.onerror = function () {
      say("reconnecting…", "off");
    };
    source.onmessage = function (message) {
      onEvent(JSON.parse(message.data));
    };
    return source;
  }

  return { follow: follow, open: open, say: say };
})();
