// The one way the console talks to the server: the native HTTP API, with the token the
// operator signed in with as a bearer header (never a cookie), and RFC 9457 problem
// documents turned into ApiProblem errors.

const TOKEN_KEY = "redrive.token";

/** An error answer of the API, built from its problem document (or its status). */
export class ApiProblem extends Error {
  constructor(status, problem) {
    const title = (problem && problem.title) || statusTitle(status);
    super((problem && problem.detail) || title);
    this.name = "ApiProblem";
    this.status = status;
    this.title = title;
    this.detail = (problem && problem.detail) || "";
    this.code = (problem && problem.code) || "";
    this.problem = problem || { status, title };
  }
}

function statusTitle(status) {
  if (status === 0) return "The server cannot be reached";
  if (status === 401) return "Not signed in";
  if (status === 403) return "Forbidden";
  if (status === 404) return "Not found";
  if (status >= 500) return "Server error";
  return `HTTP ${status}`;
}

/** The token of this tab's session, or null. */
export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Keeps `t` for this tab (session storage); null or "" forgets it. */
export function setToken(t) {
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage refused (private mode): the token lives as long as the page.
  }
}

let unauthenticated = () => {};

/** What the shell does on a 401 (shows the sign-in screen). */
export function onUnauthenticated(fn) {
  unauthenticated = fn;
}

/** `path?query`, leaving out null, undefined and "" values. */
export function withQuery(path, query) {
  if (!query) return path;
  const q = new URLSearchParams();
  const entries = query instanceof URLSearchParams ? query.entries() : Object.entries(query);
  for (const [k, v] of entries) {
    if (v === null || v === undefined || v === "") continue;
    q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/**
 * Calls the API: parsed JSON, the text of a non-JSON answer, or null for 204. Throws
 * ApiProblem on an error status. GETs revalidate with the browser's cached entity tag
 * (a 304 is answered from the cache), so polling transfers only what changed.
 */
export async function api(method, path, { body, query, signal } = {}) {
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, signal, cache: "no-cache", credentials: "omit", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(withQuery(path, query), init);
  } catch (e) {
    if (e && e.name === "AbortError") throw e;
    throw new ApiProblem(0, {
      title: "The server cannot be reached",
      detail: String((e && e.message) || e),
    });
  }
  if (resp.status === 204) return null;
  const type = resp.headers.get("Content-Type") || "";
  const text = await resp.text();
  let parsed = text;
  if (type.includes("json") && text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (!resp.ok) {
    const problem =
      parsed && typeof parsed === "object"
        ? parsed
        : { status: resp.status, title: statusTitle(resp.status), detail: String(text).slice(0, 500) };
    const err = new ApiProblem(resp.status, problem);
    if (resp.status === 401) unauthenticated(err);
    throw err;
  }
  return parsed;
}

/** `encodeURIComponent` for a path segment. */
export function seg(s) {
  return encodeURIComponent(String(s));
}
