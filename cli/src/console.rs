//! `leasehold console`: serves the operator console
//! ([`leasehold::console`]) on a local address until Ctrl-C.
//!
//! Actions need a shared secret, read from `LEASEHOLD_CONSOLE_TOKEN` or a
//! file (never from argv, which other users see in `ps`); whoever types it
//! into the login page may act, under the name they give there. Without
//! one the console is read-only. It listens on loopback unless
//! `--allow-remote`: it speaks plain HTTP, so anything else belongs behind
//! a proxy that adds TLS and authentication.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use leasehold::console::{self, ConsoleOptions};

use crate::db::{self, Db};
use crate::failure::Failure;

/// The environment variable that holds the token.
pub(crate) const TOKEN_ENV: &str = "LEASEHOLD_CONSOLE_TOKEN";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to serve on, IP:PORT. Loopback only unless --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    listen: String,

    /// Serve on a non-loopback address. The console speaks plain HTTP: put
    /// it behind a proxy with TLS and authentication.
    #[arg(long)]
    allow_remote: bool,

    /// Also answer requests with this `Host` (`host` or `host:port`), e.g. the name
    /// a proxy in front serves it under; repeatable. By default only the
    /// listen address, `localhost`, `127.0.0.1` and `[::1]` with its port.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_host: Vec<String>,

    /// Mark the login cookie `Secure` (sent over HTTPS only, named
    /// `__Host-leasehold_console`): set it when a TLS-terminating proxy in
    /// front is the only way to the console.
    #[arg(long)]
    secure_cookie: bool,

    /// Trust the `X-Forwarded-Proto` header: a request with
    /// `X-Forwarded-Proto: https` gets a `Secure` login cookie. Only behind
    /// a proxy that sets that header on every request and is the only way
    /// to the console (any client can send the header).
    #[arg(long)]
    trust_forwarded_proto: bool,

    /// Read the token that enables actions from this file (first line),
    /// instead of the LEASEHOLD_CONSOLE_TOKEN environment variable. Without
    /// either the console is read-only.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,

    /// How often open pages reload, in whole seconds (e.g. 5s, 1m; at most
    /// 1h), or `off`.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = crate::duration::refresh)]
    refresh: Duration,

    /// Page views served from the database at once (1 or 2, the CLI's
    /// connections); the others wait a moment for their turn, then get a
    /// "busy, retry" page. Bounds the console's load on a server the fleet
    /// shares.
    #[arg(long, default_value_t = ConsoleOptions::DEFAULT_MAX_CONCURRENT_READS, value_name = "N")]
    max_concurrent_reads: usize,

    /// Connections served at once. When all are taken, new ones wait in
    /// the system's accept queue until one closes (they are not refused).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    max_connections: usize,

    /// Time a client has to send a request's headers, also the longest an
    /// idle kept-alive connection stays open waiting for the next request
    /// (e.g. 10s; at most 1h).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = crate::duration::connect_timeout)]
    header_timeout: Duration,

    /// The longest a connection stays open, however busy (e.g. 2m; at most
    /// 1h): bounds slow request bodies and slow readers of responses.
    #[arg(long, default_value = "2m", value_name = "DURATION", value_parser = crate::duration::connect_timeout)]
    connection_timeout: Duration,
}

/// `--max-connections` by default: far more than the operators of a fleet
/// open at once, far fewer than a process's file descriptors (1,024 soft
/// limit on most systems).
const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// `--max-connections` at most.
const MAX_CONNECTIONS: usize = 10_000;

/// The largest request body read (a form post of the console is well under
/// 1 KiB); larger ones get `413 Payload Too Large`.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// How long connections still open at Ctrl-C get to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl Args {
    /// Checks the arguments before any connection: the address, and that
    /// a non-loopback one was asked for explicitly.
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        let addr = self.addr()?;
        if !addr.ip().is_loopback() && !self.allow_remote {
            return Err(Failure::usage(format!(
                "--listen {}: not a loopback address, so other machines could reach the console \
                 (plain HTTP, no TLS); pass --allow-remote to serve there anyway (behind a proxy with TLS \
                 and authentication), or listen on 127.0.0.1",
                self.listen
            )));
        }
        if !(1..=db::CONNECTIONS as usize).contains(&self.max_concurrent_reads) {
            return Err(Failure::usage(format!(
                "--max-concurrent-reads {}: between 1 and {} (the connections the CLI opens)",
                self.max_concurrent_reads,
                db::CONNECTIONS
            )));
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(Failure::usage(format!(
                "--max-connections {}: between 1 and {MAX_CONNECTIONS}",
                self.max_connections
            )));
        }
        Ok(())
    }

    fn addr(&self) -> Result<SocketAddr, Failure> {
        let listen = self.listen.trim();
        let listen = match listen.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => listen.to_owned(),
        };
        listen.parse().map_err(|_| {
            Failure::usage(format!(
                "--listen {}: expected IP:PORT, e.g. 127.0.0.1:8080 or [::1]:8080",
                self.listen
            ))
        })
    }

    /// The token from `--token-file`, else from the environment; `None`:
    /// read-only.
    fn token(&self) -> Result<Option<String>, Failure> {
        if let Some(path) = &self.token_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(format!("--token-file {}: cannot read it: {e}", path.display())))?;
            let token = text.lines().next().unwrap_or("").trim().to_owned();
            if token.is_empty() {
                return Err(Failure::usage(format!(
                    "--token-file {}: the file is empty; put the token on its first line",
                    path.display()
                )));
            }
            return Ok(Some(token));
        }
        match std::env::var(TOKEN_ENV) {
            Ok(token) if token.trim().is_empty() => Err(Failure::usage(format!(
                "{TOKEN_ENV} is set but empty: set a token to allow actions, or unset it for a read-only console"
            ))),
            Ok(token) => Ok(Some(token.trim().to_owned())),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(format!("{TOKEN_ENV} is not valid UTF-8"))),
        }
    }
}

/// Serves the console on `args.listen` until Ctrl-C (or SIGTERM).
pub(crate) async fn run(db: &Db, args: &Args) -> Result<(), Failure> {
    let addr = args.addr()?;
    let token = args.token()?;
    let mut options = ConsoleOptions::new()
        .refresh(args.refresh)
        .max_concurrent_reads(args.max_concurrent_reads)
        .secure_cookie(args.secure_cookie)
        .trust_forwarded_proto(args.trust_forwarded_proto);
    let access = match token {
        Some(token) => {
            options = options
                .token(token)
                .map_err(|e| Failure::usage(format!("{TOKEN_ENV} (or --token-file): {e}")))?;
            "actions allowed after logging in with the token"
        }
        None => {
            "read-only: set LEASEHOLD_CONSOLE_TOKEN (or --token-file) to allow actions after login; make a token \
             with `openssl rand -hex 32`"
        }
    };
    db.require_schema().await?;
    let listener = listen(addr).map_err(|e| Failure::error(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::error(format!("cannot read the address served: {e}")))?;
    // A page on another name that resolves to this address (DNS
    // rebinding) reaches the console with that name in `Host`: only the
    // names of this address are answered.
    let mut hosts = allowed_hosts(local);
    hosts.extend(args.allow_host.iter().cloned());
    let options = options.allowed_hosts(hosts);
    say(format_args!("leasehold console for {} at http://{local}/", db.name));
    say(format_args!("  {access}"));
    if !local.ip().is_loopback() {
        say(format_args!(
            "  listening beyond loopback (--allow-remote): plain HTTP, keep it behind a proxy with TLS"
        ));
    }
    say(format_args!("  Ctrl-C stops it"));
    let router = console::router(db.pool.clone(), options).layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES));
    serve(listener, router, args).await;
    say(format_args!("leasehold console stopped"));
    Ok(())
}

/// Accepts connections on `listener` and serves `router` on each until
/// Ctrl-C (or SIGTERM), then gives open connections [`SHUTDOWN_GRACE`] to
/// finish.
///
/// Unlike `axum::serve`, bounded against slow or idle clients: at most
/// `--max-connections` at once (a permit per connection), each with
/// `--header-timeout` to send its headers (and to send the next request on
/// a kept-alive connection) and `--connection-timeout` in all. When all
/// are taken, a new connection closes the oldest one that has not yet sent
/// a whole request head ([`Unproven`]): a slowloris attack holds only
/// connections that never finish their headers, so it cannot keep a
/// normal client (whose request arrives in one packet) waiting; with none
/// to close, the new connection waits for a free one (and the next ones
/// in the kernel's accept queue, no descriptor spent on them).
async fn serve(listener: tokio::net::TcpListener, router: axum::Router, args: &Args) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let permits = Arc::new(Semaphore::new(args.max_connections));
    let unproven = Arc::new(Unproven::default());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(args.header_timeout);
    let lifetime = args.connection_timeout;
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment
                    // rather than spin (what axum::serve does).
                    log_accept_error(&e);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                unproven.evict_oldest();
                tokio::select! {
                    () = &mut stop => break,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        // Never closed.
                        Err(_) => break,
                    },
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, mut evicted) = unproven.add();
        let io = Watched {
            inner: stream,
            tail: 0,
            proven: Some((unproven.clone(), id)),
        };
        let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(router.clone()));
        let conn = graceful.watch(conn);
        let unproven = unproven.clone();
        tokio::spawn(async move {
            // Errors (a client gone, a header timeout) concern that client
            // only; a connection past its lifetime, or closed to make room,
            // is dropped, which closes it.
            tokio::select! {
                _ = tokio::time::timeout(lifetime, conn) => {}
                Ok(()) = &mut evicted => {}
            }
            unproven.remove(id);
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
}

/// The connections that have not yet sent a whole request head, oldest
/// first, each with the way to close it.
#[derive(Default)]
struct Unproven {
    inner: std::sync::Mutex<(u64, std::collections::BTreeMap<u64, tokio::sync::oneshot::Sender<()>>)>,
}

impl Unproven {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, (u64, std::collections::BTreeMap<u64, tokio::sync::oneshot::Sender<()>>)> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new connection: its id, and what resolves when it is to close.
    fn add(&self) -> (u64, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut inner = self.lock();
        inner.0 += 1;
        let id = inner.0;
        inner.1.insert(id, tx);
        (id, rx)
    }

    /// Connection `id` sent a whole request head, or closed.
    fn remove(&self, id: u64) {
        self.lock().1.remove(&id);
    }

    /// Closes the oldest connection still sending its first request head.
    fn evict_oldest(&self) {
        if let Some((_, tx)) = self.lock().1.pop_first() {
            let _ = tx.send(());
        }
    }
}

/// A connection's stream that notices the end of its first request head
/// (an empty line: CR LF CR LF), then leaves [`Unproven`].
struct Watched {
    inner: tokio::net::TcpStream,
    /// The last bytes read (up to 4), to find CR LF CR LF across reads.
    tail: u32,
    /// Until the head is complete: where to say so.
    proven: Option<(Arc<Unproven>, u64)>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.proven.is_some() {
            let mut tail = self.tail;
            let done = buf.filled()[before..].iter().any(|b| {
                tail = (tail << 8) | u32::from(*b);
                tail == u32::from_be_bytes(*b"\r\n\r\n")
            });
            self.tail = tail;
            if done && let Some((unproven, id)) = self.proven.take() {
                unproven.remove(id);
            }
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Logs a failed `accept` on standard error.
fn log_accept_error(e: &std::io::Error) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "leasehold console: accepting a connection: {e}"
    );
}

/// The `Host` values the console answers to when serving on `local`: the
/// address itself, and `localhost` and `[::1]` (or `127.0.0.1`) with its
/// port.
fn allowed_hosts(local: SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut hosts = vec![
        local.to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ];
    hosts.dedup();
    hosts
}

/// Prints a line to standard output, ignoring a closed one: a server must
/// not stop (or panic while stopping) because whoever started it stopped
/// reading.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// Connections the kernel completes and queues for the accept loop:
/// under a connection flood a full queue drops new handshakes, and a
/// dropped SYN is retried only after a second, so an operator's request
/// would wait that long. 4,096 instead of tokio's default 1,024; the
/// kernel caps it at `net.core.somaxconn` (4,096 on current Linux).
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as
/// `TcpListener::bind` sets, so a restarted console can bind at once).
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}
