// The Decisions page as a live inbox, from the cookie-authenticated event stream (/decisions/stream).
// A prompt asked meanwhile is fetched as its run's card (rendered by the server, with its forms); a prompt
// that closes, or whose run ends, leaves the list and is listed below; status badges follow their runs.
"use strict";
(function () {
  const live = window.parkwayLive;
  const terminal = new Set((document.body.dataset.terminal || "").split(" "));
  const view = document.body.dataset.view || "mine";
  const cards = document.getElementById("run-cards");
  const closedAs = {
    "interaction.answered": "answered",
    "interaction.rejected": "rejected",
    "interaction.canceled": "canceled",
    "interaction.expired": "expired",
    "interaction.interrupted": "interrupted",
  };
  const fetching = new Map(); // run id -> a fetch of its card is due (several asks of one step: one fetch)
  const closed = new Set(); // prompts and runs seen closing: a card fetched before that is stale for them

  function count() {
    const n = cards ? cards.querySelectorAll(".prompt").length : 0;
    const badge = document.getElementById("count");
    if (badge) badge.textContent = String(n);
    const none = document.getElementById("none-waiting");
    if (none) none.hidden = n > 0;
  }

  function listClosed(prompt, state, who) {
    // The prompt's own text, already on the page, as a compact line of the section it now belongs to.
    const section = document.getElementById(state === "answered" || state === "rejected" ? "decided" : "ended");
    if (!section) return;
    const item = document.createElement("article");
    item.className = "card compact" + (section.id === "ended" ? " ended" : "");
    item.dataset.interaction = prompt.dataset.interaction;
    const line = document.createElement("div");
    line.className = "line";
    const badge = document.createElement("span");
    const shown = state === "answered" && prompt.dataset.kind === "permission" ? "approved" : state;
    badge.className = "state state-" + shown.split(" ")[0];
    badge.textContent = shown;
    const text = document.createElement("strong");
    text.textContent = prompt.dataset.prompt || "";
    line.append(badge, text);
    const meta = document.createElement("p");
    meta.className = "meta";
    meta.textContent = (who ? "by " + who + " · " : "") + "just now";
    item.append(line, meta);
    const empty = section.querySelector(".empty");
    if (empty) empty.hidden = true;
    section.querySelector("h2").after(item);
  }

  function leave(prompt, state, who) {
    const card = prompt.closest("article[data-run-of]");
    prompt.remove();
    listClosed(prompt, state, who);
    if (card && !card.querySelector(".prompt")) card.remove();
    count();
  }

  function fetchCard(run) {
    if (!cards || fetching.has(run)) return;
    fetching.set(run, true);
    window.setTimeout(function () {
      fetch("/decisions/runs/" + encodeURIComponent(run) + "/card?view=" + encodeURIComponent(view), {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
      })
        .then(function (response) {
          if (response.status === 200) return response.text();
          return null;
        })
        .then(function (html) {
          fetching.delete(run);
          const old = cards.querySelector('article[data-run-of="' + CSS.escape(run) + '"]');
          if (html === null) {
            if (old) old.remove();
          } else {
            const holder = document.createElement("div");
            holder.innerHTML = html; // the server's autoescaped template: no script runs (CSP: script-src 'self')
            const card = holder.querySelector("article[data-run-of]");
            for (const prompt of card ? card.querySelectorAll(".prompt") : []) {
              if (closed.has(prompt.dataset.interaction)) prompt.remove();
            }
            if (!card || closed.has(run) || !card.querySelector(".prompt")) {
              if (old) old.remove();
            } else if (old) old.replaceWith(card);
            else cards.append(card);
          }
          count();
        })
        .catch(function () {
          fetching.delete(run);
        });
    }, 150);
  }

  live.open(function (event) {
    const status = live.follow(event);
    if (status && terminal.has(status)) {
      closed.add(event.run_id);
      for (const prompt of document.querySelectorAll('article[data-run-of="' + CSS.escape(event.run_id) + '"] .prompt')) {
        leave(prompt, "run " + status, null);
      }
    }
    if (event.type === "interaction.asked") fetchCard(event.run_id);
    const state = closedAs[event.type];
    const id = event.data && event.data.interaction_id;
    if (state && typeof id === "string") {
      const who = event.data.answered_by || event.data.canceled_by;
      closed.add(id);
      for (const prompt of document.querySelectorAll('.prompt[data-interaction="' + CSS.escape(id) + '"]')) {
        leave(prompt, state, who);
      }
    }
  });
  count();
})();
