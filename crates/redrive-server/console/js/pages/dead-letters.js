// Dead letters of one queue: server-side filters (kept in the address, so a link from
// the failures page opens the filtered list), keyset paging, the evidence of a record,
// its payload only on an explicit "Reveal payload" (the audited single-record read, which
// needs payload-reader), move between areas, restore from quarantine with its preview,
// resubmit, and an export of the filtered listing as JSON Lines.

import { seg, withQuery } from "../api.js";

const PAGE = 50;
/** Most records one export downloads (the CLI's `dlq export` has no bound). */
const EXPORT_MAX = 10000;
const FILTERS = ["area", "reason", "type", "source", "quality", "text", "signature", "from", "to"];

function decodeBody(rec) {
  if (rec.body === undefined || rec.body === null) return null;
  if (rec.body_encoding === "base64") {
    try {
      const bin = atob(rec.body);
      const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
      return { text: new TextDecoder("utf-8", { fatal: true }).decode(bytes), note: "base64 body, shown as UTF-8 text" };
    } catch {
      return { text: rec.body, note: "base64 body (not UTF-8 text)" };
    }
  }
  let text = rec.body;
  try {
    text = JSON.stringify(JSON.parse(rec.body), null, 2);
  } catch {
    // Not JSON: shown as it is.
  }
  return { text, note: null };
}

/** The last outcome of a record: push diagnostics, or the application's description. */
function lastOutcome(rec) {
  const d = rec.diagnostics;
  if (d) {
    const parts = [d.lastDeliveryOutcome, d.lastHttpStatusCode ? `HTTP ${d.lastHttpStatusCode}` : null, d.lastDeliveryError].filter(Boolean);
    if (parts.length) return parts.join(" · ");
  }
  if (rec.judgement && rec.judgement.cause) return `automatic replay quarantined it: ${rec.judgement.cause}`;
  if (rec.routed_by === "application") {
    return `the consumer dead-lettered it (${rec.reason}) at delivery ${rec.delivery_count}`;
  }
  if (rec.routed_by === "broker") return `the broker dead-lettered it (${rec.reason}${rec.route_rule ? `, rule ${rec.route_rule}` : ""})`;
  return `imported (${rec.reason})`;
}

function evidence(ui, rec) {
  const { h } = ui;
  const attempts = `${rec.delivery_count} (${rec.delivery_count_quality})`;
  const routed = [rec.routed_by, rec.route ? `route ${rec.route}` : null, rec.route_rule ? `rule ${rec.route_rule}` : null]
    .filter(Boolean)
    .join(", ");
  const appRule = rec.consumer ? `${rec.consumer}${rec.rule_version ? ` rule ${rec.rule_version}` : ""}` : null;
  const ordering = rec.session_id ? `session ${rec.session_id}` : "none (no session or group)";
  const pairs = [
    ["Record", h("code", {}, rec.id)],
    ["Area", rec.area],
    ["Message id", h("code", {}, rec.message_id)],
    ["Sequence number", String(rec.sequence_number)],
    ["Bytes digest (SHA-256)", h("code", { class: "mono" }, rec.body_sha256)],
    ["Size", ui.formatBytes(rec.body_size)],
    ["Reason", rec.reason],
    ["Description", rec.description],
    ["Attempts", attempts],
    ["First attempt", ui.formatTime(rec.first_delivered_at)],
    ["Last attempt", ui.formatTime(rec.last_delivered_at)],
    ["Last outcome", lastOutcome(rec)],
    ["Policy version", rec.policy_version === undefined ? null : String(rec.policy_version)],
    ["Routed by", routed],
    ["Consumer rule", appRule],
    ["Ordering scope", ordering],
    ["Type", rec.type],
    ["Content type", rec.content_type],
    ["Enqueued", ui.formatTime(rec.enqueued_time)],
    ["Dead-lettered", ui.formatTime(rec.dead_lettered_at)],
    ["Forwarded to", rec.forwarded_to_queue ? `${rec.forwarded_to_queue} #${rec.forwarded_sequence_number}` : null],
    ["Automatic replay", rec.replay ? `${rec.replay.candidate ? `candidate, due ${ui.formatTime(rec.replay.due_at)}` : "not a candidate"}; ${rec.replay.failures} failed judgements${rec.replay.last_error ? ` (${rec.replay.last_error})` : ""}` : null],
    ["Judgement", rec.judgement ? `${rec.judgement.cause || "republished"} at ${ui.formatTime(rec.judgement.judged_at)}` : null],
  ];
  if (rec.diagnostics) pairs.push(["Push diagnostics", h("pre", {}, JSON.stringify(rec.diagnostics, null, 2))]);
  if (rec.properties && Object.keys(rec.properties).length) pairs.push(["Properties", h("pre", {}, JSON.stringify(rec.properties, null, 2))]);
  return ui.dl(pairs);
}

function restorePreview(ui, p) {
  const { h } = ui;
  const requarantine = Object.entries(p.requarantine || {});
  return h(
    "div",
    { class: "preview" },
    ui.dl([
      ["Automatic replay on the queue", p.replay_enabled ? "on" : "off"],
      ["Events the next judgement republishes", String(p.republish ?? 0)],
      ["Events quarantined again", requarantine.length ? requarantine.map(([c, n]) => `${c}: ${n}`).join(", ") : "none"],
    ]),
    p.replay_enabled ? null : h("p", { class: "muted" }, "Automatic replay is off for this queue: the record goes back to live and stays there until someone replays it."),
  );
}

async function queuePicker(root, ctx) {
  const { ui, api } = ctx;
  root.append(ui.header("Dead letters"));
  const { queues } = await api("GET", "/v1/queues", { signal: ctx.signal });
  root.append(
    ui.table(
      [
        { label: "Queue", render: (q) => ui.link(`#/dead-letters/${seg(q.name)}`, q.name) },
        { label: "Dead-lettered (live)", class: "num", render: (q) => String(q.counts.dead_lettered) },
      ],
      queues,
      { caption: "Choose a queue", empty: "No queues." },
    ),
  );
}

export async function render(root, ctx) {
  const { ui, api, params, query } = ctx;
  const { h } = ui;
  const queue = params.queue;
  if (!queue) return queuePicker(root, ctx);
  const base = `/v1/queues/${seg(queue)}/dead-letters`;
  const filters = {};
  for (const k of FILTERS) filters[k] = query.get(k) || "";

  // Filters form: applying it changes the address, which renders the page again.
  const inputs = {
    area: ui.select([["", "live (default)"], ["live", "live"], ["archived", "archived"], ["quarantine", "quarantine"]], filters.area),
    reason: h("input", { type: "text", value: filters.reason, maxlength: "200" }),
    type: h("input", { type: "text", value: filters.type, maxlength: "200" }),
    source: h("input", { type: "text", value: filters.source, maxlength: "200" }),
    quality: ui.select([["", "any"], ["exact", "exact"], ["approximate", "approximate"], ["incomplete", "incomplete"], ["unavailable", "unavailable"]], filters.quality),
    text: h("input", { type: "search", value: filters.text, maxlength: "200" }),
    signature: h("input", { type: "text", value: filters.signature, maxlength: "128" }),
    from: h("input", { type: "datetime-local", value: ctx.ui.toLocalInput(filters.from) }),
    to: h("input", { type: "datetime-local", value: ctx.ui.toLocalInput(filters.to) }),
  };
  const labels = {
    area: "Area",
    reason: "Reason",
    type: "Message type",
    source: "Source",
    quality: "Evidence quality",
    text: "Text in description",
    signature: "Failure signature",
    from: "Dead-lettered from",
    to: "Dead-lettered before",
  };
  const form = h(
    "form",
    { class: "filters", "aria-label": "Filters" },
    FILTERS.map((k) => ui.field(labels[k], inputs[k])),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "btn btn-primary" }, "Apply filters"),
      h("button", { type: "button", class: "btn", "on:click": () => ctx.navigate(`#/dead-letters/${seg(queue)}`) }, "Clear"),
    ),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = {};
    for (const k of FILTERS) {
      const v = k === "from" || k === "to" ? ctx.ui.fromLocalInput(inputs[k].value) : inputs[k].value.trim();
      if (v) q[k] = v;
    }
    ctx.navigate(withQuery(`#/dead-letters/${seg(queue)}`, q));
  });

  const listing = h("div", { class: "listing" });
  const detail = h("div", { class: "detail", id: "dead-letter-detail" });
  const pager = h("div", { class: "actions pager" });
  const status = h("p", { class: "muted", role: "status" });
  root.append(
    ui.header(`Dead letters of ${queue}`, ui.link(`#/entity/${seg(queue)}`, "Queue details"), ui.button("Export JSON Lines", () => exportAll())),
    ui.section("Filters", form),
    status,
    listing,
    pager,
    detail,
  );

  const apiQuery = (cursor, limit) => {
    const q = { limit, cursor };
    for (const k of FILTERS) if (filters[k]) q[k] = filters[k];
    return q;
  };

  // Keyset paging: the cursors of the pages seen, so "Previous page" goes back.
  const cursors = [null];
  let page = 0;
  let next = null;
  let rows = [];

  const showRecord = (rec) => {
    const payload = h("div", { class: "payload-slot" });
    const area = ui.select([["live", "live"], ["archived", "archived"], ["quarantine", "quarantine"]], rec.area === "live" ? "archived" : "live");
    const actions = [
      ui.button("Reveal payload", async () => {
        const full = await api("GET", `${base}/${seg(rec.id)}`, { signal: ctx.signal });
        const body = decodeBody(full);
        if (!body) {
          payload.replaceChildren(h("p", { class: "problem" }, `The server returned no payload: revealing it needs the payload-reader role on ${queue}.`));
          return;
        }
        payload.replaceChildren(
          h("p", { class: "muted" }, `Payload of ${rec.id}${body.note ? ` (${body.note})` : ""}; this read is recorded in the audit log as dead_letter.read.`),
          h("pre", { class: "payload", tabindex: "0", "aria-label": "Payload" }, body.text),
        );
      }),
      ui.field("Move to area", area),
      ui.button("Move", async () => {
        const to = area.value;
        if (!(await ui.confirm(`Move ${rec.id} from ${rec.area} to ${to}?`, { confirmLabel: "Move" }))) return;
        await api("POST", `${base}/${seg(rec.id)}/move`, { body: { area: to } });
        ui.notice(`Moved ${rec.id} to ${to}.`);
        await load();
      }),
    ];
    if (rec.area === "quarantine") {
      actions.push(
        ui.button("Restore", async () => {
          const preview = await api("POST", `${base}/${seg(rec.id)}/restore`, { body: { dry_run: true } });
          const ok = await ui.confirm(`Restore ${rec.id} from quarantine to live?`, { confirmLabel: "Restore", body: restorePreview(ui, preview) });
          if (!ok) return;
          await api("POST", `${base}/${seg(rec.id)}/restore`, { body: {} });
          ui.notice(`Restored ${rec.id} to live.`);
          await load();
        }, { kind: "primary" }),
      );
    }
    actions.push(
      ui.button("Resubmit", async () => {
        if (!(await ui.confirm(`Send ${rec.id} to ${queue} again as a new message?`, { confirmLabel: "Resubmit", kind: "danger" }))) return;
        const r = await api("POST", `${base}/${seg(rec.id)}/resubmit`);
        ui.notice(`Resubmitted as message ${r.message_id} (sequence ${r.sequence_number}).`);
        await load();
      }),
    );
    detail.replaceChildren(
      ui.section(`Evidence of ${rec.id}`, evidence(ui, rec), h("div", { class: "actions evidence" }, actions), payload),
    );
    detail.scrollIntoView({ block: "nearest" });
  };

  const draw = (undecodable) => {
    listing.replaceChildren(
      ui.table(
        [
          { label: "Record", render: (r) => h("button", { type: "button", class: "btn btn-quiet mono", "aria-label": `Inspect ${r.id}`, "on:click": () => showRecord(r) }, r.id) },
          { label: "Dead-lettered", render: (r) => ui.formatTime(r.dead_lettered_at) },
          { label: "Reason", render: (r) => r.reason },
          { label: "Type", render: (r) => r.type },
          { label: "Description", class: "wrap", render: (r) => r.description },
          { label: "Attempts", render: (r) => `${r.delivery_count} (${r.delivery_count_quality})` },
          { label: "Area", render: (r) => r.area },
          { label: "Size", class: "num", render: (r) => ui.formatBytes(r.body_size) },
        ],
        rows,
        { caption: `Dead letters of ${queue}, page ${page + 1}`, empty: "No dead letters match these filters." },
      ),
      undecodable && undecodable.length ? h("p", { class: "problem" }, `${undecodable.length} record(s) on this page cannot be read by this server: ${undecodable.map((u) => `${u.id} (${u.reason})`).join(", ")}.`) : null,
    );
    const prev = page > 0 ? ui.button("Previous page", async () => { page -= 1; await load(); }) : null;
    const nextB = next ? ui.button("Next page", async () => { cursors[page + 1] = next; page += 1; await load(); }) : null;
    pager.replaceChildren(...[prev, nextB].filter(Boolean));
  };

  const load = async () => {
    const r = await api("GET", base, { query: { ...apiQuery(cursors[page], PAGE), payload: "false" }, signal: ctx.signal });
    rows = r.dead_letters || [];
    next = r.next_cursor || null;
    status.textContent = `${rows.length} record(s) on page ${page + 1}${next ? "; more on the next page" : ""}.`;
    draw(r.undecodable);
  };

  const exportAll = async () => {
    const lines = [];
    let cursor = null;
    let withoutBody = 0;
    for (;;) {
      const r = await api("GET", base, { query: apiQuery(cursor, 100), signal: ctx.signal });
      for (const rec of r.dead_letters || []) {
        if (rec.body === undefined) withoutBody += 1;
        lines.push(JSON.stringify(rec));
      }
      status.textContent = `Exporting: ${lines.length} record(s)…`;
      const got = (r.dead_letters || []).length + (r.undecodable || []).length;
      if (!r.next_cursor || got === 0 || lines.length >= EXPORT_MAX) break;
      cursor = r.next_cursor;
    }
    const blob = new Blob(lines.map((l) => `${l}\n`), { type: "application/x-ndjson" });
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: `${queue}-dead-letters.jsonl` }, "download");
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    const capped = lines.length >= EXPORT_MAX ? ` (the first ${EXPORT_MAX}; use redrive dlq export for more)` : "";
    const bodies = withoutBody ? ` ${withoutBody} without bodies (payload-reader is needed for an export that imports again).` : "";
    ui.notice(`Exported ${lines.length} record(s)${capped}.${bodies}`);
    status.textContent = "";
  };

  await load();
}
