// Quarantine and automatic replay: the replay status of every entity with dead letters
// (`GET /v1/replay`), whether automatic replay is on, and each entity's quarantined
// records with their cause, restorable after a preview of what the next judgement does.

import { seg, withQuery } from "../api.js";

/** Entities whose quarantined records are listed, and records per entity. */
const MAX_ENTITIES = 20;
const PER_ENTITY = 20;

function causes(q) {
  const list = Object.entries(q || {});
  return list.length ? list.map(([c, n]) => `${c}: ${n}`).join(", ") : "none";
}

function preview(ui, p) {
  const requarantine = Object.entries(p.requarantine || {});
  return ui.dl([
    ["Automatic replay on the queue", p.replay_enabled ? "on" : "off"],
    ["Events the next judgement republishes", String(p.republish ?? 0)],
    ["Events quarantined again", requarantine.length ? requarantine.map(([c, n]) => `${c}: ${n}`).join(", ") : "none"],
  ]);
}

export async function render(root, ctx) {
  const { ui, api } = ctx;
  const { h } = ui;
  const statusSlot = h("div");
  const records = h("div");
  root.append(
    ui.header("Quarantine and automatic replay"),
    h("p", { class: "muted" }, "Automatic replay quarantines the events it will not republish, by cause; a restore moves a record back to live after showing what the next judgement will do with it."),
    statusSlot,
    records,
  );

  const loadStatus = async () => {
    const [{ entities }, { queues }] = await Promise.all([
      api("GET", "/v1/replay", { signal: ctx.signal }),
      api("GET", "/v1/queues", { signal: ctx.signal }),
    ]);
    const policy = new Map(queues.map((q) => [q.name, q.policy]));
    statusSlot.replaceChildren(
      ui.table(
        [
          { label: "Entity", render: (e) => ui.link(`#/entity/${seg(e.queue)}`, e.queue) },
          { label: "Automatic replay", render: (e) => { const p = policy.get(e.queue); return p && p.auto_replay ? (p.auto_replay.enabled ? ui.badge("on", "ok") : "off") : "—"; } },
          { label: "Live", class: "num", render: (e) => String(e.live) },
          { label: "Candidates", class: "num", render: (e) => String(e.candidates) },
          { label: "Failing", class: "num", render: (e) => String(e.failing) },
          { label: "Flagged", class: "num", render: (e) => (e.flagged ? ui.badge(e.flagged, "bad") : "0") },
          { label: "Undecodable", class: "num", render: (e) => String(e.undecodable) },
          { label: "Archived", class: "num", render: (e) => String(e.archived) },
          { label: "Quarantined by cause", class: "wrap", render: (e) => causes(e.quarantined) },
        ],
        entities,
        { caption: "Replay status per entity", empty: "No entity has dead letters." },
      ),
    );
    return entities;
  };

  const loadRecords = async (entities) => {
    const withQuarantine = entities.filter((e) => Object.values(e.quarantined || {}).some((n) => n > 0)).slice(0, MAX_ENTITIES);
    if (!withQuarantine.length) {
      records.replaceChildren(ui.section("Quarantined records", h("p", { class: "empty" }, "Nothing is in quarantine.")));
      return;
    }
    const pages = await Promise.all(
      withQuarantine.map((e) =>
        api("GET", `/v1/queues/${seg(e.queue)}/dead-letters`, { query: { area: "quarantine", limit: PER_ENTITY, payload: "false" }, signal: ctx.signal }).then((r) => ({ e, r })),
      ),
    );
    records.replaceChildren(
      ...pages.map(({ e, r }) =>
        ui.section(
          `Quarantined in ${e.queue}`,
          ui.table(
            [
              { label: "Record", render: (d) => h("code", {}, d.id) },
              { label: "Cause", render: (d) => (d.judgement && d.judgement.cause) || "manual" },
              { label: "Reason", render: (d) => d.reason },
              { label: "Type", render: (d) => d.type },
              { label: "Events", class: "num", render: (d) => (d.judgement ? String(d.judgement.events.length) : "1") },
              { label: "Dead-lettered", render: (d) => ui.formatTime(d.dead_lettered_at) },
              {
                label: "Actions",
                render: (d) =>
                  h(
                    "div",
                    { class: "actions" },
                    ui.button("Restore", async () => {
                      const base = `/v1/queues/${seg(e.queue)}/dead-letters/${seg(d.id)}/restore`;
                      const p = await api("POST", base, { body: { dry_run: true } });
                      if (!(await ui.confirm(`Restore ${d.id} from quarantine to live?`, { confirmLabel: "Restore", body: preview(ui, p) }))) return;
                      await api("POST", base, { body: {} });
                      ui.notice(`Restored ${d.id} to live.`);
                      await refresh();
                    }, { attrs: { "aria-label": `Restore ${d.id}` } }),
                    ui.link(withQuery(`#/dead-letters/${seg(e.queue)}`, { area: "quarantine" }), "Evidence"),
                  ),
              },
            ],
            r.dead_letters || [],
            { caption: `Quarantined records of ${e.queue}${r.next_cursor ? ` (first ${PER_ENTITY})` : ""}`, empty: "None." },
          ),
        ),
      ),
    );
  };

  const refresh = async () => {
    const entities = await loadStatus();
    await loadRecords(entities);
  };
  await refresh();
  ctx.onCleanup(ui.poll(loadStatus, 5000));
}
