// One queue or subscription: its policy and the history of its versions (who changed it
// when, from the audit log), its counts, live rates from the server's time series
// (sent, completed, dead-lettered, dead letters by reason), its sessions setting, and a
// form that sends a message.
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

async function history(ctx, name) {
  const { ui, api } = ctx;
  try {
    const r = await api("GET", "/v1/audit", { query: { entity: name, limit: 100 }, signal: ctx.signal });
    const changes = (r.entries || []).filter((e) => /^(queue|subscription|topic)\.(create|update)/.test(e.action));
    return ui.table(
      [
        { label: "When", render: (e) => ui.formatTime(e.at) },
        { label: "Change", render: (e) => e.action },
        { label: "By", render: (e) => e.actor_name },
        { label: "Outcome", render: (e) => e.outcome },
      ],
      changes,
      { caption: "Policy changes (audit log)", empty: "No policy change in the latest audit entries of this entity." },
    );
  } catch (e) {
    if (e.status === 403) {
      return ui.h("p", { class: "muted" }, "Who changed the policy and when is read from the audit log, which needs the admin role.");
    }
    throw e;
  }
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
  const sessions = q0.policy.requires_session
    ? "Messages are received by session: a consumer accepts a session and holds its lock (POST …/sessions/accept). The API does not list open sessions."
    : q0.policy.group_ordering
      ? "Group ordering: messages of one group (session id) are delivered in order, one in flight, without session locks."
      : "This queue does not use sessions.";
  root.append(
    ui.section("Send a message", sendForm(ctx, name)),
    ui.section("Sessions", h("p", {}, sessions)),
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
  };
  await draw();
  ctx.onCleanup(ui.poll(draw, 5000));
}
