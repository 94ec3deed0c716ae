//! `leasehold console`: serves the console on loopback until stopped;
//! refuses other addresses without `--allow-remote`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use leasehold::LeaseStore;

use super::{assert_exit, leasehold, migrated_db, released_row, stderr, url};

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
        let authority = self.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let mut stream = TcpStream::connect(&authority).expect("connect to the console");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
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
    let served = Served::start(
        &url(&db),
        Some("s3cret"),
        &["--listen", "127.0.0.1:0", "--refresh", "0"],
    );
    assert!(served.banner.contains("after logging in"), "{}", served.banner);
    let (status, body) = served.get("/login");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(body.contains("id=\"token\""), "{body}");
    assert!(!body.contains("s3cret"), "the token is never shown: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refuses_a_non_loopback_address_without_allow_remote() {
    let url = Some("postgres://u@127.0.0.1:1/d");
    for (args, says) in [
        (&["console", "--listen", "0.0.0.0:0"][..], "--allow-remote"),
        (&["console", "--listen", "[::]:8080"], "--allow-remote"),
        (&["console", "--listen", "nowhere"], "expected IP:PORT"),
    ] {
        let out = leasehold(url, args).await;
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains(args[2]), "{args:?}: the message names the value: {err}");
    }
}
