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

  async function loadSessions() {
    let response;
    try {
      response = await api("v1/sessions");
    } catch (error) {
      sayOfList("cannot reach the server: " + error);
      return;
    }
    if (response.status === 401) { sayOfList("enter the bearer token to see the sessions"); return; }
    if (!response.ok) { sayOfList("sessions: HTTP " + response.status); return; }
    const body = await response.json();
    if (listSaid) { say(""); }
    const seen = JSON.stringify(body.sessions);
    if (seen === lastSessions) { return; } // unchanged: keep the rows (and the keyboard focus)
    lastSessions = seen;
    const tbody = $("#sessions tbody");
    tbody.textContent = "";
    for (const s of body.sessions) {
      const row = document.createElement("tr");
      row.dataset.session = s.id;
      row.dataset.kind = s.kind;
      if (current && current.id === s.id) { row.className = "selected"; showGeneration(s); }
      cell(row, s.id);
      cell(row, s.kind);
      cell(row, s.vendor || "");
      cell(row, s.owner_live ? "yes" : "no", "owner-live");
      cell(row, s.generation ? s.generation.id : "none", "generation");
      cell(row, s.mode, "mode");
      const action = document.createElement("td");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "open";
      button.textContent = "Steer";
      button.setAttribute("aria-label", "Steer session " + s.id);
      button.addEventListener("click", () => select(s));
      action.appendChild(button);
      row.appendChild(action);
      tbody.appendChild(row);
    }
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
    $("#stop").disabled = s.kind !== "runtime" || !s.generation;
  }

  function select(s) {
    current = { id: s.id, kind: s.kind };
    $("#session").hidden = false;
    $("#session-id").textContent = s.id;
    $("#receipts tbody").textContent = "";
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
    receiptRow(id, kind);
    let response;
    try {
      response = await api("v1/sessions/" + encodeURIComponent(current.id) + "/inputs", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ kind: kind, text: text, id: id }),
      });
    } catch (error) {
      say("not sent: " + error);
      return;
    }
    const body = await response.json().catch(() => ({}));
    if (body.inputId !== undefined) {
      mark(id, body.disposition, body.reason, Date.now() / 1000, kind);
      say(id + ": " + (body.accepted ? body.disposition : "refused " + body.reason) + " (HTTP " + response.status + ")");
      if (body.accepted) { $("#steer-text").value = ""; }
    } else {
      say("not sent: " + (body.error || "HTTP " + response.status));
    }
  }

  async function stop() {
    if (!current) { return; }
    const response = await api("v1/sessions/" + encodeURIComponent(current.id) + "/stop", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
    const body = await response.json().catch(() => ({}));
    if (body.stopped) {
      say((body.generationId || "the generation") + ": stopped");
    } else {
      say("not stopped: " + (body.reason || body.error || "HTTP " + response.status));
    }
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
