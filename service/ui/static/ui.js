// juiz web page: live progress while a batch runs, the agreement intervals once they are computed, a notice when
// the session ends, confirmations, a fresh page after back/forward. The only script of the page (CSP: 'self').
// Elements with data-progress-url are refreshed from that URL every second until their batch is over; with
// data-live-url (the batch page) the charts, agreement and table are refreshed in place as results arrive.
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
    // Conversations done / planned move within an item (a check-based one is ~14): the page moves before the first
    // item is done.
    if (data.conversations !== undefined) {
      set("conversations", data.conversations);
      set("eta", data.eta);
    }
    element.querySelectorAll('[data-field="status"]').forEach((node) => {
      node.className = "status s-" + data.status;
    });
    if (data.terminal) {
      // A batch that is over can't be cancelled: its cancel form goes (the page is not reloaded any more).
      element.querySelectorAll("[data-while-running]").forEach((node) => node.remove());
    }
    element.querySelectorAll('progress[data-field="bar"]').forEach((bar) => {
      bar.max = data.total;
      bar.value = data.done;
    });
  }

  // The session ended (signed out elsewhere, expired, keys rotated): say so and offer a sign-in that comes back here,
  // instead of polling on in silence.
  function signedOut() {
    if (document.getElementById("signed-out")) {
      return;
    }
    const banner = document.createElement("p");
    banner.id = "signed-out";
    banner.className = "error banner";
    banner.setAttribute("role", "alert");
    const link = document.createElement("a");
    link.href = "/ui/signin?next=" + encodeURIComponent(window.location.pathname + window.location.search);
    link.textContent = "Sign in again";
    banner.append("Your session has ended: this page no longer updates. ", link);
    document.querySelector("main").prepend(banner);
  }

  // The store (Redis) is away: the page says so (it shows what it had, and updates again once the store is back).
  function storeDown(down) {
    const shown = document.getElementById("store-down");
    if (!down) {
      if (shown) {
        shown.remove();
      }
      return;
    }
    if (shown) {
      return;
    }
    const banner = document.createElement("p");
    banner.id = "store-down";
    banner.className = "error banner";
    banner.setAttribute("role", "alert");
    banner.textContent =
      "The store (Redis) is unreachable: this page shows what it had and updates again once the store is back.";
    document.querySelector("main").prepend(banner);
  }

  // Our own fetches: marked, so a lost session answers 401 instead of a redirect to the sign-in form.
  function get(url, accept) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: accept, "X-Juiz-Fetch": "1" } }).then(
      (response) => {
        if (response.status === 401) {
          signedOut();
          return Promise.reject(401);
        }
        return response;
      },
    );
  }

  // The batch page while its batch runs: when the graded count moved (and once more at the end), fetch the parts
  // that move — scores, agreement, the items table under this page's own filters, rendered and escaped by the
  // server — and swap them in place. No reload: the scroll position, open <details> elsewhere and focus stay.
  let shownDone = null;
  let shownTerminal = false;
  function refresh(element, data) {
    // Once over, the page is refreshed once: later ticks only watch the store (a refresh would put back the
    // agreement section's pending state after its intervals were swapped in).
    if (data.done === shownDone && (!data.terminal || shownTerminal)) {
      return;
    }
    shownDone = data.done;
    shownTerminal = Boolean(data.terminal);
    get(element.getAttribute("data-live-url") + window.location.search, "application/json")
      .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
      .then((parts) => {
        Object.entries(parts.html).forEach(([id, html]) => {
          const target = document.getElementById(id);
          if (target) {
            target.innerHTML = html;
          }
        });
        const agreement = document.getElementById("agreement-body");
        if (parts.agreement_pending && agreement && !agreement.hasAttribute("data-agreement-url")) {
          agreement.setAttribute("data-agreement-url", element.getAttribute("data-live-url").replace(/live$/, "agreement"));
          agreement.setAttribute("aria-busy", "true");
          awaitAgreement(agreement);
        }
      })
      .catch(() => {
        shownDone = null; // try again on the next tick
      });
  }

  function follow(element) {
    const url = element.getAttribute("data-progress-url");
    const tick = () => {
      get(url, "application/json")
        .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
        .then((data) => {
          storeDown(false);
          fill(element, data);
          if (element.hasAttribute("data-live-url")) {
            refresh(element, data);
          }
          // Over: checked now and then only, so an open page still learns that the store went away.
          window.setTimeout(tick, data.terminal ? POLL_MS * 10 : POLL_MS);
        })
        .catch((status) => {
          if (status !== 401) {
            storeDown(status === 503 || typeof status !== "number");
            window.setTimeout(tick, POLL_MS * 2);
          }
        });
    };
    window.setTimeout(tick, POLL_MS);
  }

  // The agreement section of a finished batch: its bootstrap intervals are computed in the background; fetch the
  // section (server-rendered, escaped HTML of our own origin) until it answers 200, then swap it in.
  function awaitAgreement(element) {
    const url = element.getAttribute("data-agreement-url");
    const tick = () => {
      get(url, "text/html")
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
        .catch((status) => {
          if (status !== 401) {
            window.setTimeout(tick, POLL_MS * 5);
          }
        });
    };
    window.setTimeout(tick, POLL_MS);
  }

  // Forms that can't be undone (cancel a batch) ask first.
  function confirmFirst(form) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.getAttribute("data-confirm"))) {
        event.preventDefault();
      }
    });
  }

  // The label queue: a key names a button (data-key: the class's letter, S skip, U undo); pressing it presses the
  // button, so the keyboard does exactly what the mouse does. Typing in a field or with a modifier is left alone.
  function queueKeys(section) {
    let sent = false;
    document.addEventListener("keydown", (event) => {
      const target = event.target;
      if (sent || event.ctrlKey || event.metaKey || event.altKey || event.repeat) {
        return;
      }
      if (target && /^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName)) {
        return;
      }
      const button = section.querySelector('button[data-key="' + CSS.escape(event.key.toLowerCase()) + '"]');
      if (button) {
        sent = true; // one step per page: a held or doubled key doesn't label the next item unseen
        event.preventDefault();
        button.click();
      }
    });
  }

  // A label being saved survives a store outage: the form is sent by the page; while the store (Redis) is away
  // (503, or no answer) the label is kept in the page, a notice says so, and it is sent again every few seconds
  // until it is stored. Then the page goes where the form would have gone.
  const RETRY_MS = 2000;
  function keepLabel(form) {
    let pending = null;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (pending) {
        return;
      }
      const body = new URLSearchParams(new FormData(form, event.submitter));
      const label = body.get("label") || body.get("manual_label") || "";
      pending = body;
      const send = () => {
        // getAttribute: the queue's form has a field named "action", which `form.action` would return instead
        fetch(form.getAttribute("action"), {
          method: "POST",
          body: pending,
          credentials: "same-origin",
          headers: { "X-Juiz-Fetch": "1" },
        })
          .then((response) => {
            if (response.status === 503) {
              return Promise.reject(503);
            }
            if (response.status === 401) {
              signedOut();
              return Promise.reject(401);
            }
            pending = null; // stored: leaving the page now loses nothing (no "leave the page?" prompt)
            document.getElementById("label-kept")?.remove();
            window.location.assign(response.url);
            return null;
          })
          .catch((status) => {
            if (status === 401) {
              pending = null;
              return;
            }
            notice(label);
            window.setTimeout(send, RETRY_MS);
          });
      };
      send();
    });
    window.addEventListener("beforeunload", (event) => {
      if (pending) {
        event.preventDefault();
      }
    });
  }

  function notice(label) {
    let banner = document.getElementById("label-kept");
    if (!banner) {
      banner = document.createElement("p");
      banner.id = "label-kept";
      banner.className = "error banner";
      banner.setAttribute("role", "alert");
      document.querySelector("main").prepend(banner);
    }
    banner.textContent =
      "The store (Redis) is unreachable: your label " +
      label +
      " is kept in this page and saved as soon as the store is back (trying again every few seconds). " +
      "Keep this page open.";
  }

  // The upload's name field follows the chosen file (its name without the suffix) until someone types their own
  // (a name sent back with a refused upload's form is theirs too: kept).
  function nameFromFile(field) {
    const file = document.getElementById(field.getAttribute("data-name-from"));
    let filled = "";
    file.addEventListener("change", () => {
      if (file.files.length === 0 || field.value !== filled) {
        return;
      }
      filled = file.files[0].name.replace(/\.[^.]*$/, "").slice(0, field.maxLength > 0 ? field.maxLength : 200);
      field.value = filled;
    });
  }

  // A page restored from the back/forward cache is the document as it was (a label since saved shows its old
  // value, despite no-store): fetch it afresh.
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) {
      window.location.reload();
    }
  });

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-progress-url]").forEach(follow);
    document.querySelectorAll("[data-agreement-url]").forEach(awaitAgreement);
    document.querySelectorAll("form[data-confirm]").forEach(confirmFirst);
    document.querySelectorAll("[data-queue-keys]").forEach(queueKeys);
    document.querySelectorAll("input[data-name-from]").forEach(nameFromFile);
    document.querySelectorAll("form[data-keep-label]").forEach(keepLabel);
  });
})();
