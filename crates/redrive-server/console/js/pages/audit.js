// The audit log (GET /v1/audit, admin): filters by actor, entity, action and time as
// the API takes them, keyset paging (oldest first; "Next page" follows next_cursor), and
// "Verify chain" (POST /v1/audit/verify) with its answer. Filters live in the hash
// query, so a filtered view can be linked to.

const PAGE_SIZE = 100;

export async function render(root, ctx) {
  const { h, table, problem, field, formatTime, link } = ctx.ui;
  const query = ctx.query;
  root.append(ctx.ui.header("Audit log"));
  root.append(
    h("p", {},
      "Every payload read, change and refusal, in one hash chain for all nodes, oldest first."),
  );

  // ---- verify --------------------------------------------------------------------
  const verifyOut = h("div", { "aria-live": "polite" });
  const verify = h("button", { type: "button", class: "btn btn-primary" }, "Verify chain");
  verify.addEventListener("click", async () => {
    verify.disabled = true;
    verifyOut.replaceChildren(h("p", { role: "status" }, "Verifying…"));
    try {
      const v = await ctx.api("POST", "/v1/audit/verify");
      const dl = h("dl", { class: "pairs" });
      const add = (k, val) => {
        if (val !== undefined && val !== null) dl.append(h("dt", {}, k), h("dd", {}, String(val)));
      };
      add("Entries checked", v.entries);
      add("First entry", v.first_seq);
      add("Last entry", v.last_seq);
      add("Head entry", v.head_seq);
      add("Head hash", v.head_hash);
      add("Broken at entry", v.broken_at);
      add("What is wrong", v.detail);
      verifyOut.replaceChildren(
        h("p", { role: v.ok ? "status" : "alert", class: v.ok ? "rc-ok-text" : "rc-bad-text" },
          v.ok ? "The chain holds: every entry from the first kept one to the head is present, unedited and in order."
            : "The chain is broken."),
        dl,
        h("p", { class: "muted" }, "Keep the head (number and hash) outside the server: a later head with a lower number, or one no longer in the chain, shows a rewrite."),
      );
    } catch (err) {
      verifyOut.replaceChildren(problem(err));
    } finally {
      verify.disabled = false;
    }
  });
  root.append(h("section", { class: "panel", "aria-labelledby": "rc-verify-h" }, h("h2", { id: "rc-verify-h" }, "Chain"), verify, verifyOut));

  // ---- filters -------------------------------------------------------------------
  const inputs = {};
  const form = h("form", { class: "filters", "aria-label": "Audit filters" });
  for (const [name, label] of [
    ["actor", "Actor (token id, e.g. tok_…, system, anonymous)"],
    ["entity", "Entity (queue or topic)"],
    ["action", "Action (e.g. dead_letter.read, case.claim)"],
  ]) {
    const i = h("input", { type: "text", name, maxlength: "256" });
    i.value = query.get(name) || "";
    inputs[name] = i;
    form.append(field(label, i));
  }
  for (const [name, label] of [["from", "From (local time)"], ["to", "Before (local time)"]]) {
    const i = h("input", { type: "datetime-local", name });
    i.value = ctx.ui.toLocalInput(query.get(name));
    inputs[name] = i;
    form.append(field(label, i));
  }
  form.append(h("div", { class: "actions" },
    h("button", { type: "submit", class: "btn btn-primary" }, "Apply filters"),
    h("button", { type: "reset", class: "btn" }, "Clear filters")));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [name, i] of Object.entries(inputs)) {
      const v = name === "from" || name === "to" ? ctx.ui.fromLocalInput(i.value) : i.value.trim();
      if (v) q.set(name, v);
    }
    ctx.navigate(`#/audit?${q}`);
  });
  form.addEventListener("reset", (ev) => {
    ev.preventDefault();
    ctx.navigate("#/audit");
  });
  root.append(h("section", { class: "panel", "aria-labelledby": "rc-entries-h" }, h("h2", { id: "rc-entries-h" }, "Entries"), form));

  // ---- entries -------------------------------------------------------------------
  const box = h("div", {});
  root.append(box);
  const q = { limit: String(PAGE_SIZE) };
  for (const k of ["actor", "entity", "action", "from", "to", "cursor"]) {
    if (query.get(k)) q[k] = query.get(k);
  }
  try {
    const page = await ctx.api("GET", "/v1/audit", { query: q });
    box.append(
      table(
        [
          { label: "#", render: (e) => String(e.seq) },
          { label: "When", render: (e) => formatTime(e.at) },
          { label: "Actor", render: (e) => `${e.actor_name} (${e.actor_id})` },
          { label: "Action", render: (e) => e.action },
          { label: "Entity", render: (e) => e.entity || "—" },
          { label: "Targets", render: (e) => e.targets.join(", ") || "—" },
          { label: "Outcome", render: (e) => h("span", { class: e.outcome === "ok" ? "" : "rc-bad-text" }, e.outcome) },
          { label: "Client", render: (e) => e.client || "—" },
          { label: "Hash", render: (e) => h("code", { title: e.hash }, e.hash.slice(0, 12)) },
        ],
        page.entries,
        { caption: "Audit entries, oldest first", empty: "No audit entry matches." },
      ),
    );
    const nav = h("nav", { class: "actions", "aria-label": "Audit pages" });
    if (query.get("cursor")) {
      const first = new URLSearchParams(query);
      first.delete("cursor");
      nav.append(link(`#/audit?${first}`, "First page"));
    }
    if (page.next_cursor) {
      const next = new URLSearchParams(query);
      next.set("cursor", page.next_cursor);
      nav.append(link(`#/audit?${next}`, "Next page"));
    }
    box.append(nav);
  } catch (err) {
    box.append(problem(err));
  }
}
