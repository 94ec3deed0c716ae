//! A loopback TCP proxy in front of a database, which can delay, blackhole
//! or reset its traffic: the faults of the cancellation and chaos tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to traffic right now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Forward at once.
    Normal,
    /// Hold every chunk this long before forwarding it (both directions).
    Delay(Duration),
    /// Forward nothing and read nothing (TCP backpressure does the rest):
    /// a partition. New connections wait too.
    Blackhole,
}

struct State {
    upstream: Mutex<(String, u16)>,
    mode: watch::Sender<Mode>,
    reset: watch::Sender<u64>,
}

/// The proxy handle.
#[derive(Clone)]
pub struct Proxy {
    state: Arc<State>,
    /// The loopback port it listens on.
    pub port: u16,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `host:port`.
    pub async fn start(host: &str, port: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local = listener.local_addr()?.port();
        let state = Arc::new(State {
            upstream: Mutex::new((host.to_owned(), port)),
            mode: watch::channel(Mode::Normal).0,
            reset: watch::channel(0).0,
        });
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        tokio::spawn(connection(client, accept_state.clone()));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        Ok(Proxy { state, port: local })
    }

    /// Changes what the proxy does from now on, to every connection.
    pub fn set(&self, mode: Mode) {
        self.state.mode.send_replace(mode);
    }

    /// Forwards new connections to `host:port` from now on (a failover's
    /// address switch); open connections keep their server until they close
    /// or are [reset](Proxy::reset).
    pub fn set_upstream(&self, host: &str, port: u16) {
        *self.state.upstream.lock().unwrap_or_else(|e| e.into_inner()) = (host.to_owned(), port);
    }

    /// Closes every open connection with a TCP reset (RST).
    pub fn reset(&self) {
        self.state.reset.send_modify(|n| *n += 1);
    }
}

async fn connection(client: TcpStream, state: Arc<State>) {
    let mut reset = state.reset.subscribe();
    reset.mark_unchanged();
    let mut mode = state.mode.subscribe();
    // A partition also stalls new connections.
    while *mode.borrow_and_update() == Mode::Blackhole {
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { return },
            _ = reset.changed() => return,
        }
    }
    let upstream = state.upstream.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let server = match TcpStream::connect((upstream.0.as_str(), upstream.1)).await {
        Ok(server) => server,
        Err(_) => return, // the server is down: the client sees the connection close
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let was_reset = tokio::select! {
        _ = pump(&mut client_read, &mut server_write, state.mode.subscribe()) => false,
        _ = pump(&mut server_read, &mut client_write, state.mode.subscribe()) => false,
        _ = reset.changed() => true,
    };
    if was_reset {
        // SO_LINGER 0: closing sends RST, as when a middlebox drops the flow.
        let _ = client_read.as_ref().set_zero_linger();
        let _ = server_read.as_ref().set_zero_linger();
    }
}

async fn pump(from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        loop {
            let current = *mode.borrow_and_update();
            match current {
                Mode::Normal => break,
                Mode::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Mode::Blackhole => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
