// API tokens (admin): create with grants (a role on every entity, one entity, or a name
// prefix ending in *), the secret shown once in a read-only field with a copy button,
// the list (GET /v1/tokens, never a secret), and revoke with a confirmation.

const ROLES = ["producer", "consumer", "operator", "replayer", "payload-reader", "admin"];

export async function render(root, ctx) {
  const { h, table, problem, field, formatTime, confirm } = ctx.ui;
  root.append(ctx.ui.header("API tokens"));
  root.append(
    h("p", {},
      "A token carries grants: a role on every entity, on one queue or topic, or on every name with a prefix (orders.*). ",
      "The server keeps only its hash: the secret is shown once, when it is created."),
  );

  const created = h("div", { "aria-live": "polite" });
  const listBox = h("div", {});

  // ---- create --------------------------------------------------------------------
  const name = h("input", { type: "text", name: "name", maxlength: "64" });
  name.required = true;
  const expires = h("input", { type: "datetime-local", name: "expires_at" });
  const sqs = h("input", { type: "checkbox", name: "sqs" });
  const grantRows = h("div", { class: "rc-grants" });
  let rowCount = 0;

  function grantRow(role = "operator", entity = "") {
    rowCount += 1;
    const n = rowCount;
    const sel = h("select", { name: `role_${n}` });
    for (const r of ROLES) sel.append(h("option", { value: r }, r));
    sel.value = role;
    const ent = h("input", { type: "text", name: `entity_${n}`, maxlength: "256" });
    ent.value = entity;
    const remove = h("button", { type: "button", class: "btn", "aria-label": `Remove grant ${n}` }, "Remove");
    const row = h("fieldset", { class: "rc-grant" }, h("legend", {}, `Grant ${n}`),
      field(`Role of grant ${n}`, sel),
      field(`Entity of grant ${n} (empty: every entity; orders; orders.*)`, ent),
      remove);
    row.grant = () => {
      const e = ent.value.trim();
      return e ? `${sel.value}:${e}` : sel.value;
    };
    remove.addEventListener("click", () => {
      row.remove();
      name.focus();
    });
    grantRows.append(row);
    return sel;
  }
  grantRow();

  const addGrant = h("button", { type: "button", class: "btn" }, "Add grant");
  addGrant.addEventListener("click", () => grantRow().focus());
  const createErr = h("div", {});
  const form = h("form", { class: "rc-token-form", "aria-label": "New token" },
    field("Token name", name),
    field("Expires at (local time; empty: never)", expires),
    field("Also make SQS credentials", sqs),
    h("h3", {}, "Grants"),
    grantRows,
    h("div", { class: "actions" }, addGrant, h("button", { type: "submit", class: "btn btn-primary" }, "Create token")),
    createErr);

  function secretField(label, value) {
    const i = h("input", { type: "text", name: label, class: "rc-secret" });
    i.readOnly = true;
    i.value = value;
    i.addEventListener("focus", () => i.select());
    const copy = h("button", { type: "button", class: "btn", "aria-label": `Copy ${label.toLowerCase()}` }, "Copy");
    const done = h("span", { role: "status", class: "muted" });
    copy.addEventListener("click", async () => {
      i.focus();
      i.select();
      try {
        await navigator.clipboard.writeText(value);
        done.textContent = "Copied.";
      } catch {
        // The clipboard API is refused outside a secure context: the text is selected.
        done.textContent = "Selected: copy it with Ctrl+C.";
      }
    });
    return h("div", { class: "rc-secret-row" }, field(label, i), copy, done);
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    createErr.replaceChildren();
    const grants = [...grantRows.children].map((r) => r.grant());
    const body = { name: name.value.trim(), grants };
    if (ctx.ui.fromLocalInput(expires.value)) body.expires_at = ctx.ui.fromLocalInput(expires.value);
    if (sqs.checked) body.sqs = true;
    try {
      const t = await ctx.api("POST", "/v1/tokens", { body });
      const parts = [
        h("h3", {}, `Token ${t.name} (${t.id}) created`),
        h("p", { role: "alert", class: "rc-warn-text" }, "Copy the secret now: it is shown only once and cannot be read again."),
        secretField("Secret", t.secret),
      ];
      if (t.sqs_access_key_id) parts.push(secretField("SQS access key id", t.sqs_access_key_id));
      if (t.sqs_secret_access_key) parts.push(secretField("SQS secret access key", t.sqs_secret_access_key));
      created.replaceChildren(h("section", { class: "rc-created", "aria-label": "The new token's secret" }, ...parts));
      form.reset();
      grantRows.replaceChildren();
      rowCount = 0;
      grantRow();
      await loadList();
      created.querySelector("input").focus();
    } catch (err) {
      createErr.replaceChildren(problem(err));
    }
  });

  root.append(h("section", { class: "panel", "aria-labelledby": "rc-newtok-h" }, h("h2", { id: "rc-newtok-h" }, "New token"), form, created));
  root.append(h("section", { class: "panel", "aria-labelledby": "rc-toks-h" }, h("h2", { id: "rc-toks-h" }, "Tokens"), listBox));

  // ---- list and revoke -----------------------------------------------------------
  async function revoke(t, errBox) {
    if (!(await confirm(`Revoke token ${t.name} (${t.id})? Every request with it is refused from the next one on, on every node. This cannot be undone.`))) return;
    try {
      await ctx.api("POST", `/v1/tokens/${encodeURIComponent(t.id)}/revoke`);
      await loadList();
      listBox.prepend(h("p", { role: "status" }, `Token ${t.name} revoked.`));
    } catch (err) {
      errBox.replaceChildren(problem(err));
    }
  }

  async function loadList() {
    try {
      const { tokens } = await ctx.api("GET", "/v1/tokens");
      const errBox = h("div", {});
      listBox.replaceChildren(
        errBox,
        table(
          [
            { label: "Name", render: (t) => t.name },
            { label: "Id", render: (t) => h("code", {}, t.id) },
            { label: "Grants", render: (t) => t.grants.join(", ") || "none" },
            { label: "Status", render: (t) => h("span", { class: t.status === "active" ? "" : "rc-bad-text" }, t.status) },
            { label: "Created", render: (t) => `${formatTime(t.created_at)} by ${t.created_by}` },
            { label: "Expires", render: (t) => (t.expires_at ? formatTime(t.expires_at) : "never") },
            { label: "Revoked", render: (t) => (t.revoked_at ? formatTime(t.revoked_at) : "—") },
            { label: "SQS key", render: (t) => t.sqs_access_key_id || "—" },
            {
              label: "Actions",
              render: (t) => {
                if (t.status === "revoked") return "—";
                const b = h("button", { type: "button", class: "btn btn-danger", "aria-label": `Revoke token ${t.name}` }, "Revoke");
                b.addEventListener("click", () => revoke(t, errBox));
                return b;
              },
            },
          ],
          tokens,
          { caption: "Tokens, oldest first", empty: "No tokens." },
        ),
      );
    } catch (err) {
      listBox.replaceChildren(problem(err));
    }
  }
  await loadList();
}
