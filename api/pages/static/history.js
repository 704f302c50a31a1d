// Run history, live, from the cookie-authenticated event stream (/decisions/stream).
// On /runs/{id}: an event of this run appends the new timeline rows and refreshes the summary and tables,
// both rendered by the server (/runs/{id}/timeline?after=N, /runs/{id}/parts). On /runs: status badges.
"use strict";
(function () {
  const body = document.body;
  const url = body.dataset.stream;
  const live = document.getElementById("live");
  if (!url || !window.EventSource) {
    if (live) live.textContent = "reload for updates";
    return;
  }
  const runStatus = {
    "run.created": "running",
    "continuation.ready": "running",
    "step.parked": "waiting",
    "run.completed": "completed",
    "run.failed": "failed",
    "run.canceled": "canceled",
    "run.interrupted": "interrupted",
  };
  const run = body.dataset.run;
  const timeline = document.getElementById("timeline");
  let last = Number(body.dataset.last || "0");
  let busy = false;
  let again = false;

  function html(path) {
    return fetch(path, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (r) {
      if (r.status !== 200) throw new Error("HTTP " + r.status);
      return r.text();
    });
  }

  function renumber() {
    const rows = timeline.querySelectorAll("li[data-seq]");
    rows.forEach(function (row, index) {
      const n = row.querySelector(".n");
      if (n) n.textContent = String(index + 1);
    });
    const count = document.getElementById("event-count");
    if (count) count.textContent = String(rows.length);
  }

  function refresh() {
    // One refresh at a time; events arriving meanwhile make one more.
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    const base = "/runs/" + encodeURIComponent(run);
    Promise.all([html(base + "/timeline?after=" + last), html(base + "/parts")])
      .then(function (parts) {
        const holder = document.createElement("ol");
        holder.innerHTML = parts[0]; // the server's autoescaped template: no script runs (CSP: script-src 'self')
        for (const row of Array.from(holder.children)) {
          const seq = Number(row.dataset.seq);
          if (seq > last) {
            timeline.append(row);
            last = seq;
          }
        }
        renumber();
        document.getElementById("parts").innerHTML = parts[1];
      })
      .catch(function () {
        again = false; // signed out, or no longer granted: the page says so instead of retrying
        live.textContent = "reload for updates";
        live.className = "live off";
      })
      .finally(function () {
        busy = false;
        if (again) {
          again = false;
          window.setTimeout(refresh, 300);
        }
      });
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
    if (run) {
      if (event.run_id === run && event.seq > last) refresh();
      return;
    }
    const status = runStatus[event.type];
    if (!status) return;
    for (const badge of document.querySelectorAll('[data-run="' + CSS.escape(event.run_id) + '"]')) {
      badge.textContent = status;
      badge.className = "status status-" + status;
    }
  };
})();
