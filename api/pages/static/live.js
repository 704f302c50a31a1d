// The Decisions page as a live inbox, from the cookie-authenticated event stream (/decisions/stream).
// A prompt asked meanwhile is fetched as its run's card (rendered by the server, with its forms); a prompt
// that closes, or whose run ends, leaves the list and is listed below; status badges follow their runs. A
// team's wait (a response, a delegation, an escalation) has its card's progress line fetched anew.
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
  const teamEvents = new Set(["interaction.responded", "interaction.delegated", "interaction.escalated"]);
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

  // A run whose card is due to be fetched again: "whole" when a prompt was asked (the card is placed anew),
  // else its prompts' team lines are brought up to date (a response, a delegation, an escalation), leaving
  // what the person is typing alone. One fetch per run at a time; an event during it makes one more.
  const due = new Map(); // run id -> {whole, busy, again}

  function fetchCard(run, whole) {
    if (!cards) return;
    const state = due.get(run);
    if (state) {
      state.whole = state.whole || whole;
      if (state.busy) state.again = true;
      return;
    }
    due.set(run, { whole: whole, busy: false, again: false });
    window.setTimeout(function () {
      load(run);
    }, 150);
  }

  function load(run) {
    const state = due.get(run);
    const whole = state.whole;
    state.busy = true;
    state.whole = false;
    fetch("/decisions/runs/" + encodeURIComponent(run) + "/card?view=" + encodeURIComponent(view), {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    })
      .then(function (response) {
        if (response.status === 200) return response.text();
        return null;
      })
      .then(function (html) {
        place(run, html, whole);
        count();
      })
      .catch(function () {})
      .finally(function () {
        if (state.again) {
          state.again = false;
          window.setTimeout(function () {
            load(run);
          }, 150);
        } else due.delete(run);
      });
  }

  function place(run, html, whole) {
    const old = cards.querySelector('article[data-run-of="' + CSS.escape(run) + '"]');
    let card = null;
    if (html !== null) {
      const holder = document.createElement("div");
      holder.innerHTML = html; // the server's autoescaped template: no script runs (CSP: script-src 'self')
      card = holder.querySelector("article[data-run-of]");
      for (const prompt of card ? card.querySelectorAll(".prompt") : []) {
        if (closed.has(prompt.dataset.interaction)) prompt.remove();
      }
    }
    if (!card || closed.has(run) || !card.querySelector(".prompt")) {
      if (old && whole) old.remove(); // a team's event never ends a prompt: its closing event does
    } else if (!old) cards.append(card);
    else if (whole) old.replaceWith(card);
    else {
      for (const prompt of card.querySelectorAll(".prompt")) {
        const shown = old.querySelector('.prompt[data-interaction="' + CSS.escape(prompt.dataset.interaction) + '"]');
        if (shown) update(shown, prompt);
        else old.querySelector("form.cancel").before(prompt);
      }
    }
  }

  function update(shown, fresh) {
    // The team line as the server reads it now; the answer form goes once the person has responded.
    const line = shown.querySelector(".team");
    const now = fresh.querySelector(".team");
    if (line && now) line.replaceWith(now);
    else if (line) line.remove();
    else if (now) shown.querySelector(".meta").after(now);
    const form = shown.querySelector("form.answer");
    if (form && !fresh.querySelector("form.answer")) form.remove();
  }

  live.open(function (event) {
    const status = live.follow(event);
    if (status && terminal.has(status)) {
      closed.add(event.run_id);
      for (const prompt of document.querySelectorAll('article[data-run-of="' + CSS.escape(event.run_id) + '"] .prompt')) {
        leave(prompt, "run " + status, null);
      }
    }
    if (event.type === "interaction.asked") fetchCard(event.run_id, true);
    if (teamEvents.has(event.type)) fetchCard(event.run_id, false);
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
