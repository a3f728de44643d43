// Topics and push subscriptions: each subscription's delivery (pull, or push with its
// endpoint and health), events waiting, in backoff and in flight, failed attempts by
// status class, dead letters by reason, and delivery and failure rates from the server's
// own time series. Polls every 5 s while the tab is visible.

import { seg } from "../api.js";

/** Subscriptions whose rate chart is drawn (one series request each). */
const MAX_SERIES = 20;

/** `healthy`, `failing` (events wait for a retry) or `paused`, as the overview says. */
function health(s, pushInfo) {
  if (pushInfo && pushInfo.health) return pushInfo.health;
  if (s.paused) return "paused";
  if (s.stats.in_backoff > 0) return "failing";
  return "healthy";
}

// Delivery and failure rates of one subscription from its time series: a push
// subscription's deliveries and failed attempts; a pull subscription's completions and
// its failures (abandoned or dead-lettered).
function rateChart(ui, series, s) {
  const pts = (series && series.points) || [];
  if (!pts.length) return ui.h("p", { class: "muted" }, `No delivery to ${s.name} in the recent window.`);
  const push = s.kind.type === "push";
  return ui.barChart(
    push
      ? [
          { label: "delivered", values: pts.map((p) => p.push_delivered || 0) },
          { label: "failed", values: pts.map((p) => p.push_failed || 0) },
        ]
      : [
          { label: "completed", values: pts.map((p) => p.completed || 0) },
          { label: "failed", values: pts.map((p) => (p.abandoned || 0) + (p.dead_lettered || 0)) },
        ],
    {
      label: `${push ? "Push deliveries" : "Completions"} and failures of ${s.name} per ${Math.round((series.interval_ms || 10000) / 1000)} s`,
      xLabels: [ui.formatTime(pts[0].at), ui.formatTime(pts[pts.length - 1].at)],
    },
  );
}

async function seriesOf(api, queue, signal) {
  try {
    return await api("GET", `/v1/queues/${seg(queue)}/series`, { signal });
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

async function pushHealth(api, signal) {
  try {
    const o = await api("GET", "/v1/overview", { signal });
    const m = new Map();
    for (const t of o.topics || []) for (const s of t.subscriptions || []) if (s.push) m.set(s.queue, s.push);
    return m;
  } catch (e) {
    if (e.status === 404 || e.status === 403) return new Map();
    throw e;
  }
}

export async function render(root, ctx) {
  const { ui, api } = ctx;
  const { h } = ui;
  const body = h("div");
  root.append(ui.header("Topics and subscriptions"), body);
  const draw = async () => {
    const { topics } = await api("GET", "/v1/topics", { signal: ctx.signal });
    if (!topics.length) {
      body.replaceChildren(h("p", { class: "empty" }, "No topics. `redrive topic create <name>` creates one (docs/topics.md)."));
      return;
    }
    const [lists, healthBy] = await Promise.all([
      Promise.all(topics.map((t) => api("GET", `/v1/topics/${seg(t.name)}/subscriptions`, { signal: ctx.signal }).then((r) => r.subscriptions))),
      pushHealth(api, ctx.signal),
    ]);
    const charted = lists.flat().slice(0, MAX_SERIES);
    const series = new Map(
      await Promise.all(charted.map(async (s) => [s.queue, await seriesOf(api, s.queue, ctx.signal)])),
    );
    body.replaceChildren(
      ...topics.map((t, i) => {
        const subs = lists[i];
        return ui.section(
          `Topic ${t.name}`,
          ui.table(
            [
              { label: "Subscription", render: (s) => ui.link(`#/entity/${seg(s.queue)}`, s.name) },
              { label: "Delivery", class: "wrap", render: (s) => (s.kind.type === "push" ? `push to ${s.kind.endpoint}` : "pull") },
              { label: "Health", render: (s) => { if (s.kind.type !== "push") return "—"; const x = health(s, healthBy.get(s.queue)); return ui.badge(x, x === "healthy" ? "ok" : x === "failing" ? "bad" : "warn"); } },
              { label: "Pending", class: "num", render: (s) => String(s.stats.pending) },
              { label: "In backoff", class: "num", render: (s) => String(s.stats.in_backoff) },
              { label: "In flight", class: "num", render: (s) => String(s.stats.in_flight) },
              { label: "Delivered", class: "num", render: (s) => String(s.stats.delivered) },
              { label: "Dead-lettered", class: "num", render: (s) => (s.stats.dead_lettered ? ui.link(`#/dead-letters/${seg(s.queue)}`, String(s.stats.dead_lettered)) : "0") },
              { label: "Oldest pending", render: (s) => ui.formatAge(s.stats.oldest_pending_age_ms) },
            ],
            subs,
            { caption: `Subscriptions of ${t.name}`, empty: "No subscriptions." },
          ),
          subs.map((s) =>
            s.kind.type !== "push"
              ? series.has(s.queue) ? h("div", { class: "grid" }, rateChart(ui, series.get(s.queue), s)) : null
              : h(
                "div",
                { class: "grid" },
                ui.barChart(
                  Object.entries(s.stats.failed_attempts || {}).map(([label, value]) => ({ label, value })),
                  { label: `Failed attempts of ${s.name} by status class` },
                ),
                ui.barChart(
                  Object.entries(s.stats.dead_lettered_by_reason || {}).map(([label, value]) => ({ label, value })),
                  { label: `Dead letters of ${s.name} by reason` },
                ),
                series.has(s.queue) ? rateChart(ui, series.get(s.queue), s) : null,
              ),
            ),
        );
      }),
    );
  };
  await draw();
  ctx.onCleanup(ui.poll(draw, 5000));
}
