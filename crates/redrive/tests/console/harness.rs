//! The browser test harness: one `redrive serve` (authentication on, an admin token), one
//! chromedriver and one headless Chromium per test, and the helpers the steps use. Every
//! wait is bounded (it waits on a real browser and a real server, so it polls); a helper
//! that fails saves a screenshot of the page as it was before it panics. Screenshots go
//! to `<target>/console-screenshots/<test>/`.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::{Capabilities, WebDriverCompatibleCommand};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The browser and its driver, as Debian installs them (`chromium`, `chromium-driver`).
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// See [`CHROMIUM`].
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The admin token the server is started with (`REDRIVE_BOOTSTRAP_TOKEN`).
pub const ADMIN: &str = "rdt_c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0";

/// How long a process may take to come up, and a page to show what a step waits for. A
/// bound on waiting for a real browser on a busy machine, not a timing rule.
const BOUND: Duration = Duration::from_secs(30);
/// How often a bounded wait looks again.
const POLL: Duration = Duration::from_millis(100);

/// The wide layout's window, and the narrow one (a phone).
pub const WIDE: (u32, u32) = (1280, 800);
/// See [`WIDE`].
pub const NARROW: (u32, u32) = (390, 844);

/// A child process killed with its process group when dropped (chromedriver takes the
/// browser it started with it).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = self.0.id();
        // The group the child leads (it was started as its own group).
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{pid}"))
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The browser and the driver: [`CHROMIUM`] and [`CHROMEDRIVER`], or the files that
/// `REDRIVE_TEST_CHROMIUM` and `REDRIVE_TEST_CHROMEDRIVER` name.
fn browser() -> (String, String) {
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    (
        var("REDRIVE_TEST_CHROMIUM", CHROMIUM),
        var("REDRIVE_TEST_CHROMEDRIVER", CHROMEDRIVER),
    )
}

/// What `start` finds: the browser, or why the test is skipped.
fn browser_present() -> Result<(), String> {
    let (chromium, driver) = browser();
    for p in [chromium, driver] {
        if !Path::new(&p).exists() {
            return Err(format!(
                "{p} is missing (install Debian's chromium and chromium-driver)"
            ));
        }
    }
    Ok(())
}

/// The build's target directory: the binary is `<target>/<profile>/redrive`.
fn target_dir() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_redrive"));
    bin.parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

/// `POST /session/{id}/se/log`: chromedriver's browser log since the last call.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// One test's server, browser and screenshots.
pub struct Console {
    /// The WebDriver session.
    pub client: Client,
    /// `http://127.0.0.1:port` of the server.
    pub url: String,
    /// An HTTP client for set-up calls to the API (not the console's).
    pub http: reqwest::Client,
    shots: PathBuf,
    shot_count: std::sync::atomic::AtomicU32,
    server_log: PathBuf,
    // Dropped last: the processes, then the directories they wrote in.
    _driver: Proc,
    _server: Proc,
    _dirs: Vec<tempfile::TempDir>,
}

/// Starts everything for `test`, or `None` (after printing why) when no browser is
/// installed and `CI` is unset. Under `CI` a missing browser fails the test.
pub async fn start(test: &str) -> Option<Console> {
    start_with_env(test, &[]).await
}

/// [`start`], with the server's environment extended by `env` (settings a test needs,
/// such as loopback push targets or a shorter window).
pub async fn start_with_env(test: &str, env: &[(&str, &str)]) -> Option<Console> {
    if let Err(why) = browser_present() {
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {why}; CI must run the browser tests (.ci/run installs them)");
        }
        eprintln!("skipped {test}: {why}");
        return None;
    }
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let profile = tempfile::tempdir().unwrap();

    // The server, on a port of its own choosing (read from its log).
    let server_log = logs.path().join("server.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redrive"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("REDRIVE_") {
            cmd.env_remove(k);
        }
    }
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--sqs-listen",
        "off",
        "--auth",
    ])
    .arg("--data-dir")
    .arg(data.path())
    .env("REDRIVE_BOOTSTRAP_TOKEN", ADMIN)
    .env("REDRIVE_SERVER_SWEEP_INTERVAL_MS", "200")
    .envs(env.iter().copied())
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&server_log).unwrap())
    .process_group(0);
    let server = Proc(cmd.spawn().unwrap());
    let addr = wait_for(BOUND, || listen_addr(&read(&server_log)))
        .await
        .unwrap_or_else(|| panic!("the server did not start:\n{}", read(&server_log)));
    let url = format!("http://{addr}");
    let http = reqwest::Client::new();
    let healthy = wait_for(BOUND, || {
        let http = http.clone();
        let url = url.clone();
        async move {
            http.get(format!("{url}/healthz"))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        }
    })
    .await;
    assert!(
        healthy.is_some(),
        "the server never answered /healthz:\n{}",
        read(&server_log)
    );

    // chromedriver, and the browser through it.
    let port = crate::ports::free_port();
    let driver = Proc(
        Command::new(browser().1)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let driver_url = format!("http://127.0.0.1:{port}");
    let up = wait_for(BOUND, || {
        let http = http.clone();
        let u = format!("{driver_url}/status");
        async move {
            http.get(u)
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        }
    })
    .await;
    assert!(up.is_some(), "chromedriver did not start on port {port}");
    let mut caps = Capabilities::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": browser().0,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage",
                format!("--window-size={},{}", WIDE.0, WIDE.1),
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver_url)
        .await
        .unwrap_or_else(|e| panic!("cannot start a browser session: {e}"));

    let shots = target_dir().join("console-screenshots").join(test);
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    Some(Console {
        client,
        url,
        http,
        shots,
        shot_count: std::sync::atomic::AtomicU32::new(0),
        server_log,
        _driver: driver,
        _server: server,
        _dirs: vec![data, logs, profile],
    })
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The address in the server's "store opened … listen=ADDR" line.
fn listen_addr(log: &str) -> std::future::Ready<Option<SocketAddr>> {
    std::future::ready(
        log.lines()
            .filter(|l| l.contains("store opened"))
            .find_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("listen="))
                    .and_then(|a| a.parse().ok())
            }),
    )
}

/// Polls `f` until it answers `Some`, for at most `bound`.
async fn wait_for<T, F, Fut>(bound: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if started.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The accessible name of an element as the steps and the check compute it (a subset of
/// the accessible-name computation: aria-labelledby, aria-label, a label, the text, the
/// value of a button input, title, alt).
const ACC_NAME_JS: &str = r#"
const accName = (el) => {
  const by = el.getAttribute('aria-labelledby');
  if (by) {
    const t = by.split(/\s+/).map((id) => (document.getElementById(id) || {}).textContent || '').join(' ').trim();
    if (t) return t.replace(/\s+/g, ' ');
  }
  const aria = (el.getAttribute('aria-label') || '').trim();
  if (aria) return aria;
  if (el.id) {
    const l = document.querySelector(`label[for="${CSS.escape(el.id)}"]`);
    if (l && l.textContent.trim()) return l.textContent.trim().replace(/\s+/g, ' ');
  }
  const wrap = el.closest('label');
  if (wrap && wrap.textContent.trim()) return wrap.textContent.trim().replace(/\s+/g, ' ');
  const tag = el.tagName.toLowerCase();
  if (tag === 'input' && ['submit', 'button', 'reset'].includes(el.type) && el.value) return el.value;
  if (!['input', 'select', 'textarea'].includes(tag)) {
    const t = (el.textContent || '').trim();
    if (t) return t.replace(/\s+/g, ' ');
  }
  return (el.getAttribute('title') || el.getAttribute('alt') || '').trim();
};
const shown = (el) => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
const scope = () => document.querySelector('dialog[open]') || document;
"#;

impl Console {
    /// The server's log so far.
    pub fn server_log(&self) -> String {
        read(&self.server_log)
    }

    /// Saves a screenshot of the page as `<n>-<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let n = self
            .shot_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slug: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        match self.client.screenshot().await {
            Ok(png) => {
                let p = self.shots.join(format!("{n:02}-{slug}.png"));
                std::fs::write(&p, png).unwrap();
            }
            Err(e) => eprintln!("screenshot {name} failed: {e}"),
        }
    }

    /// Fails the step `what`: saves a screenshot of the page first, then panics with
    /// `why`, the page's text and the end of the server's log.
    pub async fn fail(&self, what: &str, why: &str) -> ! {
        self.screenshot(&format!("failed-{what}")).await;
        let text = self
            .client
            .execute(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let log = read(&self.server_log);
        let tail: String = log
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        panic!(
            "step {what:?} failed: {why}\n--- page text ---\n{text}\n--- server log (end) ---\n{tail}"
        );
    }

    /// Opens the console at `#/<hash>` (`goto("overview")`, `goto("dead-letters/orders")`).
    pub async fn goto(&self, hash: &str) {
        let url = format!("{}/#/{}", self.url, hash.trim_start_matches("#/"));
        if let Err(e) = self.client.goto(&url).await {
            self.fail(&format!("goto {hash}"), &e.to_string()).await;
        }
    }

    /// Signs in on the sign-in screen with `token` and waits for the overview.
    pub async fn sign_in_with(&self, token: &str) {
        self.goto("overview").await;
        self.wait_for_text("Sign in to redrive").await;
        // The first visit without a token is refused by the server (401), which the
        // browser logs: refusals are what bring the sign-in screen, and expected here.
        self.drain_console_errors(&["401 (Unauthorized)"]).await;
        self.screenshot("sign-in").await;
        self.fill("API token", token).await;
        self.click_button("Sign in").await;
        self.wait_for_text("Sign out").await;
    }

    /// [`Console::sign_in_with`] the admin token.
    pub async fn sign_in(&self) {
        self.sign_in_with(ADMIN).await;
    }

    /// Marks the first shown element matching `js_filter` (JavaScript over `el`, with
    /// `accName`) within an open dialog if there is one, and returns its CSS locator.
    async fn mark(&self, selector: &str, js_filter: &str, arg: &str) -> Option<String> {
        let script = format!(
            "{ACC_NAME_JS}
             const want = arguments[0];
             document.querySelectorAll('[data-test-mark]').forEach((e) => e.removeAttribute('data-test-mark'));
             const el = [...scope().querySelectorAll({selector:?})].find((el) => shown(el) && ({js_filter}));
             if (!el) return null;
             el.setAttribute('data-test-mark', '1');
             return true;"
        );
        match self.client.execute(&script, vec![json!(arg)]).await {
            Ok(Value::Bool(true)) => Some("[data-test-mark='1']".to_owned()),
            _ => None,
        }
    }

    /// Clicks the (enabled) button whose accessible name is `name`, waiting for it.
    pub async fn click_button(&self, name: &str) {
        self.click_by(
            "button, [role=button], input[type=submit]",
            name,
            &format!("click {name}"),
        )
        .await;
    }

    /// Clicks the link whose accessible name is `name`, waiting for it.
    pub async fn click_link(&self, name: &str) {
        self.click_by("a[href]", name, &format!("follow {name}"))
            .await;
    }

    async fn click_by(&self, selector: &str, name: &str, what: &str) {
        let found = wait_for(BOUND, || {
            self.mark(selector, "accName(el) === want && !el.disabled", name)
        })
        .await;
        let Some(css) = found else {
            self.fail(what, &format!("no enabled control named {name:?}"))
                .await
        };
        // In the middle of the window, clear of the sticky header and the footer.
        let _ = self
            .client
            .execute(
                "document.querySelector(arguments[0]).scrollIntoView({block: 'center'}); return true",
                vec![json!(css)],
            )
            .await;
        let r = async { self.client.find(Locator::Css(&css)).await?.click().await }.await;
        if let Err(e) = r {
            self.fail(what, &e.to_string()).await;
        }
    }

    /// Types `text` into the field labelled `label` (its previous value cleared).
    pub async fn fill(&self, label: &str, text: &str) {
        let what = format!("fill {label}");
        let css = self.field(label, &what).await;
        let r = async {
            let el = self.client.find(Locator::Css(&css)).await?;
            el.clear().await?;
            el.send_keys(text).await
        }
        .await;
        if let Err(e) = r {
            self.fail(&what, &e.to_string()).await;
        }
    }

    /// Chooses the option shown as `option` in the select labelled `label`.
    pub async fn choose(&self, label: &str, option: &str) {
        let what = format!("choose {option} in {label}");
        let css = self.field(label, &what).await;
        let r = async {
            let el = self.client.find(Locator::Css(&css)).await?;
            el.select_by_label(option).await
        }
        .await;
        if let Err(e) = r {
            self.fail(&what, &e.to_string()).await;
        }
    }

    async fn field(&self, label: &str, what: &str) -> String {
        let found = wait_for(BOUND, || {
            self.mark("input, select, textarea", "accName(el) === want", label)
        })
        .await;
        match found {
            Some(css) => css,
            None => {
                self.fail(what, &format!("no field labelled {label:?}"))
                    .await
            }
        }
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        self.client
            .execute("return document.body.innerText", vec![])
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Waits (bounded) until the page's visible text contains `text`.
    pub async fn wait_for_text(&self, text: &str) {
        let found = wait_for(BOUND, || async {
            self.text().await.contains(text).then_some(())
        })
        .await;
        if found.is_none() {
            self.fail(&format!("wait for {text}"), "the text did not appear")
                .await;
        }
    }

    /// Asserts the page's visible text does not contain `text` (now).
    pub async fn assert_no_text(&self, text: &str) {
        if self.text().await.contains(text) {
            self.fail(&format!("no {text}"), "the text is on the page")
                .await;
        }
    }

    /// Every shown button, link, input, select and textarea has a non-empty accessible
    /// name.
    pub async fn assert_accessible_names(&self) {
        let script = format!(
            "{ACC_NAME_JS}
             return [...document.querySelectorAll('button, a[href], input:not([type=hidden]), select, textarea, [role=button], summary')]
               .filter((el) => shown(el) && !accName(el))
               .map((el) => el.outerHTML.slice(0, 200));"
        );
        let v = self.client.execute(&script, vec![]).await.unwrap();
        let unnamed = v.as_array().cloned().unwrap_or_default();
        if !unnamed.is_empty() {
            self.fail(
                "accessible names",
                &format!("controls without an accessible name: {unnamed:?}"),
            )
            .await;
        }
    }

    /// The SEVERE entries of the browser's log since the last read.
    pub async fn console_errors(&self) -> Vec<String> {
        let v = self.client.issue_cmd(BrowserLog).await.unwrap();
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// No SEVERE entry in the browser's log since the last read.
    pub async fn assert_no_console_errors(&self) {
        let errors = self.console_errors().await;
        if !errors.is_empty() {
            self.fail("console errors", &format!("the browser logged: {errors:?}"))
                .await;
        }
    }

    /// Reads the browser's log, allowing only SEVERE entries that contain one of
    /// `expected` (an answer the step provoked on purpose, such as a refused request).
    pub async fn drain_console_errors(&self, expected: &[&str]) {
        let other: Vec<String> = self
            .console_errors()
            .await
            .into_iter()
            .filter(|m| !expected.iter().any(|x| m.contains(x)))
            .collect();
        if !other.is_empty() {
            self.fail("console errors", &format!("the browser logged: {other:?}"))
                .await;
        }
    }

    /// A page's checks: a screenshot, accessible names, no console errors.
    pub async fn check_page(&self, name: &str) {
        self.screenshot(name).await;
        self.assert_accessible_names().await;
        self.assert_no_console_errors().await;
    }

    /// Resizes the browser window.
    pub async fn window(&self, (w, h): (u32, u32)) {
        if let Err(e) = self.client.set_window_size(w, h).await {
            self.fail("resize", &e.to_string()).await;
        }
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        match self.client.execute(script, vec![]).await {
            Ok(v) => v,
            Err(e) => self.fail("script", &e.to_string()).await,
        }
    }

    /// Calls the API with `token` (set-up and checks beside the browser).
    pub async fn api_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// [`Console::api_as`] the admin.
    pub async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.api_as(ADMIN, method, path, body).await
    }

    /// [`Console::api`], asserting a 2xx answer; returns its body.
    pub async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let (st, v) = self.api(method.clone(), path, body).await;
        assert!((200..300).contains(&st), "{method} {path}: {st} {v}");
        v
    }

    /// Asserts the audit log has an `action` entry whose targets include `target`.
    pub async fn assert_audited(&self, action: &str, target: &str) {
        let v = self
            .ok(
                reqwest::Method::GET,
                &format!("/v1/audit?action={action}"),
                None,
            )
            .await;
        let found = v["entries"].as_array().is_some_and(|es| {
            es.iter().any(|e| {
                e["targets"]
                    .as_array()
                    .is_some_and(|ts| ts.iter().any(|t| t == target))
            })
        });
        assert!(found, "no {action} entry for {target}: {v}");
    }

    /// Receives the next message of `queue` and dead-letters it with `reason` and
    /// `description` (as a consumer would, through the API); returns the record's id.
    pub async fn dead_letter_next(&self, queue: &str, reason: &str, description: &str) -> String {
        let v = self
            .ok(
                reqwest::Method::POST,
                &format!("/v1/queues/{queue}/receive"),
                Some(json!({"max_messages": 1})),
            )
            .await;
        let lock = v["messages"][0]["lock_token"].as_str().unwrap().to_owned();
        let v = self
            .ok(
                reqwest::Method::POST,
                &format!("/v1/queues/{queue}/settle"),
                Some(
                    json!({"lock_token": lock, "action": "dead_letter", "reason": reason,
                            "description": description}),
                ),
            )
            .await;
        v["dead_letter_id"].as_str().unwrap().to_owned()
    }

    /// Ends the browser session (the processes end when `self` drops).
    pub async fn finish(self) {
        let Console { client, .. } = self;
        let _ = client.close().await;
    }
}
