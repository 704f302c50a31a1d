// Run history, live, from the cookie-authenticated event stream (/decisions/stream).
// On /runs/{id}: an event of this run appends the new timeline rows and refreshes the summary and tables,
// both rendered by the server (/runs/{id}/timeline?after=N, /runs/{id}/parts). On /runs: status badges.
"use strict";
(function () {
  const live = window.parkwayLive;
  const body = document.body;
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
        live.say("reload for updates", "off");
      })
      .finally(function () {
        busy = false;
        if (again) {
          again = false;
          window.setTimeout(refresh, 300);
        }
      });
  }

  live.open(function (event) {
    if (!run) live.follow(event);
    else if (event.run_id === run && event.seq > last) refresh();
  });
})();
