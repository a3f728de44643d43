// The console's shell: boot (who am I), the sign-in screen, the navigation and the hash
// router. Pages are ES modules loaded with import() on first visit; each renders into a
// fresh <main> and registers cleanups (timers) run when the page changes.

import { api, ApiProblem, onUnauthenticated, setToken, token } from "./api.js";
import * as ui from "./ui.js";
import { home, navParent, routes } from "./routes.js";

const { h } = ui;

const shell = {
  whoami: null,
  cleanups: [],
  generation: 0,
  started: false,
  app: null,
  nav: null,
  main: null,
  banner: null,
  who: null,
  menu: null,
};

const NO_AUTH_TEXT = "This server runs without --auth: anyone who can reach it can do anything.";

/** Parses `#/path/param?query` into the route, its params and its query. */
export function parseHash(hash) {
  const raw = (hash || "").replace(/^#\/?/, "");
  const q = raw.indexOf("?");
  const pathPart = q >= 0 ? raw.slice(0, q) : raw;
  const query = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : "");
  const [first, ...rest] = pathPart.split("/");
  const route = routes.find((r) => r.path === (first || home));
  const params = {};
  if (route && route.param && rest.length && rest[0] !== "") {
    try {
      params[route.param] = decodeURIComponent(rest.join("/"));
    } catch {
      params[route.param] = rest.join("/");
    }
  }
  return { route, params, query, path: first || home };
}

function runCleanups() {
  const list = shell.cleanups;
  shell.cleanups = [];
  for (const fn of list) {
    try {
      fn();
    } catch (e) {
      ui.showError(e);
    }
  }
}

async function whoami() {
  try {
    return await api("GET", "/v1/whoami");
  } catch (e) {
    // A server without the endpoint: who the caller is stays unknown.
    if (e instanceof ApiProblem && (e.status === 404 || e.status === 405)) {
      return { auth: null, actor: null, grants: [], unknown: true };
    }
    throw e;
  }
}

function signInScreen(reason) {
  runCleanups();
  shell.started = false;
  shell.generation += 1;
  document.title = "Sign in · redrive";
  const input = h("input", { type: "password", name: "token", autocomplete: "off", spellcheck: "false", required: true });
  const errors = h("div", { class: "sign-in-errors" });
  const form = h(
    "form",
    { class: "sign-in", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in to redrive"),
    h("p", {}, "Paste an API token (rdt_…). It is kept in this tab only and sent with each request; closing the tab forgets it."),
    ui.field("API token", input, { hint: "An admin creates tokens with: redrive token create <name> --grant <role>" }),
    errors,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "btn btn-primary" }, "Sign in")),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    errors.replaceChildren();
    setToken(input.value.trim());
    try {
      const me = await whoami();
      if (me.unknown) await api("GET", "/v1/queues", { query: { limit: 1 } });
      shell.whoami = me;
      start();
    } catch (e) {
      setToken(null);
      errors.replaceChildren(ui.problem(e));
      submit.disabled = false;
      input.focus();
    }
  });
  const main = h("main", { id: "main", class: "sign-in-page" }, form);
  if (reason) errors.append(ui.problem(reason));
  shell.app.replaceChildren(main);
  input.focus();
}

function signOut() {
  setToken(null);
  shell.whoami = null;
  signInScreen(null);
}

function renderChrome() {
  const navList = h("ul", { id: "nav-list", class: "nav-list" });
  for (const r of routes.filter((r) => r.nav)) {
    navList.append(h("li", {}, h("a", { href: `#/${r.path}`, "data-path": r.path }, r.title)));
  }
  shell.menu = h(
    "button",
    { type: "button", class: "btn btn-quiet menu-toggle", "aria-controls": "nav-list", "aria-expanded": "false" },
    "Menu",
  );
  shell.menu.addEventListener("click", () => {
    const open = shell.menu.getAttribute("aria-expanded") !== "true";
    shell.menu.setAttribute("aria-expanded", String(open));
    shell.nav.classList.toggle("open", open);
  });
  shell.who = h("span", { class: "who" });
  const signOutButton = h("button", { type: "button", class: "btn btn-quiet", "on:click": signOut }, "Sign out");
  shell.nav = h("nav", { class: "nav", "aria-label": "Main" }, navList);
  const top = h(
    "header",
    { class: "top" },
    h("a", { class: "brand", href: `#/${home}` }, "redrive"),
    shell.menu,
    h("div", { class: "top-right" }, shell.who, signOutButton),
  );
  shell.banner = h("div", { class: "banner-slot" });
  const alerts = h("div", { class: "alerts", role: "alert", "aria-live": "assertive" });
  const status = h("div", { class: "status-region", role: "status", "aria-live": "polite" });
  ui.setRegions(alerts, status);
  shell.main = h("main", { id: "main", tabindex: "-1" });
  shell.content = h("div", { class: "content" }, shell.banner, alerts, status, shell.main);
  shell.app.replaceChildren(top, h("div", { class: "body" }, shell.nav, shell.content));
}

function renderWho() {
  const me = shell.whoami || {};
  shell.banner.replaceChildren();
  if (me.auth === false) {
    shell.banner.append(h("p", { class: "banner", role: "note" }, NO_AUTH_TEXT));
  }
  const roles = me.roles_summary && me.roles_summary.length ? ` (${me.roles_summary.join(", ")})` : "";
  shell.who.textContent = me.actor ? `${me.actor}${roles}` : token() ? "signed in" : "";
}

function markCurrent(path) {
  const current = navParent[path] || path;
  for (const a of shell.nav.querySelectorAll("a[data-path]")) {
    if (a.dataset.path === current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function route() {
  if (!shell.started) return;
  runCleanups();
  ui.clearError();
  ui.clearNotice();
  const generation = ++shell.generation;
  const { route: r, params, query, path } = parseHash(location.hash);
  const main = h("main", { id: "main", tabindex: "-1" });
  shell.main.replaceWith(main);
  shell.main = main;
  shell.nav.classList.remove("open");
  shell.menu.setAttribute("aria-expanded", "false");
  markCurrent(path);
  if (!r) {
    document.title = "Not found · redrive";
    main.append(ui.header("Not found"), h("p", {}, "There is no such page. "), ui.link(`#/${home}`, "Go to the overview"));
    return;
  }
  document.title = `${r.title} · redrive`;
  const controller = new AbortController();
  const ctx = {
    params,
    query,
    api,
    ui,
    whoami: shell.whoami,
    navigate: (hash) => {
      location.hash = hash;
    },
    onCleanup: (fn) => shell.cleanups.push(fn),
    signal: controller.signal,
  };
  shell.cleanups.push(() => controller.abort());
  let mod;
  try {
    mod = await import(r.module);
  } catch (e) {
    if (generation !== shell.generation) return;
    main.append(ui.header(r.title), ui.problem(new Error(`This page could not be loaded: ${e.message || e}`)));
    return;
  }
  if (generation !== shell.generation) return;
  try {
    await mod.render(main, ctx);
  } catch (e) {
    if (generation !== shell.generation || (e && e.name === "AbortError")) return;
    main.append(ui.problem(e));
  }
}

function start() {
  shell.started = true;
  renderChrome();
  renderWho();
  if (!location.hash || location.hash === "#" || location.hash === "#/") {
    history.replaceState(null, "", `#/${home}`);
  }
  route().then(() => shell.main && shell.main.focus({ preventScroll: true }));
}

async function boot() {
  shell.app = document.getElementById("app");
  onUnauthenticated((err) => {
    if (shell.started) {
      // A token that stopped working says why; a first visit just asks for one.
      const hadToken = Boolean(token());
      setToken(null);
      signInScreen(hadToken ? err : null);
    }
  });
  window.addEventListener("hashchange", () => {
    route().then(() => shell.main && shell.main.focus({ preventScroll: true }));
  });
  // An error no page caught is shown, not left in the browser's log.
  window.addEventListener("unhandledrejection", (ev) => {
    ev.preventDefault();
    ui.showError(ev.reason);
  });
  const hadToken = Boolean(token());
  try {
    shell.whoami = await whoami();
  } catch (e) {
    if (e instanceof ApiProblem && e.status === 401) {
      setToken(null);
      // A kept token that no longer works says why; a first visit just asks for one.
      signInScreen(hadToken ? e : null);
      return;
    }
    shell.app.replaceChildren(h("main", { id: "main" }, ui.header("redrive"), ui.problem(e)));
    return;
  }
  start();
}

boot();
