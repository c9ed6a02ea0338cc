// The datasched dashboard: log in with a token (kept in this tab's session storage), then
// poll the server's HTML fragments every second with it; submit and cancel through the
// JSON API (/api/v1). Plain JavaScript, no build step, nothing fetched from elsewhere.
"use strict";

const TOKEN_KEY = "datasched.token";
// How often the fragments are fetched: 1 s, or ?period_ms=N (at least 100) in the address.
const PERIOD_MS = Math.max(100, Number(new URLSearchParams(location.search).get("period_ms")) || 1000);
let timer = null;
let busy = false;

const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function call(path, options = {}) {
  const headers = Object.assign({}, options.headers, { Authorization: "Bearer " + token() });
  return fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
}

function selectedRequest() {
  const m = /^#request=([A-Za-z0-9_-]+)$/.exec(location.hash);
  return m ? m[1] : null;
}

function errorsList(errors) {
  const ul = document.createElement("ul");
  for (const e of errors || []) {
    const li = document.createElement("li");
    const code = document.createElement("code");
    code.textContent = e.field || "request";
    li.append(code, ": " + e.reason);
    ul.append(li);
  }
  return ul;
}

async function fill(id, path) {
  if (!token()) return false;  // logged out while a refresh was under way
  const response = await call(path);
  if (response.status === 401) {
    logout("Your token is no longer valid; log in again.");
    return false;
  }
  if (response.ok) {
    $(id).innerHTML = await response.text();
  } else if (response.status !== 429) {
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = "Could not load (" + response.status + ").";
    $(id).replaceChildren(p);
  }
  return response.ok;
}

async function refresh() {
  if (busy || !token() || document.hidden) return;  // a tab in the background waits
  busy = true;
  try {
    await fill("cluster", "/dashboard/fragments/cluster");
    await fill("requests", "/dashboard/fragments/requests");
    const rid = selectedRequest();
    $("request-section").hidden = rid === null;
    if (rid !== null) {
      $("request-id").textContent = rid;
      await fill("request", "/dashboard/fragments/requests/" + encodeURIComponent(rid));
    }
  } catch (err) {
    // The daemon is restarting or the network is down: try again at the next tick.
    console.warn("refresh failed", err);
  } finally {
    busy = false;
  }
}

function start(who) {
  $("whoami").innerHTML = who;
  $("login-section").hidden = true;
  $("session").hidden = false;
  $("app").hidden = false;
  refresh();
  timer = setInterval(refresh, PERIOD_MS);
}

function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (timer !== null) clearInterval(timer);
  timer = null;
  for (const id of ["cluster", "requests", "request", "submit-result", "whoami"]) {
    $(id).replaceChildren();
  }
  history.replaceState(null, "", location.pathname + location.search);  // no request open
  $("request-section").hidden = true;
  $("app").hidden = true;
  $("session").hidden = true;
  $("login-section").hidden = false;
  $("login-error").textContent = message || "";
  $("token").value = "";
  $("token").focus();
}

async function login(event) {
  event.preventDefault();
  const value = $("token").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  let response;
  try {
    response = await call("/dashboard/fragments/whoami");
  } catch (err) {
    sessionStorage.removeItem(TOKEN_KEY);
    $("login-error").textContent = "The service did not answer.";
    return;
  }
  if (!response.ok) {
    sessionStorage.removeItem(TOKEN_KEY);
    $("login-error").textContent =
      response.status === 401 ? "That token is not valid." : "Login failed (" + response.status + ").";
    return;
  }
  $("login-error").textContent = "";
  start(await response.text());
}

async function submit(event) {
  event.preventDefault();
  const out = $("submit-result");
  out.replaceChildren("Submitting…");
  const response = await call("/api/v1/requests", {
    method: "POST",
    headers: { "Content-Type": $("request-format").value },
    body: $("request-text").value,
  });
  let body = {};
  try {
    body = await response.json();
  } catch (err) {
    body = {};
  }
  const p = document.createElement("p");
  if (response.status === 201) {
    p.className = "ok";
    const a = document.createElement("a");
    a.href = "#request=" + body.id;
    a.textContent = body.id;
    p.append("Accepted: request ", a, " (" + body.jobs + " elementary jobs).");
    out.replaceChildren(p);
    location.hash = "request=" + body.id;
  } else {
    p.className = "error";
    p.textContent =
      response.status === 422 && body.id
        ? "Refused: request " + body.id + " is kept with the reasons:"
        : "Not submitted (" + response.status + "):";
    out.replaceChildren(p, errorsList(body.errors));
  }
  refresh();
}

async function cancel(button) {
  const rid = button.dataset.cancel;
  button.disabled = true;
  const response = await call("/api/v1/requests/" + encodeURIComponent(rid), { method: "DELETE" });
  if (!response.ok) {
    button.disabled = false;
    button.title = "Cancel failed (" + response.status + ")";
  }
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("submit-form").addEventListener("submit", submit);
  $("logout").addEventListener("click", () => logout(""));
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-cancel]");
    if (button) cancel(button);
  });
  window.addEventListener("hashchange", refresh);
  document.addEventListener("visibilitychange", refresh);
  if (token()) {
    call("/dashboard/fragments/whoami").then(async (r) => {
      if (r.ok) start(await r.text());
      else logout("");
    }, () => logout("The service did not answer."));
  }
});
