// The live-steering console: plain JavaScript, no build step, no third-party code.
// It talks to the API beside it (relative URLs, so it works mounted under any prefix) and
// keeps the bearer token in this tab's sessionStorage only.
"use strict";

(function () {
  const TOKEN_KEY = "live-steering-token";
  const FINAL = new Set(["applied", "held", "unknown"]);
  const base = new URL(".", window.location.href);
  const $ = (selector) => document.querySelector(selector);
  let current = null; // {id, kind}
  let stream = null; // AbortController of the running event stream
  let lastEventId = null;
  let lastSessions = null;
  let listSaid = false; // the status line says what the session list found wrong

  function token() { return window.sessionStorage.getItem(TOKEN_KEY) || ""; }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (token()) { h["Authorization"] = "Bearer " + token(); }
    return h;
  }

  function say(text) { $("#status").textContent = text; listSaid = false; }

  // The status line shows what the session list last said went wrong (no token, no server): it is
  // cleared by the next list that loads, so it never tells of a problem that is gone.
  function sayOfList(text) { say(text); listSaid = true; }

  // What the last send or stop did, in the session's own line: the list's refreshes never write
  // there, so a send that failed says so until the next send, stop or session.
  function sayOfAction(text) { $("#action-status").textContent = text; }

  function api(path, options) {
    const opts = Object.assign({ cache: "no-store" }, options || {});
    opts.headers = headers(opts.headers);
    return fetch(new URL(path, base), opts);
  }

  function clock(seconds) {
    return typeof seconds === "number" ? new Date(seconds * 1000).toLocaleTimeString() : "";
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (className) { td.className = className; }
    row.appendChild(td);
    return td;
  }

  // -- sessions ----------------------------------------------------------------------------

  const latest = new Map(); // session id -> its description as the last list gave it

  function sessionRow(s) {
    const row = document.createElement("tr");
    row.dataset.session = s.id;
    for (const name of ["id", "kind", "vendor", "owner-live", "generation", "mode"]) { cell(row, "", name); }
    row.querySelector(".id").textContent = s.id;
    const action = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "open";
    button.textContent = "Steer";
    button.setAttribute("aria-label", "Steer session " + s.id);
    button.addEventListener("click", () => select(latest.get(s.id) || s));
    action.appendChild(button);
    row.appendChild(action);
    return row;
  }

  function refused(text) {
    // the list cannot be read (no token, a wrong one): the rows of an earlier token are not shown
    // as if they were current
    sayOfList(text);
    lastSessions = null;
    latest.clear();
    $("#sessions tbody").textContent = "";
  }

  async function loadSessions() {
    let response;
    try {
      response = await api("v1/sessions");
    } catch (error) {
      sayOfList("cannot reach the server: " + error);
      return;
    }
    if (response.status === 401) {
      if (token()) { $("#token-state").textContent = "the server refused this token"; }
      refused(token() ? "the server refused the token: enter the right one" : "enter the bearer token to see the sessions");
      return;
    }
    if (!response.ok) { sayOfList("sessions: HTTP " + response.status); return; }
    const body = await response.json();
    if (listSaid) { say(""); }
    if (token()) { $("#token-state").textContent = "token set for this tab"; }
    const seen = JSON.stringify(body.sessions);
    if (seen === lastSessions) { return; } // unchanged: nothing to touch
    lastSessions = seen;
    // Rows are updated in place, added and removed, never rebuilt: a row (and the button a
    // keyboard user is on) stays the same element while its session lives.
    const tbody = $("#sessions tbody");
    const rows = new Map();
    for (const row of tbody.querySelectorAll("tr")) { rows.set(row.dataset.session, row); }
    latest.clear();
    let next = tbody.firstElementChild;
    for (const s of body.sessions) {
      latest.set(s.id, s);
      let row = rows.get(s.id);
      rows.delete(s.id);
      if (!row) { row = sessionRow(s); }
      if (row === next) { next = row.nextElementSibling; } else { tbody.insertBefore(row, next); }
      row.dataset.kind = s.kind;
      row.querySelector(".kind").textContent = s.kind;
      row.querySelector(".vendor").textContent = s.vendor || "";
      row.querySelector(".owner-live").textContent = s.owner_live ? "yes" : "no";
      row.querySelector(".generation").textContent = s.generation ? s.generation.id : "none";
      row.querySelector(".mode").textContent = s.mode;
      row.className = current && current.id === s.id ? "selected" : "";
      if (current && current.id === s.id) { showGeneration(s); }
    }
    for (const gone of rows.values()) { gone.remove(); }
    if (!body.sessions.length) { sayOfList("no sessions yet"); }
  }

  function showGeneration(s) {
    // a runtime session's mode is how its boundaries deliver steers (C30), a hook session's its relay's
    $("#mode").textContent = s.mode;
    const generation = $("#generation");
    if (s.generation) {
      generation.textContent = s.generation.id;
      generation.dataset.state = "running";
    } else {
      // ended once seen running, however many updates then say none runs (the stream, the list)
      const ended = generation.dataset.state === "running" || generation.dataset.state === "ended";
      generation.textContent = ended ? "ended (none running)" : "none";
      generation.dataset.state = ended ? "ended" : "none";
    }
    const stop = $("#stop");
    const disabled = s.kind !== "runtime" || !s.generation;
    if (disabled && document.activeElement === stop) {
      $("#steer-text").focus(); // a disabled button drops the focus to the page: keep it in the session
    }
    stop.disabled = disabled;
  }

  function select(s) {
    current = { id: s.id, kind: s.kind };
    $("#session").hidden = false;
    $("#session-id").textContent = s.id;
    $("#receipts tbody").textContent = "";
    sayOfAction("");
    $("#generation").dataset.state = "";
    showGeneration(s);
    for (const row of document.querySelectorAll("#sessions tbody tr")) {
      row.className = row.dataset.session === s.id ? "selected" : "";
    }
    openStream();
    $("#steer-text").focus();
  }

  // -- receipts ------------------------------------------------------------------------------

  function receiptRow(inputId, kind) {
    const tbody = $("#receipts tbody");
    for (const row of tbody.querySelectorAll("tr")) {
      if (row.dataset.input === inputId) { return row; }
    }
    const row = document.createElement("tr");
    row.dataset.input = inputId;
    cell(row, inputId);
    cell(row, kind || "", "kind");
    cell(row, "", "state");
    cell(row, "", "reason");
    cell(row, "", "queued-at");
    cell(row, "", "final-at");
    tbody.insertBefore(row, tbody.firstChild);
    return row;
  }

  function mark(inputId, disposition, reason, at, kind) {
    const row = receiptRow(inputId, kind);
    const state = row.querySelector(".state");
    const was = state.dataset.state;
    if (was && FINAL.has(was)) { return; } // dispositions only move forward (C20)
    const shown = disposition || "refused";
    state.textContent = shown;
    state.dataset.state = shown;
    state.className = "state state-" + shown;
    if (reason) { row.querySelector(".reason").textContent = reason; }
    if (kind) { row.querySelector(".kind").textContent = kind; }
    if (shown === "queued" && !row.querySelector(".queued-at").textContent) {
      row.querySelector(".queued-at").textContent = clock(at);
    } else if (FINAL.has(shown) || shown === "refused") {
      row.querySelector(".final-at").textContent = clock(at);
    }
  }

  async function send(event) {
    event.preventDefault();
    if (!current) { return; }
    const text = $("#steer-text").value;
    const kind = $("#steer-kind").value;
    const id = "console-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 8);
    // its row comes with its receipt (or its first event on the stream): a send that gets neither
    // (no server, a refused token, a body too large) leaves no row of an input never submitted
    let response;
    try {
      response = await api("v1/sessions/" + encodeURIComponent(current.id) + "/inputs", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ kind: kind, text: text, id: id }),
      });
    } catch (error) {
      sayOfAction("not sent: " + error);
      return;
    }
    const body = await response.json().catch(() => ({}));
    if (body.inputId !== undefined) {
      mark(id, body.disposition, body.reason, Date.now() / 1000, kind);
      sayOfAction(id + ": " + (body.accepted ? body.disposition : "refused " + body.reason) + " (HTTP " + response.status + ")");
      if (body.accepted) { $("#steer-text").value = ""; }
    } else {
      sayOfAction("not sent: " + (body.error || "HTTP " + response.status));
    }
  }

  async function stop() {
    if (!current) { return; }
    let said;
    try {
      const response = await api("v1/sessions/" + encodeURIComponent(current.id) + "/stop", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: "{}",
      });
      const body = await response.json().catch(() => ({}));
      if (body.stopped) {
        said = (body.generationId || "the generation") + ": stopped";
      } else {
        said = "not stopped: " + (body.reason || body.error || "HTTP " + response.status);
      }
    } catch (error) {
      said = "not stopped: cannot reach the server: " + error;
    }
    sayOfAction(said);
    await loadSessions();
  }

  // -- the event stream (fetch, so that the token travels in a header) -------------------------

  function handle(name, data, id) {
    if (id !== null) { lastEventId = id; }
    let event;
    try { event = JSON.parse(data); } catch (error) { return; }
    if (name === "session") { showGeneration(event); return; }
    if (name === "reset") {
      say("the server's log no longer holds the last event seen; receipts shown may be stale");
      return;
    }
    if (event.input_id && event.disposition) {
      mark(event.input_id, event.disposition, event.reason, event.time, event.kind);
    }
  }

  async function openStream() {
    if (stream) { stream.abort(); }
    const controller = new AbortController();
    stream = controller;
    lastEventId = null;
    const session = current;
    while (!controller.signal.aborted && current === session) {
      const extra = { Accept: "text/event-stream" };
      if (lastEventId !== null) { extra["Last-Event-ID"] = lastEventId; }
      try {
        const response = await fetch(
          new URL("v1/sessions/" + encodeURIComponent(session.id) + "/events?text=1", base),
          { headers: headers(extra), signal: controller.signal, cache: "no-store" });
        if (!response.ok) {
          $("#stream-state").textContent = "(event stream: HTTP " + response.status + ")";
          await new Promise((resolve) => setTimeout(resolve, 3000));
          continue;
        }
        $("#stream-state").textContent = "(live)";
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) { break; }
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const record = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let name = "message", data = "", id = null;
            for (const line of record.split("\n")) {
              if (line.startsWith("id: ")) { id = line.slice(4); }
              else if (line.startsWith("event: ")) { name = line.slice(7); }
              else if (line.startsWith("data: ")) { data += line.slice(6); }
            }
            if (data) { handle(name, data, id); }
          }
        }
      } catch (error) {
        if (controller.signal.aborted) { return; }
      }
      $("#stream-state").textContent = "(reconnecting)";
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  // -- start -----------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("#token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      window.sessionStorage.setItem(TOKEN_KEY, $("#token").value);
      lastSessions = null;
      $("#token").value = "";
      $("#token-state").textContent = "token set for this tab";
      loadSessions();
      if (current) { openStream(); }
    });
    if (token()) { $("#token-state").textContent = "token set for this tab"; }
    $("#steer-form").addEventListener("submit", send);
    $("#stop").addEventListener("click", stop);
    loadSessions();
    window.setInterval(loadSessions, 3000);
  });
})();
