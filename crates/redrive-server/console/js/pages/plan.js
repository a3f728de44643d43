// One replay plan (GET /v1/replay/plans/{id}): its budget, live progress polled every
// 5 s (items, bytes, rates against the budget, window, ETA, stop reason), a chart of
// progress against the budget, its items (GET …/items, paged by seq), and the owner's
// moves: start, pause, resume, cancel (confirmed).

import { duration, planProgress } from "./plans.js";

const SVG = "http://www.w3.org/2000/svg";
const ENDED = ["completed", "cancelled", "stopped"];
const ITEM_STATES = ["waiting", "held", "admitted", "completed", "stopped", "closed"];
const ITEMS_PAGE = 100;

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// Bars of "observed against its limit": each row a track (the limit, 100 %) and the
// observed share of it; a share over the limit is drawn full and marked.
function budgetBars(rows, label) {
  const rowH = 28;
  const width = 600;
  const labelW = 150;
  const valueW = 150;
  const trackW = width - labelW - valueW;
  const s = svg("svg", { viewBox: `0 0 ${width} ${rows.length * rowH + 4}`, role: "img", "aria-label": label, class: "chart" });
  s.append(svg("title", {}, label));
  rows.forEach((r, i) => {
    const y = i * rowH + 4;
    const share = r.limit > 0 ? r.value / r.limit : 0;
    s.append(svg("text", { x: 0, y: y + 15, class: "chart-text" }, r.name));
    s.append(svg("rect", { x: labelW, y, width: trackW, height: 18, class: "rc-chart-track" }));
    s.append(svg("rect", {
      x: labelW, y, width: Math.max(0, Math.min(1, share)) * trackW, height: 18,
      class: share > 1 ? "bar s4" : "bar s0",
    }));
    s.append(svg("text", { x: labelW + trackW + 8, y: y + 14, class: "chart-text" }, r.text));
  });
  return s;
}

// Items admitted over time since the first reading on this page, against the budget's
// ceiling (1 + items/s × elapsed from the first sample).
function progressLine(samples, itemsPerS, total, label) {
  const width = 480;
  const height = 160;
  const pad = 30;
  const s = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label, class: "chart" });
  s.append(svg("title", {}, label));
  const t0 = samples[0].t;
  const span = Math.max(1, samples[samples.length - 1].t - t0) / 1000;
  const base = samples[0].admitted;
  const top = Math.max(1, total, ...samples.map((x) => x.admitted));
  const X = (sec) => pad + (sec / span) * (width - 2 * pad);
  const Y = (n) => height - pad - (Math.min(n, top) / top) * (height - 2 * pad);
  s.append(svg("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, class: "axis" }));
  s.append(svg("line", { x1: pad, y1: pad, x2: pad, y2: height - pad, class: "axis" }));
  s.append(svg("text", { x: 2, y: pad, class: "chart-text" }, String(top)));
  s.append(svg("text", { x: width - pad - 40, y: height - 8, class: "chart-text" }, duration(Math.round(span * 1000))));
  if (itemsPerS) {
    const endN = base + 1 + itemsPerS * span;
    s.append(svg("line", { x1: X(0), y1: Y(base + 1), x2: X(span), y2: Y(endN), class: "rc-chart-budget" }));
  }
  const pts = samples.map((x) => `${X((x.t - t0) / 1000).toFixed(1)},${Y(x.admitted).toFixed(1)}`).join(" ");
  s.append(svg("polyline", { points: pts, class: "rc-chart-line" }));
  return s;
}

function facts(h, pairs) {
  const dl = h("dl", { class: "pairs" });
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === "") continue;
    dl.append(h("dt", {}, k), h("dd", {}, v));
  }
  return dl;
}

export async function render(root, ctx) {
  const { h, table, problem, field, formatTime, formatBytes, link, confirm } = ctx.ui;
  const id = ctx.params.id;
  const path = `/v1/replay/plans/${encodeURIComponent(id)}`;

  const status = h("p", { role: "status", class: "rc-status", "aria-live": "polite" });
  const moves = h("div", { class: "actions" });
  const moveErr = h("div", {});
  const summary = h("div", {});
  const chart = h("div", {});
  const itemsBox = h("div", {});
  root.append(
    h("h1", { class: "rc-wrap" }, `Replay plan ${id}`),
    h("p", {}, link("#/plans", "All replay plans")),
    status, moves, moveErr, summary,
    h("section", { class: "panel", "aria-labelledby": "rc-chart-h" }, h("h2", { id: "rc-chart-h" }, "Progress against the budget"), chart),
    h("section", { class: "panel", "aria-labelledby": "rc-items-h" }, h("h2", { id: "rc-items-h" }, "Items"), itemsBox),
  );

  const samples = [];
  let shownStatus = null;
  let plan;
  let stop = () => {};

  function move(label, action, opts = {}) {
    const b = h("button", { type: "button", class: opts.danger ? "btn btn-danger" : "btn btn-primary" }, label);
    b.addEventListener("click", async () => {
      moveErr.replaceChildren();
      if (opts.confirm && !(await confirm(opts.confirm))) return;
      b.disabled = true;
      try {
        draw(await ctx.api("POST", `${path}/${action}`));
        status.textContent = `${label}: done; the plan is ${plan.status}.`;
        loadItems();
        if (!ENDED.includes(plan.status)) startPolling();
      } catch (err) {
        moveErr.replaceChildren(problem(err));
      } finally {
        b.disabled = false;
      }
    });
    return b;
  }

  function drawMoves(p) {
    const bs = [];
    const cases = p.kind !== "sqs_move";
    if (cases && p.status === "planned") bs.push(move("Start plan", "start"));
    if (cases && p.status === "running") bs.push(move("Pause plan", "pause"));
    if (cases && p.status === "paused") bs.push(move("Resume plan", "resume"));
    if (!ENDED.includes(p.status) && p.status !== "cancelling") {
      bs.push(move("Cancel plan", "cancel", { danger: true, confirm: `Cancel plan ${p.id}? It admits nothing more; replays in flight are still observed. A cancelled plan cannot be resumed.` }));
    }
    moves.replaceChildren(...bs);
  }

  function draw(p) {
    plan = p;
    const g = p.progress;
    const b = p.budget;
    samples.push({ t: Date.now(), admitted: g.admitted });
    if (samples.length > 240) samples.shift();
    // The buttons are drawn again only when the status changes, so a poll does not take
    // the keyboard focus away from one.
    if (p.status !== shownStatus) {
      shownStatus = p.status;
      drawMoves(p);
    }
    const stopped = p.stop_reason
      ? h("div", { role: "alert", class: "rc-error" }, h("strong", {}, `Stopped: ${p.stop_reason}`), p.stop_detail ? ` — ${p.stop_detail}` : "")
      : "";
    summary.replaceChildren(
      h("p", { class: "rc-big" }, "Status ", h("strong", {}, p.status), ` — ${planProgress(p)}`),
      stopped,
      facts(h, [
        ["Kind", p.kind],
        ["Queue", p.queue],
        ["Destination", p.destination || "each message back to its source"],
        ["Owner", p.owner_until ? `${p.owner} (lease until ${formatTime(p.owner_until)})` : p.owner],
        ["Selection", Object.entries(p.selection).filter(([, v]) => v && (!Array.isArray(v) || v.length)).map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(", ") : v}`).join("; ") || "every open case"],
        ["Correction", p.correction],
        ["Items", String(g.items)],
        ["Waiting", String(g.waiting)],
        ["Admitted", String(g.admitted)],
        ["In flight", b ? `${g.in_flight} of at most ${b.max_concurrent}` : String(g.in_flight)],
        ["Completed", String(g.completed)],
        ["Stopped", String(g.stopped)],
        ["Closed without replay", String(g.closed)],
        ["Held", String(g.held)],
        ["Bytes admitted", formatBytes(g.bytes_admitted)],
        ["Window", b ? `${g.window} (${g.window_admitted} of ${b.window} admitted)` : String(g.window)],
        ["Items per second", b ? `${g.items_per_s.toFixed(3)} observed, budget ${b.items_per_s}` : p.sqs_move ? `budget ${p.sqs_move.items_per_s}` : g.items_per_s.toFixed(3)],
        ["Bytes per second", b ? `${formatBytes(Math.round(g.bytes_per_s))}/s observed, budget ${formatBytes(b.bytes_per_s)}/s` : undefined],
        ["ETA (lower bound)", ENDED.includes(p.status) ? "ended" : duration(g.eta_ms)],
        ["Dependency", b ? `${b.dependency.name}: probe ${b.dependency.probe_url}, stops over ${b.dependency.max_error_rate} errors or ${b.dependency.max_latency_ms} ms` : undefined],
        ["Latest readings", p.readings.length ? p.readings.map((r) => `${r.error_rate} errors, ${r.latency_ms} ms`).join("; ") : undefined],
        ["Baseline", p.baseline ? `${p.baseline.error_rate} errors, ${p.baseline.latency_ms} ms` : undefined],
        ["Created", formatTime(p.created_at)],
        ["Updated", formatTime(p.updated_at)],
      ]),
    );
    const rows = [
      { name: "Items settled", value: g.completed + g.closed + g.stopped, limit: g.items, text: `${g.completed + g.closed + g.stopped} of ${g.items}` },
    ];
    if (b) {
      rows.push(
        { name: "Items/s vs budget", value: g.items_per_s, limit: b.items_per_s, text: `${g.items_per_s.toFixed(2)} of ${b.items_per_s}` },
        { name: "Bytes/s vs budget", value: g.bytes_per_s, limit: b.bytes_per_s, text: `${formatBytes(Math.round(g.bytes_per_s))} of ${formatBytes(b.bytes_per_s)}` },
        { name: "In flight vs limit", value: g.in_flight, limit: b.max_concurrent, text: `${g.in_flight} of ${b.max_concurrent}` },
        { name: "Window admitted", value: g.window_admitted, limit: b.window, text: `${g.window_admitted} of ${b.window}` },
      );
    } else if (p.sqs_move) {
      rows.push({ name: "Moved", value: p.sqs_move.moved, limit: p.sqs_move.to_move, text: `${p.sqs_move.moved} of ${p.sqs_move.to_move}` });
    }
    const parts = [budgetBars(rows, `Plan ${p.id}: ${rows.map((r) => `${r.name} ${r.text}`).join("; ")}`)];
    if (samples.length > 1) {
      parts.push(progressLine(samples, b ? b.items_per_s : p.sqs_move ? p.sqs_move.items_per_s : 0, g.items,
        `Items admitted over the last ${duration(samples[samples.length - 1].t - samples[0].t)} against the items-per-second budget`));
    }
    chart.replaceChildren(...parts);
  }

  // ---- items ---------------------------------------------------------------------
  const stateSel = h("select", { name: "item_state" });
  stateSel.append(h("option", { value: "" }, "any state"));
  for (const s of ITEM_STATES) stateSel.append(h("option", { value: s }, s));
  const itemsList = h("div", {});
  let after = null;
  const itemsNav = h("div", { class: "actions" });
  const filterForm = h("form", { class: "filters", "aria-label": "Item filter" }, field("Item state", stateSel),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "btn" }, "Show items")));
  filterForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    after = null;
    loadItems();
  });
  itemsBox.append(filterForm, itemsList, itemsNav);

  async function loadItems() {
    if (plan && plan.kind === "sqs_move") {
      itemsList.replaceChildren(h("p", { class: "muted" }, "An SQS move task has no item rows: its messages are counted in the progress above."));
      return;
    }
    try {
      const q = { limit: String(ITEMS_PAGE) };
      if (stateSel.value) q.state = stateSel.value;
      if (after !== null) q.after = String(after);
      const page = await ctx.api("GET", `${path}/items`, { query: q });
      itemsList.replaceChildren(
        table(
          [
            { label: "#", render: (i) => String(i.seq) },
            { label: "Case", render: (i) => link(`#/case/${encodeURIComponent(i.case_id)}`, i.case_id) },
            { label: "State", render: (i) => i.state },
            { label: "Detail", render: (i) => i.detail || "—" },
            { label: "Window", render: (i) => (i.window === null || i.window === undefined ? "—" : String(i.window)) },
            { label: "Replay message", render: (i) => i.message_id || "—" },
            { label: "Bytes", render: (i) => formatBytes(i.bytes) },
            { label: "Updated", render: (i) => formatTime(i.updated_at) },
          ],
          page.items,
          { caption: after === null ? "Items, in admission order" : `Items after #${after}`, empty: "No items." },
        ),
      );
      const nav = [];
      if (after !== null) {
        const first = h("button", { type: "button", class: "btn" }, "First items");
        first.addEventListener("click", () => { after = null; loadItems(); });
        nav.push(first);
      }
      if (page.items.length === ITEMS_PAGE) {
        const next = h("button", { type: "button", class: "btn" }, "Next items");
        const last = page.items[page.items.length - 1].seq;
        next.addEventListener("click", () => { after = last; loadItems(); });
        nav.push(next);
      }
      itemsNav.replaceChildren(...nav);
    } catch (err) {
      itemsList.replaceChildren(problem(err));
    }
  }

  // ---- polling -------------------------------------------------------------------
  let polling = false;
  function startPolling() {
    if (polling) return;
    polling = true;
    stop = ctx.ui.poll(async () => {
      try {
        draw(await ctx.api("GET", path));
        if (after === null) await loadItems();
        if (ENDED.includes(plan.status)) {
          status.textContent = `The plan ${plan.status}.`;
          stop();
          polling = false;
        }
      } catch (err) {
        moveErr.replaceChildren(problem(err));
      }
    }, 5000);
  }
  ctx.onCleanup(() => stop());

  try {
    draw(await ctx.api("GET", path));
  } catch (err) {
    summary.replaceChildren(problem(err));
    return;
  }
  await loadItems();
  if (!ENDED.includes(plan.status)) startPolling();
}
