// One queue or subscription: its policy and its versions (what each changed; who changed
// it from the audit log, for an admin), its counts, live rates from the server's time
// series (sent, completed, dead-lettered, dead letters by reason), its sessions (for a
// session or group-ordered queue), and a form that sends a message.
// Polls every 5 s while the tab is visible.

import { seg, withQuery } from "../api.js";

function policyPairs(ui, p) {
  const backoff = p.redelivery_backoff ? JSON.stringify(p.redelivery_backoff) : null;
  return ui.dl([
    ["Lock duration", ui.formatAge(p.lock_duration_ms)],
    ["Max delivery count", String(p.max_delivery_count)],
    ["Default TTL", p.default_ttl_ms ? ui.formatAge(p.default_ttl_ms) : "none"],
    ["Dead-letter on expiry", p.dead_letter_on_expiry ? "yes" : "no"],
    ["Duplicate detection", p.duplicate_detection_window_ms ? ui.formatAge(p.duplicate_detection_window_ms) : "off"],
    ["Requires sessions", p.requires_session ? "yes" : "no"],
    ["Group ordering", p.group_ordering ? "yes" : "no"],
    ["Redelivery backoff", backoff],
    ["Max message size", ui.formatBytes(p.max_message_size)],
    ["Dead-letter queue", p.dead_letter_queue || "its own dead-letter store"],
    ["Automatic replay", p.auto_replay ? (p.auto_replay.enabled ? `on (${p.auto_replay.max_replay_attempts} attempts)` : "off") : null],
    ["Dead-letter retention", p.dead_letter_retention_ms ? ui.formatAge(p.dead_letter_retention_ms) : "forever"],
  ]);
}

/** What changed between two versions of a policy: `key: old → new` for each top-level key. */
function changes(before, after) {
  if (!before) return "created";
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  const out = [];
  for (const k of keys) {
    const a = JSON.stringify(before[k] ?? null);
    const b = JSON.stringify(after[k] ?? null);
    if (a !== b) out.push(`${k}: ${a} → ${b}`);
  }
  return out.length ? out.join("; ") : "no field changed";
}

/**
 * The policy's versions (`GET /v1/queues/{name}/policy/versions`, newest first), each
 * with what it changed from the one before; who changed it is in the audit log (admin),
 * shown below when the token may read it.
 */
async function history(ctx, name) {
  const { ui, api } = ctx;
  const { h } = ui;
  const r = await api("GET", `/v1/queues/${seg(name)}/policy/versions`, { query: { limit: 20 }, signal: ctx.signal });
  const versions = r.versions || [];
  const rows = versions.map((v, i) => ({ ...v, change: changes(versions[i + 1] ? versions[i + 1].policy : null, v.policy) }));
  // The oldest version listed may not be the first: its change is unknown here.
  if (r.next && rows.length) rows[rows.length - 1].change = "(earlier versions not shown)";
  const parts = [
    ui.table(
      [
        { label: "Version", class: "num", render: (v) => String(v.version) },
        { label: "Changed", render: (v) => ui.formatTime(v.changed_at) },
        { label: "What changed", class: "wrap", render: (v) => v.change },
      ],
      rows,
      { caption: "Policy versions, newest first", empty: "No versions recorded." },
    ),
  ];
  try {
    const a = await api("GET", "/v1/audit", { query: { entity: name, limit: 100 }, signal: ctx.signal });
    const who = (a.entries || []).filter((e) => /^(queue|subscription|topic)\.(create|update)/.test(e.action));
    parts.push(
      ui.table(
        [
          { label: "When", render: (e) => ui.formatTime(e.at) },
          { label: "Change", render: (e) => e.action },
          { label: "By", render: (e) => e.actor_name },
          { label: "Outcome", render: (e) => e.outcome },
        ],
        who,
        { caption: "Who changed it (audit log)", empty: "No policy change in the latest audit entries of this entity." },
      ),
    );
  } catch (e) {
    if (e.status !== 403) throw e;
    parts.push(h("p", { class: "muted" }, "Who changed the policy is in the audit log, which needs the admin role."));
  }
  return h("div", {}, ...parts);
}

/**
 * The queue's sessions (`GET /v1/queues/{name}/sessions`, by session id, 50 a page):
 * messages waiting, in flight, deferred and scheduled, and whether a consumer holds the
 * session's lock and until when. Never a lock token.
 */
function sessionsView(ctx, name) {
  const { ui, api } = ctx;
  const { h } = ui;
  const box = h("div");
  const after = [null];
  let page = 0;
  const load = async () => {
    const r = await api("GET", `/v1/queues/${seg(name)}/sessions`, { query: { limit: 50, after: after[page] }, signal: ctx.signal });
    const prev = page > 0 ? ui.button("Previous sessions", async () => { page -= 1; await load(); }) : null;
    const next = r.next ? ui.button("Next sessions", async () => { after[page + 1] = r.next; page += 1; await load(); }) : null;
    box.replaceChildren(
      ui.table(
        [
          { label: "Session", class: "wrap", render: (x) => x.session_id },
          { label: "Waiting", class: "num", render: (x) => String(x.active ?? 0) },
          { label: "In flight", class: "num", render: (x) => String(x.in_flight ?? 0) },
          { label: "Deferred", class: "num", render: (x) => String(x.deferred ?? 0) },
          { label: "Scheduled", class: "num", render: (x) => String(x.scheduled ?? 0) },
          { label: "Lock", render: (x) => (x.locked ? `held until ${ui.formatTime(x.locked_until)}` : "free") },
        ],
        r.sessions || [],
        { caption: `Sessions of ${name}`, empty: "No session has messages or a live lock." },
      ),
      h("div", { class: "actions" }, ...[prev, next].filter(Boolean)),
    );
  };
  return { box, load, first: () => page === 0 };
}

function rates(ui, series) {
  const { h } = ui;
  const pts = (series && series.points) || [];
  if (!pts.length) return h("p", { class: "muted" }, "No traffic in the recent window.");
  const sec = Math.round((series.interval_ms || 10000) / 1000);
  const xLabels = [ui.formatTime(pts[0].at), ui.formatTime(pts[pts.length - 1].at)];
  const sum = (k) => pts.reduce((a, p) => a + (p[k] || 0), 0);
  const reasons = new Set();
  pts.forEach((p) => Object.keys(p.dead_lettered_by_reason || {}).forEach((r) => reasons.add(r)));
  const windowS = (pts.length * (series.interval_ms || 10000)) / 1000;
  return h(
    "div",
    {},
    ui.dl(
      ["sent", "received", "completed", "abandoned", "dead_lettered"].map((k) => [
        k.replace("_", "-"),
        h(
          "span",
          {},
          `${sum(k)} in the last ${ui.formatAge(windowS * 1000)} (${(sum(k) / windowS).toFixed(2)}/s) `,
          ui.sparkline(pts.map((p) => p[k] || 0), { label: `${k} per ${sec} s` }),
        ),
      ]),
    ),
    h(
      "div",
      { class: "grid" },
      ui.barChart(
        [
          { label: "sent", values: pts.map((p) => p.sent || 0) },
          { label: "completed", values: pts.map((p) => p.completed || 0) },
        ],
        { label: `Sent and completed per ${sec} s`, xLabels },
      ),
      reasons.size
        ? ui.barChart(
            [...reasons].map((r) => ({ label: r, values: pts.map((p) => (p.dead_lettered_by_reason || {})[r] || 0) })),
            { label: `Dead-letter arrivals by reason per ${sec} s`, xLabels },
          )
        : h("p", { class: "muted" }, "No dead letters in the recent window."),
    ),
  );
}

/** A form that sends one message with `POST /v1/queues/{name}/messages` (role producer). */
function sendForm(ctx, name) {
  const { ui, api } = ctx;
  const { h } = ui;
  const body = h("textarea", { name: "body", rows: "4", maxlength: "262144" });
  const contentType = h("input", { type: "text", name: "content_type", value: "application/json", autocomplete: "off" });
  const messageId = h("input", { type: "text", name: "message_id", autocomplete: "off", maxlength: "128" });
  const send = async () => {
    const req = { body: body.value, content_type: contentType.value.trim() || undefined };
    if (messageId.value.trim()) req.message_id = messageId.value.trim();
    const r = await api("POST", `/v1/queues/${seg(name)}/messages`, { body: req });
    ui.notice(r.duplicate ? `Message ${r.message_id} was a duplicate: dropped.` : `Sent message ${r.message_id} to ${name}.`);
    body.value = "";
    messageId.value = "";
  };
  const form = h(
    "form",
    { class: "form", "aria-label": `Send a message to ${name}` },
    ui.field("Message body", body),
    ui.field("Content type", contentType),
    ui.field("Message id (optional; repeats are dropped within the duplicate window)", messageId),
    h("div", { class: "actions" }, ui.button("Send message", send, { kind: "primary", type: "submit" })),
  );
  form.addEventListener("submit", (e) => e.preventDefault());
  return form;
}

export async function render(root, ctx) {
  const { ui, api, params } = ctx;
  const { h } = ui;
  const name = params.name;
  if (!name) {
    root.append(ui.header("Entity"), h("p", {}, "Choose a queue or subscription on the "), ui.link("#/overview", "overview"));
    return;
  }
  const counts = h("div");
  const policy = h("div");
  const live = h("div");
  root.append(
    ui.header(name, ui.link(`#/dead-letters/${seg(name)}`, "Dead letters"), ui.link(withQuery("#/failures", { queue: name }), "Failures")),
    h("div", { class: "grid" }, ui.section("Counts", counts), ui.section("Policy", policy)),
    ui.section("Live rates", live),
  );
  const q0 = await api("GET", `/v1/queues/${seg(name)}`, { signal: ctx.signal });
  policy.replaceChildren(
    h("p", {}, `Version ${q0.policy_version}, created ${ui.formatTime(q0.created_at)}, last changed ${ui.formatTime(q0.updated_at)}.`),
    policyPairs(ui, q0.policy),
  );
  const sessionText = q0.policy.requires_session
    ? "Messages are received by session: a consumer accepts a session and holds its lock (POST …/sessions/accept)."
    : q0.policy.group_ordering
      ? "Group ordering: messages of one group (session id) are delivered in order, one in flight, without session locks."
      : "This queue does not use sessions.";
  const sessions = q0.policy.requires_session || q0.policy.group_ordering ? sessionsView(ctx, name) : null;
  root.append(
    ui.section("Send a message", sendForm(ctx, name)),
    ui.section("Sessions", h("p", {}, sessionText), sessions ? sessions.box : null),
    ui.section("Policy versions", await history(ctx, name)),
  );
  const draw = async () => {
    const q = await api("GET", `/v1/queues/${seg(name)}`, { signal: ctx.signal });
    const c = q.counts;
    counts.replaceChildren(
      ui.dl([
        ["Active", String(c.active)],
        ["Locked", String(c.locked)],
        ["Scheduled", String(c.scheduled)],
        ["Deferred", String(c.deferred)],
        ["Dead-lettered (live)", String(c.dead_lettered)],
        ["Oldest message", ui.formatAge(c.oldest_message_age_ms)],
      ]),
    );
    let series = null;
    try {
      series = await api("GET", `/v1/queues/${seg(name)}/series`, { signal: ctx.signal });
    } catch (e) {
      if (e.status !== 404 || e.code === "queue_not_found") throw e;
    }
    live.replaceChildren(series ? rates(ui, series) : h("p", { class: "muted" }, "This server keeps no time series."));
    if (sessions && sessions.first()) await sessions.load();
  };
  await draw();
  ctx.onCleanup(ui.poll(draw, 5000));
}
