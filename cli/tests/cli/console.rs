//! `leasehold console`: serves the console on loopback until stopped;
//! refuses other addresses without `--allow-remote`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use leasehold::store::LeaseStore;

use super::{LONG, assert_exit, leasehold, migrated_db, released_row, stderr, url};

/// A running `leasehold console`, killed when dropped.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT/`, as it printed.
    url: String,
    /// What it printed up to the URL and the access line.
    banner: String,
    /// The lines it prints later.
    lines: mpsc::Receiver<String>,
}

impl Served {
    /// Starts `leasehold console ARGS` on the database at `db_url` (no
    /// token unless `token`), and waits for the URL it serves.
    fn start(db_url: &str, token: Option<&str>, args: &[&str]) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.arg("console")
            .args(args)
            .env("DATABASE_URL", db_url)
            .env_remove("LEASEHOLD_CONSOLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(token) = token {
            cmd.env("LEASEHOLD_CONSOLE_TOKEN", token);
        }
        let mut child = cmd.spawn().expect("the CLI binary runs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Read to the end even when nobody listens any more: a closed
            // pipe would fail the console's next line.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut served = Served {
            child,
            url: String::new(),
            banner: String::new(),
            lines: rx,
        };
        // The URL line, then the line that says who may act.
        for _ in 0..2 {
            let line = served
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("leasehold console printed no URL; so far:\n{}", served.banner));
            if let Some(at) = line.find("http://") {
                served.url = line[at..].trim().to_owned();
            }
            served.banner.push_str(&line);
            served.banner.push('\n');
        }
        assert!(served.url.starts_with("http://127.0.0.1:"), "{}", served.banner);
        served
    }

    /// `GET path` with a plain HTTP/1.1 request: (status line, body).
    fn get(&self, path: &str) -> (String, String) {
        let authority = self.authority();
        self.get_as(&authority, path)
    }

    /// The `IP:PORT` it serves on.
    fn authority(&self) -> String {
        self.url.trim_start_matches("http://").trim_end_matches('/').to_owned()
    }

    /// `GET path` with `host` in the `Host` header: (status line, body).
    fn get_as(&self, host: &str, path: &str) -> (String, String) {
        let mut stream = TcpStream::connect(self.authority()).expect("connect to the console");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .expect("send the request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read the response");
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head.lines().next().unwrap_or("").to_owned();
        (status, body.to_owned())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_serves_the_leases_page_on_loopback_until_stopped() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "console:probe", "web-1").await;

    let mut served = Served::start(&url(&db), None, &["--listen", "127.0.0.1:0"]);
    assert!(served.banner.contains("read-only"), "{}", served.banner);
    let (status, body) = served.get("/");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(body.contains("<table id=\"leases\">"), "{body}");
    assert!(body.contains("data-key=\"console:probe\""), "{body}");
    // Read-only: no action on the key's page.
    let (status, body) = served.get("/key?key=console%3Aprobe");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(
        !body.contains("id=\"action-"),
        "read-only, yet actions are offered: {body}"
    );

    // SIGTERM (like Ctrl-C) stops it cleanly.
    let pid = served.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = served.child.try_wait().expect("wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "still serving 10 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    // Everything it printed: the reader thread forwards lines until the
    // pipe closes, which may be a moment after the process has exited.
    let mut rest = Vec::new();
    while let Ok(line) = served.lines.recv_timeout(Duration::from_secs(10)) {
        rest.push(line);
    }
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_with_a_token_offers_a_login() {
    let db = migrated_db().await;
    let served = Served::start(&url(&db), Some(TOKEN), &["--listen", "127.0.0.1:0", "--refresh", "off"]);
    assert!(served.banner.contains("after logging in"), "{}", served.banner);
    let (status, body) = served.get("/login");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(body.contains("id=\"token\""), "{body}");
    assert!(!body.contains(TOKEN), "the token is never shown: {body}");
}

/// A console token as `openssl rand -hex 16` makes them: 128 bits.
const TOKEN: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_answers_only_its_own_host_names() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "console:probe", "web-1").await;
    let served = Served::start(
        &url(&db),
        Some(TOKEN),
        &["--listen", "127.0.0.1:0", "--allow-host", "ops.example.com"],
    );
    let port = served.authority().rsplit(':').next().expect("a port").to_owned();

    // DNS rebinding: the attacker's name, pointed at 127.0.0.1.
    for path in ["/", "/login"] {
        let (status, body) = served.get_as(&format!("rebind.attacker.example:{port}"), path);
        assert!(status.contains(" 421 "), "{path}: {status}\n{body}");
        assert!(!body.contains("console:probe") && !body.contains("csrf"), "{body}");
    }
    for host in [
        served.authority(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "ops.example.com".to_owned(),
    ] {
        let (status, body) = served.get_as(&host, "/");
        assert!(status.contains(" 200 "), "{host}: {status}");
        assert!(body.contains("console:probe"), "{host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refuses_a_guessable_token() {
    let db = migrated_db().await;
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["console", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", url(&db))
        .env("LEASEHOLD_CONSOLE_TOKEN", "demo")
        .stdin(Stdio::null())
        .output()
        .expect("the CLI binary runs");
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("openssl rand -hex 32") && err.contains("128"), "{err}");
    assert!(!err.contains("demo"), "the token is not shown: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refuses_a_non_loopback_address_without_allow_remote_and_a_bound_beyond_its_pool() {
    let url = Some("postgres://u@127.0.0.1:1/d");
    for (args, says) in [
        (&["console", "--listen", "0.0.0.0:0"][..], "--allow-remote"),
        (&["console", "--listen", "[::]:8080"], "--allow-remote"),
        (&["console", "--listen", "nowhere"], "expected IP:PORT"),
        (&["console", "--max-concurrent-reads", "0"], "between 1 and 2"),
        (&["console", "--max-concurrent-reads", "3"], "between 1 and 2"),
    ] {
        let out = leasehold(url, args).await;
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains(args[2]), "{args:?}: the message names the value: {err}");
    }
}

/// The flood of the console's starvation report, on the CLI's console: 400
/// clients at once, 600 views of the leases page over 10,000 keys. Prints
/// how many were served and how many got the busy page, and the latency;
/// fails on any other answer (the pool's raw `503 pool timed out` was one).
/// A measurement: `cargo test -p leasehold-cli --test cli -- --ignored
/// --nocapture console_under_a_flood`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 10,000 keys and 600 requests, about 20 s"]
async fn console_under_a_flood_of_400_concurrent_views_answers_pages_or_busy() {
    const KEYS: usize = 10_000;
    const CLIENTS: usize = 400;
    const VIEWS: usize = 600;
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    let mut claims = tokio::task::JoinSet::new();
    for chunk in 0..8 {
        let store = store.clone();
        claims.spawn(async move {
            for i in (chunk..KEYS).step_by(8) {
                store.claim(&format!("tenant:{i:05}"), "web-1", LONG).await.unwrap();
            }
        });
    }
    claims.join_all().await;

    // A pool timeout shorter than the queue such a flood builds up on 2
    // connections (about 6 s here): what a slower server shows at the
    // default 10 s.
    let served = Served::start(&url(&db), None, &["--listen", "127.0.0.1:0", "--connect-timeout", "4s"]);
    let authority = served
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let clients = Arc::new(tokio::sync::Semaphore::new(CLIENTS));
    let mut views = tokio::task::JoinSet::new();
    for _ in 0..VIEWS {
        let (clients, authority) = (clients.clone(), authority.clone());
        views.spawn(async move {
            let _client = clients.acquire().await.unwrap();
            let asked = std::time::Instant::now();
            let response = raw_get(&authority, "/").await;
            (asked.elapsed(), response)
        });
    }
    let (mut latencies, mut pages, mut busy, mut other) = (Vec::new(), 0, 0, Vec::new());
    for (latency, (status, head, body)) in views.join_all().await {
        latencies.push(latency);
        if status.contains(" 200 ") && body.contains("<table id=\"leases\">") {
            pages += 1;
        } else if status.contains(" 503 ")
            && head.to_ascii_lowercase().contains("retry-after: 2")
            && body.contains("id=\"busy\"")
        {
            busy += 1;
        } else {
            other.push(format!("{status}: {}", body.chars().take(300).collect::<String>()));
        }
    }
    latencies.sort();
    let at = |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1];
    println!(
        "measured: CLI console, {CLIENTS} concurrent views of {VIEWS}, {KEYS} keys: {pages} pages, {busy} busy, \
         {} other; p50 {:?}, p99 {:?}, max {:?}",
        other.len(),
        at(0.50),
        at(0.99),
        at(1.0)
    );
    assert!(
        other.is_empty(),
        "{} answers neither a page nor busy; first: {:?}",
        other.len(),
        other.first()
    );
}

/// `GET path` over a new connection: (status line, head, body).
async fn raw_get(authority: &str, path: &str) -> (String, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect to the console");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send the request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read the response");
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or("").to_owned();
    (status, head.to_owned(), body.to_owned())
}

/// Opens a connection to `authority` that sends `GET / HTTP/1.1` and then
/// one header byte every 200 ms, never finishing its headers (slowloris).
/// Resolves to how long the server kept it open once connected (until a
/// read saw the end or an error, or a write failed), or `None` if it was
/// still open after `give_up`.
async fn slowloris(authority: String, give_up: Duration) -> Option<Duration> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect to the console");
    let opened = std::time::Instant::now();
    let (mut read, mut write) = stream.into_split();
    let dribble = async move {
        if write.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").await.is_err() {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b"a").await.is_err() {
                return;
            }
        }
    };
    let closed = async move {
        let mut buf = [0u8; 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // A response (408, say) before the close.
                Ok(_) => {}
            }
        }
    };
    let ended = async {
        tokio::select! {
            () = dribble => {}
            () = closed => {}
        }
    };
    tokio::time::timeout(give_up, ended)
        .await
        .ok()
        .map(|()| opened.elapsed())
}

/// A connection that connects and sends nothing; resolves like
/// [`slowloris`].
async fn silent(authority: String, give_up: Duration) -> Option<Duration> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect to the console");
    let opened = std::time::Instant::now();
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(give_up, closed)
        .await
        .ok()
        .map(|()| opened.elapsed())
}

/// Issue 42: 50 clients dribbling their headers a byte at a time stayed
/// open as long as they liked (`axum::serve` sets no header timer); 20,000
/// exhausted the file descriptors. With `--header-timeout 1s` each is closed
/// about a second after it connected, others are answered meanwhile, and a
/// kept-alive connection left idle is closed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_closes_slowloris_connections_after_the_header_timeout_and_answers_others() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SLOW: usize = 50;
    let db = migrated_db().await;
    let served = Served::start(
        &url(&db),
        None,
        &["--listen", "127.0.0.1:0", "--refresh", "off", "--header-timeout", "1s"],
    );
    let authority = served.authority();
    let give_up = Duration::from_secs(8);
    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..SLOW {
        slow.spawn(slowloris(authority.clone(), give_up));
    }
    // While they dribble: a normal client is answered, promptly.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = std::time::Instant::now();
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), raw_get(&authority, "/"))
        .await
        .expect("an answer within 5 s while the slow clients are open");
    let answered = asked.elapsed();
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(answered < Duration::from_secs(2), "answered after {answered:?}");

    let mut open_for = Vec::new();
    for kept in slow.join_all().await {
        let kept = kept.unwrap_or_else(|| panic!("a slowloris connection still open after {give_up:?}"));
        open_for.push(kept);
    }
    open_for.sort();
    let (first, last) = (open_for[0], open_for[SLOW - 1]);
    println!(
        "measured: {SLOW} slowloris connections, --header-timeout 1s: closed after {first:?}..{last:?}; \
         a GET meanwhile answered in {answered:?}"
    );
    assert!(
        first >= Duration::from_millis(800),
        "closed before the timeout: {first:?}"
    );
    assert!(last < Duration::from_secs(3), "closed only after {last:?}");

    // A kept-alive connection, idle after its answer, is closed as well.
    let mut idle = tokio::net::TcpStream::connect(&authority).await.expect("connect");
    let request = format!("GET / HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    idle.write_all(request.as_bytes()).await.expect("send the request");
    let idle_since = std::time::Instant::now();
    let mut response = Vec::new();
    let idle_closed = tokio::time::timeout(give_up, idle.read_to_end(&mut response)).await;
    let idle_open = idle_since.elapsed();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
    assert!(
        idle_closed.is_ok(),
        "an idle kept-alive connection still open after {give_up:?}"
    );
    assert!(
        idle_open < Duration::from_secs(3),
        "the idle connection closed after {idle_open:?}"
    );

    println!("measured: an idle kept-alive connection closed after {idle_open:?}");
}

/// With `--max-connections 3` taken by clients that send nothing, a fourth
/// waits (accepted only when one of them closes, after the 1 s header
/// timeout) and is then answered: neither refused nor held forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_at_max_connections_closes_the_oldest_without_a_request_to_answer_a_new_one() {
    const MAX: usize = 3;
    let db = migrated_db().await;
    let served = Served::start(
        &url(&db),
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--refresh",
            "off",
            "--max-connections",
            "3",
            "--header-timeout",
            "5s",
        ],
    );
    let authority = served.authority();
    let give_up = Duration::from_secs(8);
    let mut held = Vec::new();
    for _ in 0..MAX {
        held.push(tokio::spawn(silent(authority.clone(), give_up)));
        // Connected in order: the first is the oldest.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let asked = std::time::Instant::now();
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(2), raw_get(&authority, "/"))
        .await
        .expect("an answer at once: a connection without a request makes room");
    let answered = asked.elapsed();
    assert!(status.contains(" 200 "), "{status}\n{body}");
    println!("measured: --max-connections {MAX} all held by silent clients: the next GET answered after {answered:?}");
    assert!(answered < Duration::from_secs(1), "answered only after {answered:?}");
    let mut kept: Vec<Option<Duration>> = Vec::new();
    for h in held {
        kept.push(h.await.expect("the silent client"));
    }
    // The oldest was closed to make room, well before the header timeout;
    // the others at the header timeout.
    let first = kept[0].expect("closed");
    assert!(first < Duration::from_secs(2), "the oldest closed only after {first:?}");
    for later in &kept[1..] {
        let later = later.expect("closed at the header timeout");
        assert!(
            later >= Duration::from_secs(4),
            "a newer silent connection closed after {later:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_sets_a_secure_cookie_only_when_told_the_connection_is_tls() {
    let db = migrated_db().await;
    // (flags, X-Forwarded-Proto sent, Secure expected)
    let cases: [(&[&str], Option<&str>, bool); 5] = [
        (&[], None, false),
        (&[], Some("https"), false),
        (&["--trust-forwarded-proto"], Some("https"), true),
        (&["--trust-forwarded-proto"], Some("http"), false),
        (&["--secure-cookie"], None, true),
    ];
    for (flags, proto, secure) in cases {
        let mut args = vec!["--listen", "127.0.0.1:0", "--refresh", "off"];
        args.extend_from_slice(flags);
        let served = Served::start(&url(&db), Some(TOKEN), &args);
        let authority = served.authority();
        let mut headers = vec![("Sec-Fetch-Site", "same-origin")];
        if let Some(proto) = proto {
            headers.push(("X-Forwarded-Proto", proto));
        }
        let (_, _, login) = exchange(&authority, "GET", "/login", &headers, "");
        let form = format!("name=alice&token={TOKEN}&csrf={}", csrf_of(&login));
        let (status, head, body) = exchange(&authority, "POST", "/login", &headers, &form);
        assert!(status.contains(" 303 "), "{flags:?} {proto:?}: {status}\n{body}");
        let cookie = header_of(&head, "set-cookie").expect("a session cookie").to_owned();
        assert_eq!(
            cookie.contains("; Secure"),
            secure,
            "{flags:?}, X-Forwarded-Proto {proto:?}: {cookie}"
        );
        assert_eq!(cookie.starts_with("__Host-leasehold_console="), secure, "{cookie}");
        if secure {
            // The session works on the next request that arrives the same way.
            let session = cookie.split(';').next().unwrap_or_default().to_owned();
            headers.push(("Cookie", &session));
            let (_, _, page) = exchange(&authority, "GET", "/", &headers, "");
            assert!(page.contains("acting as"), "{flags:?}: {page}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refuses_a_connection_limit_of_zero() {
    let out = leasehold(
        Some("postgres://u@127.0.0.1:1/d"),
        &["console", "--max-connections", "0"],
    )
    .await;
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("--max-connections 0") && err.contains("between 1 and"),
        "{err}"
    );
    let out = leasehold(
        Some("postgres://u@127.0.0.1:1/d"),
        &["console", "--header-timeout", "10"],
    )
    .await;
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("write \"10s\""), "{}", stderr(&out));
}

/// A request body beyond 64 KiB (a console form is well under 1 KiB) is
/// refused with 413 before the form is read, not read up to axum's 2 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refuses_a_request_body_over_64_kib() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = migrated_db().await;
    let served = Served::start(&url(&db), Some(TOKEN), &["--listen", "127.0.0.1:0", "--refresh", "off"]);
    let authority = served.authority();
    let body = format!("name=ops&token={}", "a".repeat(100 * 1024));
    let mut stream = tokio::net::TcpStream::connect(&authority).await.expect("connect");
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send the head");
    // The server may answer and close before reading it all.
    let _ = stream.write_all(body.as_bytes()).await;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response);
    let status = response.lines().next().unwrap_or("");
    assert!(status.contains(" 413 "), "{status}\n{response}");
}

/// A client that sends its headers in time, then its body a byte at a time
/// is not held by `--header-timeout`: `--connection-timeout 1s` closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_closes_a_slow_body_after_the_connection_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = migrated_db().await;
    let served = Served::start(
        &url(&db),
        Some(TOKEN),
        &[
            "--listen",
            "127.0.0.1:0",
            "--refresh",
            "off",
            "--connection-timeout",
            "1s",
        ],
    );
    let authority = served.authority();
    let stream = tokio::net::TcpStream::connect(&authority).await.expect("connect");
    let opened = std::time::Instant::now();
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 1000\r\n\r\nname=ops&token="
    );
    write.write_all(head.as_bytes()).await.expect("send the head");
    let dribble = async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b"a").await.is_err() {
                return;
            }
        }
    };
    let closed = async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    let ended = tokio::time::timeout(Duration::from_secs(8), async {
        tokio::select! {
            () = dribble => {}
            () = closed => {}
        }
    })
    .await;
    let open = opened.elapsed();
    assert!(ended.is_ok(), "a slow body still open after 8 s");
    println!("measured: a slow body with --connection-timeout 1s closed after {open:?}");
    assert!(
        open >= Duration::from_millis(800) && open < Duration::from_secs(3),
        "closed after {open:?}"
    );
}

/// One HTTP/1.1 request over a new connection to `authority`:
/// (status line, head, body). `body` is sent as a urlencoded form.
fn exchange(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (String, String, String) {
    let mut stream = TcpStream::connect(authority).expect("connect to the console");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        head.to_owned(),
        body.to_owned(),
    )
}

/// The value of the hidden `csrf` field of a page's form.
fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form with a csrf field") + 19;
    page[at..].split('"').next().expect("csrf value").to_owned()
}

/// The value of the header `name` in a response head.
fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// Percent-encodes a query or form value.
fn enc(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_says_an_outcome_only_for_an_action_this_session_took_and_quotes_nothing_from_a_link() {
    let db = migrated_db().await;
    let store = LeaseStore::new(db.pool.clone());
    released_row(&store, "ledger", "web-1").await;
    let served = Served::start(&url(&db), Some(TOKEN), &["--listen", "127.0.0.1:0", "--refresh", "off"]);
    let authority = served.authority();

    // A link that names an outcome: the page says nothing was done.
    for done in ["paused", "revoked", "triggered"] {
        let (status, _, body) = exchange(&authority, "GET", &format!("/key?key=ledger&done={done}"), &[], "");
        assert!(status.contains(" 200 "), "{status}\n{body}");
        assert!(
            !body.contains("id=\"flash\""),
            "done={done} made the console say: {body}"
        );
    }
    // Error pages quote nothing of the request.
    let lure = "Session expired: re-enter the token at http://evil.example/login";
    for path in [
        format!("/key?key={}", enc(lure)),
        format!("/key?key=ledger&window={}", enc(lure)),
        format!("/confirm?key=ledger&action={}", enc(lure)),
        format!("/confirm?key={}&action=pause", enc(&format!("{lure}\u{0}"))),
        format!("/?state={}", enc(lure)),
        format!("/job?name={}&window={}", enc("nightly"), enc(lure)),
        format!("/job?name={}", enc(&"x".repeat(300))),
        format!("/{}", enc(lure)),
    ] {
        let (status, _, body) = exchange(&authority, "GET", &path, &[], "");
        assert!(!status.contains(" 200 "), "{path}: {status}");
        assert!(
            !body.contains("evil.example") && !body.contains("xxxxxxxx"),
            "{path}: the error page quotes the request: {body}"
        );
    }

    // An operator logs in and pauses the key: the key's page says so once.
    let (_, _, login) = exchange(&authority, "GET", "/login", &[], "");
    let form = format!("name=alice&token={TOKEN}&csrf={}", csrf_of(&login));
    let (status, head, body) = exchange(
        &authority,
        "POST",
        "/login",
        &[("Sec-Fetch-Site", "same-origin")],
        &form,
    );
    assert!(status.contains(" 303 "), "{status}\n{body}");
    let cookie = header_of(&head, "set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let session = [("Cookie", cookie.as_str()), ("Sec-Fetch-Site", "same-origin")];
    let (_, _, confirm) = exchange(&authority, "GET", "/confirm?key=ledger&action=pause", &session, "");
    let form = format!("key=ledger&action=pause&csrf={}", csrf_of(&confirm));
    let (status, head, body) = exchange(&authority, "POST", "/action", &session, &form);
    assert!(status.contains(" 303 "), "{status}\n{body}");
    let to = header_of(&head, "location").expect("a redirect").to_owned();
    assert_eq!(to, "/key?key=ledger", "the redirect names no outcome");
    let (_, _, page) = exchange(&authority, "GET", &to, &session, "");
    assert!(page.contains("<p id=\"flash\">Paused.</p>"), "{page}");
    let (_, _, again) = exchange(&authority, "GET", &to, &session, "");
    assert!(!again.contains("id=\"flash\""), "shown once: {again}");
    // Nobody else sees it, even on their first view after the action.
    let (status, head, _) = exchange(&authority, "POST", "/action", &session, &form);
    assert!(status.contains(" 303 "), "{head}");
    let (_, _, stranger) = exchange(&authority, "GET", &to, &[], "");
    assert!(!stranger.contains("id=\"flash\""), "another client saw it: {stranger}");
    let (_, _, page) = exchange(&authority, "GET", &to, &session, "");
    assert!(
        page.contains("id=\"flash\""),
        "the actor's own view still shows it: {page}"
    );
}
