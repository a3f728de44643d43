// Small DOM helpers shared by every page: element building (no HTML strings: text is
// always text), tables, readable problems, buttons that show their own errors, labelled
// fields, formats, polling, SVG charts and an accessible confirmation dialog. No inline
// styles anywhere: the Content Security Policy allows only the stylesheet.

import { ApiProblem } from "./api.js";

const SVG_NS = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false || c === true) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on:")) {
      el.addEventListener(k.slice(3), v);
    } else if (k === "text") {
      el.textContent = String(v);
    } else if (k === "class") {
      el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
    } else if (k === "style") {
      throw new Error("inline styles are refused by the Content Security Policy: use a class");
    } else if (k === "value" && "value" in el) {
      el.value = v;
    } else if (k === "checked" || k === "selected" || k === "disabled") {
      el[k] = Boolean(v);
      if (v) el.setAttribute(k, "");
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
}

/** `h("p", {class: "x", "on:click": f}, "text", child)`: an element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** The same for SVG elements. */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

let idCounter = 0;
/** A document-unique id. */
export function uid(prefix = "id") {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

/** A link inside the console (`link("#/queues", "Queues")`). */
export function link(hash, text, attrs = {}) {
  return h("a", { href: hash, ...attrs }, text);
}

/** A labelled field: `field("Reason", h("input", {name: "reason"}))`. */
export function field(label, input, { hint } = {}) {
  if (!input.id) input.id = uid("f");
  const hintEl = hint ? h("span", { class: "hint", id: `${input.id}-hint` }, hint) : null;
  if (hintEl) input.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: "field" }, h("label", { for: input.id }, label), input, hintEl);
}

/** A select with `options = [[value, text], ...]`. */
export function select(options, value) {
  return h(
    "select",
    {},
    options.map(([v, t]) => h("option", { value: v, selected: v === value }, t)),
  );
}

/**
 * A table in a container that scrolls sideways on a narrow screen:
 * `columns = [{label, render: row => node|string, class?}]`.
 */
export function table(columns, rows, { caption, empty = "Nothing to show." } = {}) {
  if (!rows || rows.length === 0) return h("p", { class: "empty" }, empty);
  const t = h(
    "table",
    {},
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.class }, c.label)))),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          {},
          columns.map((c) => {
            const v = c.render(row);
            return h("td", { class: c.class }, v === null || v === undefined || v === "" ? "—" : v);
          }),
        ),
      ),
    ),
  );
  return h("div", { class: "table-wrap", role: "region", "aria-label": caption || "Table", tabindex: "0" }, t);
}

/** Label/value pairs as a description list; a null value shows "—". */
export function dl(pairs) {
  return h(
    "dl",
    { class: "pairs" },
    pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v === null || v === undefined || v === "" ? "—" : v)]),
  );
}

/** A readable error: the problem's title, detail and status (role=alert). */
export function problem(err) {
  if (err instanceof ApiProblem) {
    const meta = [err.status ? `HTTP ${err.status}` : null, err.code || null].filter(Boolean).join(" · ");
    const extra = [];
    const p = err.problem || {};
    for (const k of ["needs", "operation", "entity", "reason", "field", "retry_after_ms"]) {
      if (p[k] !== undefined && p[k] !== null) extra.push([k.replace(/_/g, " "), String(p[k])]);
    }
    return h(
      "div",
      { class: "problem", role: "alert" },
      h("p", { class: "problem-title" }, err.title),
      err.detail && err.detail !== err.title ? h("p", {}, err.detail) : null,
      extra.length ? dl(extra) : null,
      meta ? h("p", { class: "problem-meta" }, meta) : null,
    );
  }
  return h(
    "div",
    { class: "problem", role: "alert" },
    h("p", { class: "problem-title" }, "Something went wrong"),
    h("p", {}, String((err && err.message) || err)),
  );
}

let alertRegion = null;
let statusRegion = null;

/** The shell's live regions: errors of buttons and polls, and notices. */
export function setRegions(alerts, status) {
  alertRegion = alerts;
  statusRegion = status;
}

/** Shows an error in the shared alert region (replacing the previous one). */
export function showError(err) {
  if (err && err.name === "AbortError") return;
  if (!alertRegion) return;
  const close = h("button", { type: "button", class: "btn btn-quiet", "on:click": () => alertRegion.replaceChildren() }, "Dismiss");
  alertRegion.replaceChildren(h("div", { class: "alert-box" }, problem(err), close));
}

/** Clears the shared alert region. */
export function clearError() {
  if (alertRegion) alertRegion.replaceChildren();
}

/** Clears the shared status region (a page change does). */
export function clearNotice() {
  if (statusRegion) statusRegion.replaceChildren();
}

/** A short notice in the shared status region (role=status). */
export function notice(text) {
  if (statusRegion) statusRegion.replaceChildren(h("p", { class: "notice" }, text));
}

/**
 * A button whose accessible name is its label; while `onClick`'s promise runs it is
 * disabled (and busy), and an error it throws is shown in the shared alert region.
 */
export function button(label, onClick, { kind, type = "button", attrs = {} } = {}) {
  const b = h("button", { type, class: ["btn", kind ? `btn-${kind}` : null], ...attrs }, label);
  b.addEventListener("click", async (ev) => {
    if (b.disabled) return;
    b.disabled = true;
    b.setAttribute("aria-busy", "true");
    try {
      clearError();
      await onClick(ev);
    } catch (e) {
      showError(e);
    } finally {
      b.disabled = false;
      b.removeAttribute("aria-busy");
    }
  });
  return b;
}

/**
 * One decision as a form: a fieldset with its legend (`title`), help and controls, and a
 * submit button (`submitLabel`; `danger` or `plain` for its kind). Submitting asks
 * `confirm()` first when it gives a text, then awaits `call()` and hands the answer to
 * `done`; a refusal stays beside the form as a readable problem and `refused()` is called.
 */
export function actionForm({ title, label = title, help, controls, submitLabel, call, done, refused, danger, plain, confirm: ask }) {
  const errBox = h("div", { class: "rc-error" });
  const kind = danger ? "btn btn-danger" : plain ? "btn" : "btn btn-primary";
  const submit = h("button", { type: "submit", class: kind }, submitLabel);
  const form = h("form", { class: "rc-action", "aria-label": label },
    h("fieldset", {}, h("legend", {}, title), help ? h("p", { class: "muted" }, help) : "", ...controls,
      h("div", { class: "actions" }, submit)),
    errBox);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    errBox.replaceChildren();
    const text = ask ? ask() : "";
    if (text && !(await confirm(text))) return;
    submit.disabled = true;
    try {
      done(await call());
    } catch (err) {
      errBox.replaceChildren(problem(err));
      if (refused) refused(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

/** `2026-01-02 03:04:05` in local time, or "—". */
export function formatTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A datetime-local input's value (local time) as RFC 3339, or "" when empty or invalid. */
export function fromLocalInput(v) {
  if (!v) return "";
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString();
}

/** An RFC 3339 time as the value of a datetime-local input (local time), or "". */
export function toLocalInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** A duration in milliseconds as `850ms`, `12s`, `3m 4s`, `2h 5m`, `3d 4h`. */
export function formatAge(ms) {
  if (ms === null || ms === undefined || Number.isNaN(Number(ms))) return "—";
  const n = Math.max(0, Math.round(Number(ms)));
  if (n < 1000) return `${n}ms`;
  const s = Math.floor(n / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hr = Math.floor(m / 60);
  if (hr < 24) return `${hr}h ${m % 60}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

/** Bytes as `512 B`, `1.5 KiB`, `3.2 MiB`. */
export function formatBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/**
 * Calls `fn` every `intervalMs` while the tab is visible, one call at a time (the next is
 * scheduled when one ends, so the rate is bounded); a hidden tab stops polling and a
 * visible one polls at once. Returns `stop`.
 */
export function poll(fn, intervalMs) {
  let timer = null;
  let stopped = false;
  let running = false;
  const schedule = () => {
    if (!stopped && !document.hidden && timer === null && !running) {
      timer = setTimeout(tick, intervalMs);
    }
  };
  const tick = async () => {
    timer = null;
    if (stopped || document.hidden) return;
    running = true;
    try {
      await fn();
    } catch (e) {
      showError(e);
    } finally {
      running = false;
      schedule();
    }
  };
  const visibility = () => {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
    } else if (timer === null && !running) {
      tick();
    }
  };
  document.addEventListener("visibilitychange", visibility);
  schedule();
  return () => {
    stopped = true;
    clearTimeout(timer);
    timer = null;
    document.removeEventListener("visibilitychange", visibility);
  };
}

function chartTitle(label, text) {
  return [svg("title", {}, `${label}: ${text}`)];
}

/** A small line of `values` (oldest first) as inline SVG with role=img and a label. */
export function sparkline(values, { label = "Trend", width = 120, height = 24 } = {}) {
  const vs = (values || []).map((v) => Number(v) || 0);
  const max = Math.max(1, ...vs);
  const total = vs.reduce((a, b) => a + b, 0);
  const summary = vs.length ? `${total} in total, at most ${Math.max(0, ...vs)}, last ${vs[vs.length - 1]}` : "no data";
  const step = vs.length > 1 ? width / (vs.length - 1) : width;
  const points = vs.map((v, i) => `${(i * step).toFixed(1)},${(height - 1 - (v / max) * (height - 2)).toFixed(1)}`).join(" ");
  return svg(
    "svg",
    { class: "sparkline", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `${label}: ${summary}`, focusable: "false" },
    chartTitle(label, summary),
    vs.length ? svg("polyline", { points, class: "spark-line", fill: "none" }) : null,
  );
}

/**
 * Bars. `series = [{label, value}]` draws one horizontal bar per label; `series =
 * [{label, values: [...]}]` (same length each, oldest first) draws stacked columns over
 * time, one color per series, with a legend.
 */
export function barChart(series, { label = "Chart", width = 480, height = 140, xLabels } = {}) {
  const list = series || [];
  if (list.length && Array.isArray(list[0].values)) return stackedColumns(list, { label, width, height, xLabels });
  const max = Math.max(1, ...list.map((s) => Number(s.value) || 0));
  const rowH = 22;
  const textW = 160;
  const h2 = Math.max(rowH, list.length * rowH);
  const summary = list.map((s) => `${s.label} ${s.value}`).join(", ") || "no data";
  return svg(
    "svg",
    { class: "chart", viewBox: `0 0 ${width} ${h2}`, role: "img", "aria-label": `${label}: ${summary}`, focusable: "false" },
    chartTitle(label, summary),
    list.map((s, i) => {
      const w = ((Number(s.value) || 0) / max) * (width - textW - 50);
      const y = i * rowH;
      return svg(
        "g",
        {},
        svg("text", { x: 0, y: y + 15, class: "chart-text" }, truncate(String(s.label), 24)),
        svg("rect", { x: textW, y: y + 4, width: Math.max(1, w).toFixed(1), height: rowH - 8, class: `bar s${i % 6}` }),
        svg("text", { x: textW + w + 6, y: y + 15, class: "chart-text" }, String(s.value)),
      );
    }),
  );
}

function truncate(s, n) {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function stackedColumns(list, { label, width, height, xLabels }) {
  const n = Math.max(...list.map((s) => s.values.length));
  const totals = Array.from({ length: n }, (_, i) => list.reduce((a, s) => a + (Number(s.values[i]) || 0), 0));
  const max = Math.max(1, ...totals);
  const plotH = height - 18;
  const colW = width / Math.max(1, n);
  const summary =
    list.map((s) => `${s.label} ${s.values.reduce((a, b) => a + (Number(b) || 0), 0)}`).join(", ") || "no data";
  const cols = [];
  for (let i = 0; i < n; i += 1) {
    let y = plotH;
    list.forEach((s, k) => {
      const v = Number(s.values[i]) || 0;
      if (!v) return;
      const hgt = (v / max) * (plotH - 4);
      y -= hgt;
      cols.push(svg("rect", { x: (i * colW + 1).toFixed(1), y: y.toFixed(1), width: Math.max(1, colW - 2).toFixed(1), height: hgt.toFixed(1), class: `bar s${k % 6}` }));
    });
  }
  const axis = [svg("line", { x1: 0, y1: plotH, x2: width, y2: plotH, class: "axis" })];
  if (xLabels && xLabels.length) {
    axis.push(svg("text", { x: 0, y: height - 4, class: "chart-text" }, xLabels[0]));
    axis.push(svg("text", { x: width, y: height - 4, class: "chart-text end" }, xLabels[xLabels.length - 1]));
  }
  axis.push(svg("text", { x: 2, y: 10, class: "chart-text" }, `max ${Math.max(0, ...totals)}`));
  const chart = svg(
    "svg",
    { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${label}: ${summary}`, focusable: "false" },
    chartTitle(label, summary),
    cols,
    axis,
  );
  const legend = h(
    "ul",
    { class: "legend" },
    list.map((s, k) => h("li", {}, h("span", { class: `swatch s${k % 6}`, "aria-hidden": "true" }), s.label)),
  );
  return h("figure", { class: "chart-figure" }, h("figcaption", {}, label), chart, legend);
}

/**
 * Asks `text` in a modal `<dialog>`; resolves true on the confirm button, false on
 * Cancel or Escape. `body` is an optional node shown under the text (a preview).
 */
export function confirm(text, { confirmLabel = "Confirm", kind = "primary", body } = {}) {
  return new Promise((resolve) => {
    const titleId = uid("dlg");
    const dialog = h(
      "dialog",
      { class: "dialog", "aria-labelledby": titleId },
      h("p", { id: titleId, class: "dialog-text" }, text),
      body || null,
      h(
        "div",
        { class: "actions" },
        h("button", { type: "button", class: "btn", "on:click": () => dialog.close("cancel") }, "Cancel"),
        h("button", { type: "button", class: `btn btn-${kind}`, "on:click": () => dialog.close("ok") }, confirmLabel),
      ),
    );
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue === "ok");
      dialog.remove();
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** A page heading with optional actions beside it. */
export function header(title, ...actions) {
  return h("div", { class: "page-head" }, h("h1", {}, title), actions.length ? h("div", { class: "actions" }, actions) : null);
}

/** A titled section. */
export function section(title, ...children) {
  const id = uid("s");
  return h("section", { class: "panel", "aria-labelledby": id }, h("h2", { id }, title), children);
}

/** A count badge (`kind`: "warn", "bad", "ok"). */
export function badge(text, kind) {
  return h("span", { class: ["badge", kind ? `badge-${kind}` : null] }, String(text));
}
