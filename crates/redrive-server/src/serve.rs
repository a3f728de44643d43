//! The accept loop shared by every listener (the native API and the extra endpoints):
//! HTTP/1.1 over plain TCP or TLS, with the limits that keep slow and idle clients from
//! exhausting the process.
//!
//! Per connection:
//! - **idle**: no request in flight and no byte of the next request received: closed after
//!   `idle_timeout_ms` (a new connection starts idle);
//! - **header**: from the first byte of a request until its header section is complete:
//!   closed after `header_read_timeout_ms`;
//! - **body**: the request body must make progress: a read that waits longer than
//!   `body_read_timeout_ms` fails, and the handler answers 408 (the connection then
//!   closes, since the body was not read to its end);
//! - **TLS handshake**: bounded by `tls_handshake_timeout_ms`.
//! - **unread bodies**: a handler that answers without reading the request's body (a
//!   refusal: 401, 403, 415…) leaves the body on the connection, ahead of the next request.
//!   Up to [`DRAIN_LIMIT`] bytes of it are read and dropped within [`DRAIN_TIME`] before
//!   the answer goes out, so that the connection serves the next request; a longer or
//!   slower body (or one the client waits to send, `Expect: 100-continue`) is not read,
//!   and the answer says `Connection: close`, so that the client does not send another
//!   request on a connection the server is closing.
//!
//! The number of open connections over all listeners is bounded by a semaphore: a
//! connection over the limit is accepted and closed at once (so that the kernel's backlog
//! never fills with clients waiting for nothing), and counted.
//!
//! The head of each request is also read as it arrives, to see the header lines that hyper
//! folds away: a request with both `Content-Length` and `Transfer-Encoding` is marked
//! ([`FramingConflict`]) for the router to refuse. A head that arrives pipelined behind a
//! previous request's body is not seen here; hyper itself closes the connection after a
//! request with both headers, so nothing can be smuggled behind one on the same connection.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower_service::Service as _;

/// Largest header section hyper itself reads. Above the limits the native router
/// enforces (so that its problem documents answer first), below anything a client needs.
pub(crate) const HYPER_MAX_HEADER_BYTES: usize = 256 * 1024;
/// Most header lines hyper itself reads (see [`HYPER_MAX_HEADER_BYTES`]).
pub(crate) const HYPER_MAX_HEADERS: usize = 400;
/// File descriptors kept out of the connection limit: the store, the push client's
/// connections, logs, the listeners.
pub const FD_RESERVE: u64 = 256;
/// How much of a request head is kept to look for conflicting framing headers.
const SNIFF_LIMIT: usize = HYPER_MAX_HEADER_BYTES;
/// Most bytes of a body its handler left unread that are read and dropped to keep the
/// connection open (a longer body closes it).
pub(crate) const DRAIN_LIMIT: u64 = 64 * 1024;
/// How long the rest of an unread body may take to arrive before the connection is
/// closed instead.
pub(crate) const DRAIN_TIME: Duration = Duration::from_secs(1);

/// The limits of the accept loop, from [`crate::Settings`].
#[derive(Clone)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub tls_handshake_timeout: Duration,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Raises the soft limit of open files (`RLIMIT_NOFILE`) to the hard limit, so that the
/// connection limit is not cut short by a low default. Returns the (soft, hard) limits in
/// force afterwards.
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    let (_, hard) = rlimit::Resource::NOFILE.get()?;
    rlimit::increase_nofile_limit(hard)?;
    rlimit::Resource::NOFILE.get()
}

/// The connection limit actually enforced: `configured`, but never above the soft limit
/// of open files minus [`FD_RESERVE`] (and at least 1).
pub fn effective_max_connections(configured: usize) -> usize {
    match rlimit::Resource::NOFILE.get() {
        Ok((soft, _)) => {
            let room = usize::try_from(soft.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
            configured.min(room).max(1)
        }
        Err(_) => configured.max(1),
    }
}

/// Marks a request whose head carried both `Content-Length` and `Transfer-Encoding`
/// (hyper keeps only the latter, so handlers cannot see it otherwise).
#[derive(Debug, Clone, Copy)]
pub struct FramingConflict;

/// Set when the request's body read timed out, for layers that see only the handler's
/// answer (a handler reading the body itself answers a generic 400).
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyTimedOut(pub Arc<AtomicBool>);

/// The error of a request body read that waited longer than `body_read_timeout_ms`.
#[derive(Debug)]
pub struct BodyReadTimeout;

impl std::fmt::Display for BodyReadTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyReadTimeout {}

/// Connection counters of one listener, for `/metrics`.
pub(crate) struct ListenerStats {
    addr: String,
    open: AtomicU64,
    refused: AtomicU64,
}

/// Connection counters of every listener.
#[derive(Default)]
pub(crate) struct ConnMetrics {
    listeners: Mutex<Vec<Arc<ListenerStats>>>,
}

impl ConnMetrics {
    fn listener(&self, addr: String) -> Arc<ListenerStats> {
        let stats = Arc::new(ListenerStats {
            addr,
            open: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stats.clone());
        stats
    }

    /// Prometheus text of the connection gauges and counters.
    pub(crate) fn render(&self) -> String {
        use std::fmt::Write as _;
        let ls = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = String::new();
        out.push_str(
            "# HELP redrive_http_connections_open HTTP connections open now, by listener.\n",
        );
        out.push_str("# TYPE redrive_http_connections_open gauge\n");
        for l in &ls {
            let _ = writeln!(
                out,
                "redrive_http_connections_open{{listener=\"{}\"}} {}",
                l.addr,
                l.open.load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP redrive_http_connections_refused_total Connections closed at once because \
             the connection limit was reached, by listener.\n",
        );
        out.push_str("# TYPE redrive_http_connections_refused_total counter\n");
        for l in &ls {
            let _ = writeln!(
                out,
                "redrive_http_connections_refused_total{{listener=\"{}\"}} {}",
                l.addr,
                l.refused.load(Ordering::Relaxed)
            );
        }
        out
    }
}

/// Serves `listeners` until `stop` is cancelled, then stops accepting and lets every open
/// connection finish its in-flight request (idle connections close at once). Returns when
/// every connection has closed; the caller bounds that wait.
pub(crate) async fn serve_all(
    listeners: Vec<(TcpListener, Router)>,
    limits: Limits,
    max_connections: usize,
    metrics: Arc<ConnMetrics>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(max_connections));
    let graceful = Arc::new(GracefulShutdown::new());
    let mut loops = tokio::task::JoinSet::new();
    for (listener, router) in listeners {
        let addr = listener
            .local_addr()
            .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
        let stats = metrics.listener(addr);
        let ctx = AcceptCtx {
            limits: limits.clone(),
            permits: permits.clone(),
            stats,
            router,
        };
        loops.spawn(accept_loop(listener, ctx, graceful.clone(), stop.clone()));
    }
    while loops.join_next().await.is_some() {}
    // Every accept loop has stopped and dropped its listener; `graceful` is shared only
    // by the connection tasks' watchers now.
    match Arc::try_unwrap(graceful) {
        Ok(g) => g.shutdown().await,
        Err(_) => tracing::error!("connection watcher still shared at shutdown"),
    }
}

/// What a connection task needs (not the shutdown handle itself: the accept loops hold
/// the only references to it, so that it can be taken back once they have stopped).
#[derive(Clone)]
struct AcceptCtx {
    limits: Limits,
    permits: Arc<Semaphore>,
    stats: Arc<ListenerStats>,
    router: Router,
}

async fn accept_loop(
    listener: TcpListener,
    ctx: AcceptCtx,
    graceful: Arc<GracefulShutdown>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors or a transient network error: pause instead of
                // spinning on an error that the next accept would repeat.
                tracing::warn!(error = %e, "accept failed");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                continue;
            }
        };
        let Ok(permit) = ctx.permits.clone().try_acquire_owned() else {
            ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("connection limit reached: connection closed");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            ctx.stats.open.fetch_add(1, Ordering::Relaxed);
            connection(stream, peer, &ctx, watcher).await;
            ctx.stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    ctx: &AcceptCtx,
    watcher: hyper_util::server::graceful::Watcher,
) {
    match &ctx.limits.tls {
        None => http(stream, peer, ctx, watcher).await,
        Some(acceptor) => {
            match tokio::time::timeout(ctx.limits.tls_handshake_timeout, acceptor.accept(stream))
                .await
            {
                Ok(Ok(tls)) => http(tls, peer, ctx, watcher).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        }
    }
}

/// Where a connection is between requests, for its timeouts and the head sniffer.
struct ConnState {
    /// Requests handed to the router whose response body is not yet done.
    in_flight: u32,
    /// When the connection last became idle (opened, or answered its last request).
    idle_since: Instant,
    /// When the first byte of the next request arrived, while no request is in flight.
    head_since: Option<Instant>,
    /// The head bytes read so far (only while waiting for a head).
    head: Vec<u8>,
    /// The head has been read whole (or given up on) since the connection became idle.
    head_done: bool,
    /// The last complete head had both `Content-Length` and `Transfer-Encoding`.
    conflict: bool,
}

struct Shared {
    state: Mutex<ConnState>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes were read from the client.
    fn on_read(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut s = self.lock();
        if s.in_flight > 0 || s.head_done {
            return;
        }
        if s.head_since.is_none() {
            s.head_since = Some(Instant::now());
            self.changed.notify_one();
        }
        let room = SNIFF_LIMIT.saturating_sub(s.head.len());
        let take = bytes.len().min(room);
        s.head.extend_from_slice(&bytes[..take]);
        if let Some(end) = find(&s.head, b"\r\n\r\n") {
            s.conflict = conflicting_framing(&s.head[..end]);
            s.head_done = true;
            s.head = Vec::new();
        } else if s.head.len() >= SNIFF_LIMIT {
            s.head_done = true;
            s.head = Vec::new();
        }
    }

    /// The router got a request; returns whether its head had conflicting framing.
    fn on_request(&self) -> bool {
        let mut s = self.lock();
        s.in_flight += 1;
        s.head_since = None;
        s.head_done = true;
        s.head = Vec::new();
        std::mem::take(&mut s.conflict)
    }

    /// A response was written (or abandoned).
    fn on_response_done(&self) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            s.idle_since = Instant::now();
            s.head_since = None;
            s.head_done = false;
            s.head.clear();
        }
        drop(s);
        self.changed.notify_one();
    }

    /// When the connection should be closed, if nothing happens before.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let s = self.lock();
        if s.in_flight > 0 {
            return None;
        }
        Some(match s.head_since {
            Some(t) => t + limits.header_read_timeout,
            None => s.idle_since + limits.idle_timeout,
        })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether a request head (without its final empty line) has both framing headers.
fn conflicting_framing(head: &[u8]) -> bool {
    let mut cl = false;
    let mut te = false;
    for line in head.split(|b| *b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let name = &line[..colon];
        cl |= name.eq_ignore_ascii_case(b"content-length");
        te |= name.eq_ignore_ascii_case(b"transfer-encoding");
    }
    cl && te
}

/// The client's byte stream, reporting what is read to the connection's state.
struct Watched<T> {
    io: T,
    shared: Arc<Shared>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            self.shared.on_read(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Serves HTTP/1.1 on one connection until it closes, times out or shuts down.
async fn http<T>(
    io: T,
    peer: std::net::SocketAddr,
    ctx: &AcceptCtx,
    watcher: hyper_util::server::graceful::Watcher,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared {
        state: Mutex::new(ConnState {
            in_flight: 0,
            idle_since: Instant::now(),
            head_since: None,
            head: Vec::new(),
            head_done: false,
            conflict: false,
        }),
        changed: Notify::new(),
    });
    let io = TokioIo::new(Watched {
        io,
        shared: shared.clone(),
    });
    let service = {
        let shared = shared.clone();
        let router = ctx.router.clone();
        let body_timeout = ctx.limits.body_read_timeout;
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let conflict = shared.on_request();
            let done = DoneGuard(shared.clone());
            let timed_out = BodyTimedOut::default();
            // The client waits for a 100 Continue before it sends the body: an unread one
            // is never asked for, and the connection closes after the answer.
            let awaits_continue = req
                .headers()
                .get(hyper::header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
            let (back, mut unread) = tokio::sync::oneshot::channel();
            let mut req = req.map(|b| {
                Body::new(ReturnedBody {
                    inner: Some(TimeoutBody {
                        inner: b,
                        timeout: body_timeout,
                        sleep: None,
                        timed_out: timed_out.0.clone(),
                    }),
                    done: false,
                    back: Some(back),
                })
            });
            req.extensions_mut().insert(timed_out);
            // The client's address, for the audit log and the handlers.
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            if conflict {
                req.extensions_mut().insert(FramingConflict);
            }
            let mut router = router.clone();
            async move {
                let mut resp = router.call(req).await?;
                // The handler dropped the body before its end (a body still held somewhere
                // is left to hyper).
                if let Ok(rest) = unread.try_recv()
                    && (awaits_continue || !drain(rest).await)
                {
                    resp.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(resp.map(|b| {
                    Body::new(DoneBody {
                        inner: b,
                        _done: done,
                    })
                }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Our own watch covers the wait for a head (see the module doc).
        .header_read_timeout(None)
        .max_buf_size(HYPER_MAX_HEADER_BYTES * 2)
        .max_header_size(HYPER_MAX_HEADER_BYTES)
        .max_headers(HYPER_MAX_HEADERS)
        .keep_alive(true);
    let conn = watcher.watch(builder.serve_connection(io, service));
    tokio::pin!(conn);
    loop {
        let deadline = shared.deadline(&ctx.limits);
        let expired = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = shared.changed.notified() => {}
            () = expired => {
                if shared.deadline(&ctx.limits).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!("connection idle or head too slow: closed");
                    return;
                }
            }
        }
    }
}

/// Tells the connection its response is done when hyper drops the body.
struct DoneGuard(Arc<Shared>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        self.0.on_response_done();
    }
}

struct DoneBody {
    inner: Body,
    _done: DoneGuard,
}

impl http_body::Body for DoneBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The request body as the router sees it: dropped before its end (and without a failed
/// read), it goes back to the connection's service to be drained.
struct ReturnedBody {
    inner: Option<TimeoutBody>,
    /// A read failed, or the body ended: nothing is left to drain (after a failed read
    /// the connection closes anyway).
    done: bool,
    back: Option<tokio::sync::oneshot::Sender<TimeoutBody>>,
}

impl http_body::Body for ReturnedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let r = http_body::Body::poll_frame(Pin::new(inner), cx);
        if let Poll::Ready(None | Some(Err(_))) = &r {
            this.done = true;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.as_ref().map_or_else(
            || http_body::SizeHint::with_exact(0),
            http_body::Body::size_hint,
        )
    }
}

impl Drop for ReturnedBody {
    fn drop(&mut self) {
        // The sender goes either way: the service learns that the body is gone.
        let back = self.back.take();
        if let (Some(inner), Some(back), false) = (self.inner.take(), back, self.done)
            && !http_body::Body::is_end_stream(&inner)
        {
            let _ = back.send(inner);
        }
    }
}

/// Reads and drops the rest of a body its handler left unread, so that the connection can
/// serve the next request: whether it ended within [`DRAIN_LIMIT`] bytes and
/// [`DRAIN_TIME`].
async fn drain(mut body: TimeoutBody) -> bool {
    if http_body::Body::size_hint(&body)
        .upper()
        .is_some_and(|n| n > DRAIN_LIMIT)
    {
        return false;
    }
    let read_all = async {
        let mut read = 0u64;
        loop {
            let frame =
                std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx))
                    .await;
            match frame {
                None => return true,
                Some(Err(_)) => return false,
                Some(Ok(f)) => {
                    read += f.data_ref().map_or(0, |d| d.len() as u64);
                    if read > DRAIN_LIMIT {
                        return false;
                    }
                }
            }
        }
    };
    tokio::time::timeout(DRAIN_TIME, read_all)
        .await
        .unwrap_or(false)
}

/// A request body whose every read must make progress within `timeout`.
struct TimeoutBody {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl http_body::Body for TimeoutBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.sleep = None;
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.timed_out.store(true, Ordering::Relaxed);
                        Poll::Ready(Some(Err(Box::new(BodyReadTimeout))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_framing_headers_are_seen_in_any_case() {
        let h = b"POST / HTTP/1.1\r\nHost: a\r\ncontent-LENGTH: 5\r\nTransfer-Encoding: chunked";
        assert!(conflicting_framing(h));
        let h = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5";
        assert!(!conflicting_framing(h));
        let h = b"POST /content-length:1 HTTP/1.1\r\nTransfer-Encoding: chunked";
        assert!(!conflicting_framing(h));
    }
}
