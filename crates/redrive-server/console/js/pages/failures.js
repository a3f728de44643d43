// Failures by signature: dead letters across every queue the caller may read, grouped by
// the server (`GET /v1/failures`) by failure shape, with counts, first and last seen and
// a 24-hour sparkline; one click filters the dead-letter list, seeds a replay plan's
// selection, or makes a case group of the shape's open cases.

import { seg, withQuery } from "../api.js";

const PAGE = 100;

export async function render(root, ctx) {
  const { ui, api, query } = ctx;
  const { h } = ui;
  const filters = { queue: query.get("queue") || "", area: query.get("area") || "" };
  const queueInput = h("input", { type: "text", value: filters.queue, maxlength: "80" });
  const areaInput = ui.select([["", "live (default)"], ["live", "live"], ["archived", "archived"], ["quarantine", "quarantine"]], filters.area);
  const form = h(
    "form",
    { class: "filters", "aria-label": "Filters" },
    ui.field("Queue", queueInput),
    ui.field("Area", areaInput),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "btn btn-primary" }, "Apply filters")),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    ctx.navigate(withQuery("#/failures", { queue: queueInput.value.trim(), area: areaInput.value }));
  });
  const chart = h("div", { class: "chart-slot" });
  const listing = h("div");
  const pager = h("div", { class: "actions" });
  root.append(
    ui.header("Failures by signature"),
    h("p", { class: "muted" }, "Dead letters grouped by reason, route, last outcome class, message type, source and their description with ids, numbers and times masked."),
    ui.section("Filters", form),
    chart,
    listing,
    pager,
  );
  const cursors = [null];
  let page = 0;
  const load = async () => {
    let r;
    try {
      r = await api("GET", "/v1/failures", { query: { ...filters, limit: PAGE, cursor: cursors[page] }, signal: ctx.signal });
    } catch (e) {
      if (e.status === 404 && e.code !== "queue_not_found") {
        listing.replaceChildren(ui.problem(e), h("p", {}, "This server does not group failures by signature."));
        return;
      }
      throw e;
    }
    const sigs = r.signatures || [];
    const byReason = new Map();
    for (const s of sigs) byReason.set(s.reason, (byReason.get(s.reason) || 0) + s.live);
    chart.replaceChildren(
      sigs.length
        ? ui.section("Live dead letters by reason (this page)", ui.barChart([...byReason].map(([label, value]) => ({ label, value })), { label: "Live dead letters by reason" }))
        : h("span"),
    );
    listing.replaceChildren(
      ui.table(
        [
          { label: "Description", class: "wrap", render: (s) => s.description || "—" },
          { label: "Queue", render: (s) => ui.link(`#/entity/${seg(s.queue)}`, s.queue) },
          { label: "Reason", render: (s) => s.reason },
          { label: "Route", render: (s) => s.route_kind },
          { label: "Outcome", render: (s) => s.outcome_class },
          { label: "Type", render: (s) => s.message_type },
          { label: "Source", render: (s) => s.source },
          { label: "Count", class: "num", render: (s) => String(s.count) },
          { label: "Live", class: "num", render: (s) => String(s.live) },
          { label: "First seen", render: (s) => ui.formatTime(s.first_seen) },
          { label: "Last seen", render: (s) => ui.formatTime(s.last_seen) },
          { label: "Last 24 h", render: (s) => ui.sparkline(s.sparkline || [], { label: `Dead letters per hour of ${s.reason} on ${s.queue}` }) },
          {
            label: "Actions",
            render: (s) =>
              h(
                "div",
                { class: "actions" },
                ui.link(withQuery(`#/dead-letters/${seg(s.queue)}`, { signature: s.id, area: filters.area }), "Show dead letters"),
                ui.link(withQuery("#/plans", { queue: s.queue, signature: s.id }), "Plan a replay"),
                ui.button("Work as a case group", async () => {
                  // The open cases of this shape, worked as one (POST /v1/case-groups):
                  // a group selects by reason and masked description within its queue.
                  const body = { queue: s.queue, reason: s.reason };
                  if (s.description) body.signature = s.description;
                  if (s.message_type) body.message_type = s.message_type;
                  const g = await api("POST", "/v1/case-groups", { body });
                  ctx.navigate(`#/case-group/${seg(g.id)}`);
                }),
              ),
          },
        ],
        sigs,
        { caption: "Failure signatures, most recent first", empty: "No dead letters: no failure signatures." },
      ),
    );
    const prev = page > 0 ? ui.button("Previous page", async () => { page -= 1; await load(); }) : null;
    const next = r.next_cursor ? ui.button("Next page", async () => { cursors[page + 1] = r.next_cursor; page += 1; await load(); }) : null;
    pager.replaceChildren(...[prev, next].filter(Boolean));
  };
  await load();
  ctx.onCleanup(ui.poll(() => (page === 0 ? load() : null), 5000));
}
