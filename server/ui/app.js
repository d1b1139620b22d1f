// wovyr's dashboard: polls /ui/state with the admin token and renders it.
// Every value goes into the page as text (textContent), never as markup.
"use strict";

const REFRESH_MS = 1000;
const KEY = "wovyr-admin-token";

const $ = (sel) => document.querySelector(sel);

function takeToken() {
  // A token in the fragment (#token=…) never reaches a server or a log:
  // keep it for this tab and take it out of the address bar.
  const m = /^#token=(.+)$/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem(KEY);
}

function cell(tr, value, cls) {
  const td = document.createElement("td");
  td.textContent = value ?? "";
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function rows(table, items, key, fill) {
  const tbody = $(table + " tbody");
  tbody.replaceChildren();
  for (const it of items ?? []) {
    const tr = document.createElement("tr");
    tr.dataset.key = key(it);
    fill(tr, it);
    tbody.appendChild(tr);
  }
  if (!items?.length) {
    const tr = document.createElement("tr");
    cell(tr, "none", "na").colSpan = $(table + " thead tr")?.children.length ?? 1;
    tbody.appendChild(tr);
  }
}

const ms = (ns) => (ns ? (ns / 1e6).toFixed(ns < 1e7 ? 2 : 0) + " ms" : "");
const yesno = (b) => [b ? "yes" : "no", b ? "yes" : "no"];

function age(since, now) {
  const s = Math.max(0, (new Date(now) - new Date(since)) / 1000);
  if (s < 120) return `${Math.round(s)} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function render(st) {
  $("#node").textContent = `up ${age(st.started, st.now).replace(" ago", "")}` + (st.draining ? " · draining" : st.ready ? "" : " · starting");
  rows("#backends", st.backends, (b) => b.name, (tr, b) => {
    cell(tr, b.name);
    cell(tr, b.strength);
    const [a, ac] = yesno(b.available);
    const td = cell(tr, a, ac);
    if (!b.available && b.reason) td.title = b.reason;
    const [c, cc] = yesno(b.certified);
    cell(tr, c, cc).title = b.cert_reason ?? "";
    cell(tr, b.certified_at ? age(b.certified_at, st.now) : "", "na");
    cell(tr, [b.version, b.accel].filter(Boolean).join(" · "), "reason");
  });

  // The battery matrix, a row per certified backend: one chip per probe,
  // its number inside, its outcome as its colour and in its title.
  const certified = st.backends.filter((b) => b.certified_at).map((b) => b.name);
  rows("#battery", certified, (b) => b, (tr, b) => {
    const th = document.createElement("th");
    th.textContent = b;
    tr.appendChild(th);
    const td = document.createElement("td");
    for (const p of st.battery) {
      const v = p.cells[b];
      if (!v) continue;
      const chip = document.createElement("span");
      chip.className = "chip " + v.replace("/", "");
      chip.textContent = p.id;
      chip.title = `#${p.id} ${p.name}: ${v}`;
      td.appendChild(chip);
    }
    tr.appendChild(td);
  });

  rows("#pools", st.pools, (p) => p.key, (tr, p) => {
    cell(tr, p.key);
    cell(tr, p.state, p.state === "ok" ? "yes" : "no");
    for (const n of [p.warm, p.leased, p.target]) cell(tr, n, "num");
    cell(tr, p.hits + p.misses ? (100 * p.hit_ratio).toFixed(1) + " %" : "", "num");
    for (const n of [p.restores, p.restore_fallbacks, p.create_failures]) cell(tr, n, "num");
  });

  rows("#tenants", st.tenants, (t) => t.name, (tr, t) => {
    cell(tr, t.name);
    for (const n of [t.weight, t.queued, t.running]) cell(tr, n, "num");
    cell(tr, (100 * t.dominant_share).toFixed(1) + " %", "num");
    for (const n of [t.admitted, t.rejected]) cell(tr, n, "num");
    cell(tr, t.wait_samples ? ms(t.wait_p50) : "", "num");
    cell(tr, t.wait_samples ? ms(t.wait_p99) : "", "num").title = `over its last ${t.wait_samples} finished runs`;
  });

  rows("#invocations", st.invocations, (i) => i.id, (tr, i) => {
    cell(tr, i.id).className = "id";
    cell(tr, i.tenant);
    cell(tr, i.backend);
    const state = i.class ? `${i.state} (${i.class})` : i.state;
    cell(tr, state, i.state === "done" && !i.class ? "yes" : i.state === "failed" || i.class ? "no" : "");
    cell(tr, i.state === "queued" || i.state === "running" ? "" : i.exit_code, "num");
    for (const d of [i.queue, i.prepare, i.run, i.total]) cell(tr, ms(d), "num");
    cell(tr, age(i.accepted, st.now), "na");
  });

  rows("#sessions", st.sessions, (s) => s.id, (tr, s) => {
    cell(tr, s.id);
    cell(tr, s.tenant);
    cell(tr, s.backend);
    cell(tr, s.end_reason ? `${s.state} (${s.end_reason})` : s.state, s.state === "running" ? "yes" : "");
    cell(tr, s.image);
    cell(tr, age(s.created, st.now), "na");
  });
}

async function poll(token) {
  const status = $("#status");
  try {
    const resp = await fetch("/ui/state", { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    if (resp.status === 401 || resp.status === 403) {
      const body = await resp.json().catch(() => ({}));
      sessionStorage.removeItem(KEY);
      login(body.message ?? `HTTP ${resp.status}`);
      return;
    }
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    const st = await resp.json();
    render(st);
    $("#main").hidden = false;
    status.textContent = "updated " + new Date(st.now).toLocaleTimeString();
    status.className = "status";
    document.body.dataset.refreshed = st.now;
  } catch (e) {
    status.textContent = "daemon unreachable: " + e.message;
    status.className = "status down";
  }
  setTimeout(() => poll(token), REFRESH_MS);
}

function login(why) {
  $("#main").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = why ?? "";
  $("#status").textContent = "";
}

$("#login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = $("#token").value.trim();
  sessionStorage.setItem(KEY, t);
  $("#login").hidden = true;
  poll(t);
});

const token = takeToken();
if (token) poll(token);
else login();
