// juiz web page: live progress while a batch runs, and the agreement intervals once they are computed. The only
// script of the page (CSP: script-src 'self').
// Elements with data-progress-url are refreshed from that URL every second until their batch is over; with
// data-reload-when-done the page reloads then, to draw the finished batch's charts and table.
"use strict";

(function () {
  const POLL_MS = 1000;

  function fill(element, data) {
    const set = (field, value) => {
      element.querySelectorAll('[data-field="' + field + '"]').forEach((node) => {
        node.textContent = value;
      });
    };
    set("status", data.status);
    set("done", String(data.done));
    set("ok", String(data.ok));
    set("parse_error", String(data.parse_error));
    set("failed", String(data.failed));
    set("rate", data.judgements_per_s === null ? "–" : data.judgements_per_s.toFixed(2));
    element.querySelectorAll('[data-field="status"]').forEach((node) => {
      node.className = "status s-" + data.status;
    });
    element.querySelectorAll('progress[data-field="bar"]').forEach((bar) => {
      bar.max = data.total;
      bar.value = data.done;
    });
  }

  function follow(element) {
    const url = element.getAttribute("data-progress-url");
    const tick = () => {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
        .then((data) => {
          fill(element, data);
          if (data.terminal) {
            if (element.hasAttribute("data-reload-when-done")) {
              window.location.reload();
            }
            return;
          }
          window.setTimeout(tick, POLL_MS);
        })
        .catch(() => window.setTimeout(tick, POLL_MS * 5));
    };
    window.setTimeout(tick, POLL_MS);
  }

  // The agreement section of a finished batch: its bootstrap intervals are computed in the background; fetch the
  // section (server-rendered, escaped HTML of our own origin) until it answers 200, then swap it in.
  function awaitAgreement(element) {
    const url = element.getAttribute("data-agreement-url");
    const tick = () => {
      fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then((response) => {
          if (response.status === 202) {
            window.setTimeout(tick, POLL_MS * 2);
            return null;
          }
          return response.ok ? response.text() : Promise.reject(response.status);
        })
        .then((html) => {
          if (html !== null) {
            element.innerHTML = html;
            element.removeAttribute("data-agreement-url");
            element.setAttribute("aria-busy", "false");
          }
        })
        .catch(() => window.setTimeout(tick, POLL_MS * 5));
    };
    window.setTimeout(tick, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-progress-url]").forEach(follow);
    document.querySelectorAll("[data-agreement-url]").forEach(awaitAgreement);
  });
})();
