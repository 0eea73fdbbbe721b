// The approval console of `execbox serve`. No framework, nothing fetched from elsewhere: every
// text from the server is set with textContent (never parsed as markup), the bearer token is
// sent once and forgotten (no web storage), and the CSRF token lives in this script's memory.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const form = $("sign-in-form");
  const tokenInput = $("token");
  const message = $("message");
  const consoleBox = $("console");
  const list = $("entries");
  const live = $("live");
  const empty = $("empty");
  const template = $("entry-template");

  let csrf = null;
  let stream = null;
  // Cards by `executionId#call`.
  const cards = new Map();

  // Characters that could hide or disguise text (controls, format characters such as bidi
  // overrides), written as \u{...}; the server escapes everything else it sends already.
  function shown(text) {
    return String(text).replace(/[\p{Cc}\p{Cf}\u2028\u2029]/gu, (c) =>
      c === "\n" || c === "\t" ? c : "\\u{" + c.codePointAt(0).toString(16).padStart(4, "0") + "}"
    );
  }

  function setText(node, text) {
    node.textContent = text == null ? "" : String(text);
  }

  function say(text) {
    setText(message, text || "");
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (method !== "GET" && csrf) headers["x-execbox-csrf"] = csrf;
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    return { status: response.status, data };
  }

  function refusal(answer) {
    const error = answer.data && answer.data.error;
    if (error) return shown(`${answer.status} ${error.code}: ${error.message}`);
    return `HTTP ${answer.status}`;
  }

  function signedOut(note) {
    csrf = null;
    if (stream) stream.close();
    stream = null;
    cards.clear();
    list.replaceChildren();
    consoleBox.hidden = true;
    $("who").hidden = true;
    form.hidden = false;
    say(note || "");
  }

  function signedIn(info) {
    csrf = info.csrf;
    setText($("principal"), shown(info.principal || "(unnamed)"));
    $("who").hidden = false;
    form.hidden = true;
    consoleBox.hidden = false;
    say(info.approves ? "" : "This principal holds no approve permission: only calls a policy rule asks of it by name or role will appear.");
    listen();
  }

  function listen() {
    if (stream) stream.close();
    setText(live, "Connecting…");
    api("GET", "/console/pending").then((answer) => {
      if (answer.status === 200) render(answer.data.entries);
    });
    stream = new EventSource("/console/events");
    stream.addEventListener("open", () => setText(live, "Live: new calls appear here as they pause."));
    stream.addEventListener("pending", (event) => {
      render(JSON.parse(event.data).entries);
    });
    stream.addEventListener("error", async () => {
      setText(live, "Connection lost; reconnecting…");
      if (stream && stream.readyState === EventSource.CLOSED) {
        const answer = await api("GET", "/console/session");
        if (answer.status === 200) {
          setTimeout(listen, 2000);
        } else {
          signedOut("The session ended; sign in again.");
        }
      }
    });
  }

  function render(entries) {
    const seen = new Set();
    for (const entry of entries) {
      const key = entry.executionId + "#" + entry.pending.call;
      seen.add(key);
      if (!cards.has(key)) {
        const card = build(entry);
        cards.set(key, card);
        list.prepend(card.node);
      }
    }
    for (const [key, card] of cards) {
      if (!seen.has(key) && !card.acted) {
        card.node.remove();
        cards.delete(key);
      }
    }
    empty.hidden = cards.size > 0;
  }

  function build(entry) {
    const node = template.content.firstElementChild.cloneNode(true);
    const q = (selector) => node.querySelector(selector);
    const pending = entry.pending;
    node.dataset.executionId = entry.executionId;
    setText(q(".capability"), entry.capability);
    setText(q(".execution"), entry.executionId);
    const started = new Date(entry.createdMs).toLocaleString();
    setText(q(".meta"), `started by ${entry.startedBy || "(no principal)"} at ${started}`);

    const source = entry.source;
    if (source.from === "none") {
      setText(q(".source"), "(an external executor's capability: its program is not shown)");
    } else {
      setText(q(".source"), source.code);
    }
    if (source.from === "entry") q(".source-box summary").textContent = "Program source (the capability's entry)";
    if (source.params != null) {
      q(".params-label").hidden = false;
      q(".params").hidden = false;
      setText(q(".params"), source.params);
    }

    const ran = q(".ran");
    const earlier = entry.earlierCalls || 0;
    setText(q(".ran-summary"), `Calls that already ran: ${entry.ran.length + earlier}`);
    if (earlier > 0) {
      const item = document.createElement("li");
      item.className = "earlier";
      setText(item, `${earlier} earlier ${earlier === 1 ? "call" : "calls"} not shown`);
      ran.append(item);
    }
    for (const call of entry.ran) {
      const item = document.createElement("li");
      const title = document.createElement("p");
      setText(title, `call ${call.call}: ${call.tool}`);
      const input = document.createElement("pre");
      setText(input, call.input);
      const answer = document.createElement("pre");
      if (call.failed) answer.className = "failed";
      setText(answer, call.answer == null ? "(no answer: cut short)" : (call.failed ? "error: " : "result: ") + call.answer);
      item.append(title, input, answer);
      ran.append(item);
    }

    setText(q(".pending-title"), `Waiting: call ${pending.call} of ${pending.tool}`);
    if (pending.rule || pending.reason) {
      const rule = q(".rule");
      rule.hidden = false;
      const parts = [];
      if (pending.rule) parts.push(`asked by rule ${pending.rule}`);
      if (pending.reason) parts.push(`because: ${pending.reason}`);
      setText(rule, parts.join(", "));
    }
    if (pending.approvers && pending.approvers.length) {
      const approvers = q(".approvers");
      approvers.hidden = false;
      setText(approvers, `approvers: ${pending.approvers.join(", ")}`);
    }
    setText(q(".pending-input"), pending.input);
    setText(q(".digest"), `input SHA-256 ${pending.inputSha256}`);

    const card = { node, acted: false };
    const buttons = [q(".approve"), q(".deny")];
    const reason = q(".deny-reason");
    const result = q(".result");
    const outcome = q(".outcome");

    async function decide(verb) {
      card.acted = true;
      buttons.forEach((b) => (b.disabled = true));
      result.className = "result";
      setText(result, verb === "approve" ? "Approving…" : "Denying…");
      const body = { call: pending.call, inputSha256: pending.inputSha256 };
      if (verb === "deny" && reason.value.trim()) body.reason = reason.value.trim();
      let answer;
      try {
        answer = await api("POST", `/console/executions/${encodeURIComponent(entry.executionId)}/${verb}`, body);
      } catch (e) {
        answer = { status: 0, data: { error: { code: "NETWORK", message: String(e) } } };
      }
      if (answer.status !== 200) {
        result.className = "result refused";
        setText(result, `Refused: ${refusal(answer)}`);
        buttons.forEach((b) => (b.disabled = false));
        return;
      }
      setText(result, `${verb === "approve" ? "Approved" : "Denied"} call ${pending.call}; waiting for the execution to end…`);
      await waitFor(entry.executionId, result, outcome);
    }
    q(".approve").addEventListener("click", () => decide("approve"));
    q(".deny").addEventListener("click", () => decide("deny"));
    return card;
  }

  async function waitFor(id, result, outcome) {
    for (;;) {
      let answer;
      try {
        answer = await api("GET", `/console/executions/${encodeURIComponent(id)}/wait?timeoutMs=30000`);
      } catch (e) {
        answer = { status: 0, data: null };
      }
      if (answer.status === 200 && answer.data.status === "awaiting_approval") {
        setText(result, "It paused again, at another call: see the list.");
        return;
      }
      if (answer.status === 200) {
        const o = answer.data;
        result.className = o.success ? "result done" : "result refused";
        setText(result, `Ended: ${o.status}`);
        const shownOutcome = { status: o.status, success: o.success };
        if (o.result !== undefined && o.result !== null) shownOutcome.result = o.result;
        if (o.error) shownOutcome.error = o.error;
        outcome.hidden = false;
        setText(outcome, shown(JSON.stringify(shownOutcome, null, 2)));
        return;
      }
      if (answer.status === 202) continue;
      result.className = "result refused";
      setText(result, `Could not wait for the outcome: ${refusal(answer)}`);
      return;
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = tokenInput.value;
    // The token leaves the page's fields at once; it is sent once and never kept.
    tokenInput.value = "";
    say("");
    let answer;
    try {
      answer = await api("POST", "/console/sign-in", { token: token });
    } catch (e) {
      answer = { status: 0, data: { error: { code: "NETWORK", message: String(e) } } };
    }
    if (answer.status === 200) {
      signedIn(answer.data);
    } else {
      say(`Sign-in refused: ${refusal(answer)}`);
    }
  });

  $("sign-out").addEventListener("click", async () => {
    await api("POST", "/console/sign-out", {});
    signedOut("Signed out.");
  });

  api("GET", "/console/session").then(
    (answer) => (answer.status === 200 ? signedIn(answer.data) : signedOut()),
    () => signedOut("The server cannot be reached.")
  );
})();
