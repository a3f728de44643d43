// Overview: every queue, topic and subscription with its counts and the oldest message's
// age; what needs a look (dead letters, quarantine, flagged replays, overdue or escalated
// cases, unhealthy push endpoints) first; on a fresh install, the commands that create a
// first queue, and a form that creates one. Polls every 5 s while the tab is visible.

import { seg } from "../api.js";

const FIRST_QUEUE = [
  "redrive queue create orders --max-delivery-count 3 --lock-duration 30s",
  "redrive send orders '{\"order\": 1}' --message-id order-1",
  "redrive receive orders --max 10 --complete",
];

const HIGHLIGHT_TEXT = {
  dead_letters: "dead letters",
  quarantine: "in quarantine",
  flagged_replay: "flagged replay records",
  case_overdue: "overdue cases",
  case_escalated: "escalated cases",
  push_unhealthy: "push endpoint unhealthy",
};

/** The overview from `GET /v1/overview`, or (a server without it) from the lists. */
async function load(api, signal) {
  try {
    return await api("GET", "/v1/overview", { signal });
  } catch (e) {
    if (e.status !== 404) throw e;
  }
  const [{ queues }, { topics }] = await Promise.all([
    api("GET", "/v1/queues", { signal }),
    api("GET", "/v1/topics", { signal }),
  ]);
  const subs = await Promise.all(
    topics.map((t) => api("GET", `/v1/topics/${seg(t.name)}/subscriptions`, { signal }).then((r) => r.subscriptions)),
  );
  const subQueues = new Map();
  subs.flat().forEach((s) => subQueues.set(s.queue, s));
  const rows = queues.map((q) => {
    const s = subQueues.get(q.name);
    return {
      name: q.name,
      kind: s ? "subscription" : "queue",
      topic: s ? s.topic : null,
      subscription: s ? s.name : null,
      counts: { ...q.counts, quarantined: null },
      oldest_message_age_ms: q.counts.oldest_message_age_ms ?? null,
      replay: null,
    };
  });
  const highlights = rows
    .filter((r) => r.counts.dead_lettered > 0)
    .map((r) => ({ kind: "dead_letters", entity: r.name, count: r.counts.dead_lettered, detail: `${r.counts.dead_lettered} dead letters` }));
  return {
    queues: rows,
    topics: topics.map((t, i) => ({
      name: t.name,
      subscriptions: subs[i].map((s) => ({ name: s.name, queue: s.queue, push: s.kind && s.kind.type === "push" ? { endpoint: s.kind.endpoint, health: null, in_backoff: s.stats.in_backoff } : null })),
    })),
    cases: null,
    flagged_replays: null,
    highlights,
    empty: rows.length === 0 && topics.length === 0,
    partial: true,
  };
}

function highlightList(ui, highlights) {
  const { h, link } = ui;
  if (!highlights.length) return h("p", { class: "muted" }, "Nothing needs a look: no dead letters, quarantine, flagged replays or late cases.");
  return h(
    "ul",
    { class: "highlights" },
    highlights.map((x) => {
      const text = x.detail || `${x.count} ${HIGHLIGHT_TEXT[x.kind] || x.kind}`;
      let target = null;
      if (x.kind === "dead_letters" && x.entity) target = `#/dead-letters/${seg(x.entity)}`;
      else if (x.kind === "quarantine" || x.kind === "flagged_replay") target = "#/quarantine";
      else if (x.kind === "case_overdue") target = "#/cases?overdue=true";
      else if (x.kind === "case_escalated") target = "#/cases?state=escalated";
      else if (x.kind === "push_unhealthy") target = "#/topics";
      const label = x.entity ? `${x.entity}: ${text}` : text;
      return h("li", { class: x.kind === "dead_letters" || x.kind === "push_unhealthy" ? "" : "warn" }, target ? link(target, label) : label);
    }),
  );
}

function emptyState(ui) {
  const { h } = ui;
  return ui.section(
    "No queues yet",
    h("p", {}, "This server has no queues, topics or subscriptions. Create a first queue, send a message and receive it with the CLI (see the README's quick start):"),
    h("pre", { class: "commands" }, h("code", {}, FIRST_QUEUE.join("\n"))),
    h("p", { class: "muted" }, "`--url` (or REDRIVE_URL) points the CLI at this server; with --auth, REDRIVE_TOKEN carries the token."),
  );
}

function entityTable(ui, queues) {
  const { link } = ui;
  const n = (v) => (v === null || v === undefined ? "—" : String(v));
  return ui.table(
    [
      {
        label: "Entity",
        render: (q) => link(`#/entity/${seg(q.name)}`, q.kind === "subscription" && q.topic ? `${q.topic} › ${q.subscription}` : q.name),
      },
      { label: "Kind", render: (q) => q.kind },
      { label: "Active", class: "num", render: (q) => n(q.counts.active) },
      { label: "Locked", class: "num", render: (q) => n(q.counts.locked) },
      { label: "Scheduled", class: "num", render: (q) => n(q.counts.scheduled) },
      { label: "Deferred", class: "num", render: (q) => n(q.counts.deferred) },
      {
        label: "Dead-lettered",
        class: "num",
        render: (q) => (q.counts.dead_lettered ? link(`#/dead-letters/${seg(q.name)}`, String(q.counts.dead_lettered)) : "0"),
      },
      { label: "Quarantined", class: "num", render: (q) => n(q.counts.quarantined) },
      { label: "Oldest message", render: (q) => ui.formatAge(q.oldest_message_age_ms) },
      { label: "Replay", render: (q) => (q.replay ? q.replay.state || "on" : "—") },
    ],
    queues,
    { caption: "Queues and subscriptions", empty: "No queues." },
  );
}

function topicTable(ui, topics) {
  const rows = topics.flatMap((t) =>
    t.subscriptions.length ? t.subscriptions.map((s) => ({ topic: t.name, s })) : [{ topic: t.name, s: null }],
  );
  return ui.table(
    [
      { label: "Topic", render: (r) => r.topic },
      { label: "Subscription", render: (r) => (r.s ? ui.link(`#/entity/${seg(r.s.queue)}`, r.s.name) : "none") },
      { label: "Delivery", render: (r) => (r.s ? (r.s.push ? `push to ${r.s.push.endpoint}` : "pull") : "—") },
      { label: "Endpoint health", render: (r) => (r.s && r.s.push ? r.s.push.health || "—" : "—") },
      { label: "In backoff", class: "num", render: (r) => (r.s && r.s.push ? String(r.s.push.in_backoff ?? "—") : "—") },
    ],
    rows,
    { caption: "Topics and subscriptions", empty: "No topics." },
  );
}

/** A form that creates a queue with `POST /v1/queues` (role create-entity), then opens it. */
function createQueueForm(ctx) {
  const { ui, api } = ctx;
  const { h } = ui;
  const name = h("input", { type: "text", name: "name", required: "", autocomplete: "off", maxlength: "260" });
  const maxDeliveries = h("input", { type: "number", name: "max_delivery_count", min: "1", max: "1000", value: "10" });
  const lockSeconds = h("input", { type: "number", name: "lock_seconds", min: "1", max: "300", value: "30" });
  const create = async () => {
    const policy = {
      max_delivery_count: Number(maxDeliveries.value),
      lock_duration_ms: Number(lockSeconds.value) * 1000,
    };
    const q = await api("POST", "/v1/queues", { body: { name: name.value.trim(), policy } });
    ctx.navigate(`#/entity/${seg(q.name)}`);
  };
  const form = h(
    "form",
    { class: "form", "aria-label": "Create a queue" },
    ui.field("Queue name", name),
    ui.field("Max delivery count", maxDeliveries),
    ui.field("Lock duration (seconds)", lockSeconds),
    h("div", { class: "actions" }, ui.button("Create queue", create, { kind: "primary", type: "submit" })),
  );
  form.addEventListener("submit", (e) => e.preventDefault());
  return ui.section("Create a queue", form);
}

export async function render(root, ctx) {
  const { ui, api } = ctx;
  const { h } = ui;
  const stamp = h("span", { class: "muted" });
  const body = h("div", { class: "overview" });
  root.append(ui.header("Overview", stamp), body, createQueueForm(ctx));
  const draw = async () => {
    const o = await load(api, ctx.signal);
    const parts = [];
    if (o.empty) {
      parts.push(emptyState(ui));
    } else {
      parts.push(ui.section("Needs a look", highlightList(ui, o.highlights || [])));
      const summary = [];
      if (o.cases) {
        summary.push(["Open cases", ui.link("#/cases", String(o.cases.open))]);
        summary.push(["Overdue cases", String(o.cases.overdue)]);
        summary.push(["Escalated cases", String(o.cases.escalated)]);
      }
      if (o.flagged_replays !== null && o.flagged_replays !== undefined) {
        summary.push(["Flagged replay records", ui.link("#/quarantine", String(o.flagged_replays))]);
      }
      if (summary.length) parts.push(ui.section("Recovery", ui.dl(summary)));
      parts.push(entityTable(ui, o.queues || []));
      if ((o.topics || []).length) parts.push(topicTable(ui, o.topics));
    }
    body.replaceChildren(...parts);
    stamp.textContent = o.generated_at ? `as of ${ui.formatTime(o.generated_at)}` : "";
  };
  await draw();
  ctx.onCleanup(ui.poll(draw, 5000));
}
