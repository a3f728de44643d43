//! Test support: a `redrive serve` child process on a temporary data directory, CLI
//! invocations against it, and a minimal blocking HTTP probe for readiness.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The compiled binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_redrive");

/// How long a server may take to start before the test gives up. This bounds waiting for
/// a process to come up on a busy machine; it is not a timing rule of the broker.
const START_BOUND: Duration = Duration::from_secs(60);

/// Every environment variable the binary reads; cleared so the caller's shell cannot
/// leak into a test.
const REDRIVE_VARS: &[&str] = &[
    "REDRIVE_CONFIG",
    "REDRIVE_URL",
    "REDRIVE_LISTEN",
    "REDRIVE_DATA_DIR",
    "REDRIVE_STORE",
    "REDRIVE_LOG",
    "REDRIVE_LOG_FORMAT",
    "REDRIVE_SERVER_SWEEP_INTERVAL_MS",
    "REDRIVE_SERVER_SHUTDOWN_TIMEOUT_MS",
    "REDRIVE_SQS_ACCESS_KEYS",
    "REDRIVE_TOKEN",
    "REDRIVE_AUTH_ENABLED",
    "REDRIVE_BOOTSTRAP_TOKEN",
    "REDRIVE_PUSH_ALLOWED_NETWORKS",
    "REDRIVE_CA_FILE",
];

/// A command for the binary with a clean `REDRIVE_*` environment.
pub fn command() -> Command {
    let mut c = Command::new(BIN);
    for v in REDRIVE_VARS {
        c.env_remove(v);
    }
    c
}

#[path = "../common/ports.rs"]
mod ports;
pub use ports::free_port;

/// A running `redrive serve`; killed when dropped.
pub struct Server {
    child: Option<Child>,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// `http://addr`.
    pub url: String,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Server {
    /// Starts a server on `data_dir` on a port chosen by the OS.
    pub fn start(data_dir: &Path) -> Server {
        Server::start_with(|c| {
            c.arg("--listen")
                .arg("127.0.0.1:0")
                .arg("--data-dir")
                .arg(data_dir);
        })
    }

    /// Starts a server on `data_dir` with the native API only (no SQS listener), on a port
    /// chosen by the OS; with authentication on when `auth`.
    pub fn start_native(data_dir: &Path, auth: bool) -> Server {
        Server::start_with(|c| {
            c.arg("--listen")
                .arg("127.0.0.1:0")
                .arg("--sqs-listen")
                .arg("off")
                .arg("--data-dir")
                .arg(data_dir);
            if auth {
                c.arg("--auth");
            }
        })
    }

    /// Starts `redrive serve` with arguments and environment set by `setup`, and waits
    /// until it has logged its address and answers `/healthz`.
    pub fn start_with(setup: impl FnOnce(&mut Command)) -> Server {
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("server.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let mut cmd = command();
        cmd.arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        setup(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let started = Instant::now();
        let addr = loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("server exited during start ({status}):\n{}", read_log(&log));
            }
            if let Some(addr) = logged_listen_addr(&read_log(&log)) {
                break addr;
            }
            assert!(
                started.elapsed() < START_BOUND,
                "server did not start:\n{}",
                read_log(&log)
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        while !healthy(addr) {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("server exited during start ({status}):\n{}", read_log(&log));
            }
            assert!(
                started.elapsed() < START_BOUND,
                "server never answered /healthz:\n{}",
                read_log(&log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child: Some(child),
            addr,
            url: format!("http://{addr}"),
            log,
            _log_dir: log_dir,
        }
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// The file the server's stderr goes to (its log, and what it prints to its terminal).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, and wait for the process to exit (bounded).
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("server already stopped");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
        let started = Instant::now();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s;
            }
            if started.elapsed() > START_BOUND {
                c.kill().unwrap();
                panic!("server did not stop after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs a CLI command against this server.
    pub fn cli(&self, args: &[&str]) -> Cli {
        cli(&self.url, args, None)
    }

    /// Runs a CLI command against this server with `stdin`.
    pub fn cli_stdin(&self, args: &[&str], stdin: &[u8]) -> Cli {
        cli(&self.url, args, Some(stdin))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The outcome of a CLI run.
#[derive(Debug)]
pub struct Cli {
    /// The arguments, for messages.
    pub args: Vec<String>,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Cli {
    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "`redrive {}` failed:\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Asserts success and parses stdout as JSON.
    #[track_caller]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        let out = self.ok();
        serde_json::from_str(out)
            .unwrap_or_else(|e| panic!("`redrive {}`: not JSON ({e}):\n{out}", self.args.join(" ")))
    }

    /// Asserts exit code `code` and that stderr is one `error:` line mentioning `needle`.
    #[track_caller]
    pub fn fails(&self, code: i32, needle: &str) {
        assert_eq!(
            self.code,
            Some(code),
            "`redrive {}`: expected exit {code}:\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        assert!(
            self.stderr.contains(needle),
            "`redrive {}`: stderr lacks {needle:?}:\n{}",
            self.args.join(" "),
            self.stderr
        );
        assert!(
            self.stderr.starts_with("error:"),
            "not an error line: {}",
            self.stderr
        );
    }
}

/// Runs `redrive --url URL ARGS...`.
pub fn cli(url: &str, args: &[&str], stdin: Option<&[u8]>) -> Cli {
    let mut cmd = command();
    cmd.arg("--url").arg(url).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input).unwrap();
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    Cli {
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The address from the binary's own `store opened` line (`listen=ADDR` in text logs,
/// `"listen":"ADDR"` in JSON logs).
pub fn logged_listen_addr(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter(|l| l.contains("store opened"))
        .find_map(|l| {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
                return v["fields"]["listen"].as_str()?.parse().ok();
            }
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("listen="))
                .and_then(|a| a.parse().ok())
        })
}

/// Whether `GET /healthz` answers 2xx.
pub fn healthy(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let head = String::from_utf8_lossy(&buf);
    head.starts_with("HTTP/1.1 2") || head.starts_with("HTTP/1.0 2")
}

/// The admin token a fresh `serve --auth` printed to its terminal.
pub fn printed_admin_token(log: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains("Admin token (shown only now):"))
        .unwrap_or_else(|| panic!("no admin token printed:\n{log}"));
    let token = line.rsplit(' ').next().unwrap().trim().to_owned();
    assert!(token.starts_with("rdt_") && token.len() == 68, "{line}");
    token
}
