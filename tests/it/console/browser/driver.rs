//! A headless Chromium driven over WebDriver: chromedriver started by the
//! test on a free loopback port, Chromium with a fresh profile, both gone
//! when the [`Browser`] is dropped (even on a panic).
//!
//! Both come from Debian's packages `chromium` and `chromium-driver`, which
//! `scripts/test.sh` installs when they are missing. Nothing is downloaded
//! at test time, and Chromium is told not to reach the network by itself
//! (this machine's network refuses it).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// The WebDriver server (Debian package `chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The browser (Debian package `chromium`).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How to fix a machine without them, in every failure to start them.
const HOW_TO_FIX: &str = "run `bash scripts/test.sh` (it installs them), or \
     `apt-get install chromium chromium-driver`";

/// chromedriver's stderr, in the scratch directory.
const STDERR: &str = "chromedriver.stderr";

/// How long chromedriver may take to listen, and Chromium to start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Window size, so that pages (and screenshots) lay out the same everywhere.
pub const WIDTH: u32 = 1280;
/// See [`WIDTH`].
pub const HEIGHT: u32 = 800;

/// The arguments Chromium runs with. The background-networking flags keep
/// it from calling out (updates, sync, field trials), which a closed
/// network refuses.
pub fn chromium_args(profile: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        // A name an attacker re-points at loopback (DNS rebinding), without
        // a DNS server: the console must refuse to answer to it.
        "--host-resolver-rules=MAP rebind.attacker.example 127.0.0.1",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--window-size={WIDTH},{HEIGHT}"));
    args.push(format!("--user-data-dir={}", profile.display()));
    args
}

/// A chromedriver process, its Chromium session and their scratch directory.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Driver,
}

/// The chromedriver process (in a process group of its own, which Chromium
/// joins) and the scratch directory; dropping it kills the group and
/// deletes the directory.
struct Driver {
    child: Child,
    dir: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session. Panics, naming
    /// the packages and `scripts/test.sh`, when they are not installed.
    pub async fn start() -> Browser {
        for (path, package) in [(CHROMEDRIVER, "chromium-driver"), (CHROMIUM, "chromium")] {
            assert!(
                Path::new(path).exists(),
                "{path} not found (Debian package `{package}`): the console's browser test needs \
                 Chromium and chromedriver; {HOW_TO_FIX}"
            );
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "leasehold-browser-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let profile = dir.join("profile");
        std::fs::create_dir_all(&profile).expect("create the browser's scratch directory");
        let log = dir.join("chromedriver.log");
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // What it says before its log is open goes to stderr only.
            .stderr(leasehold_testkit::child::stderr_file(&dir.join(STDERR)))
            // Its own process group, which the Chromium processes it starts
            // inherit: dropping the Driver kills them all by that id.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER}: {e}; {HOW_TO_FIX}"));
        let mut driver = Driver { child, dir };
        driver.wait_listening(port, &log);

        let mut options = serde_json::Map::new();
        options.insert("binary".into(), json!(CHROMIUM));
        options.insert("args".into(), json!(chromium_args(&profile)));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), serde_json::Value::Object(options));
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let url = format!("http://127.0.0.1:{port}");
        let connect = builder.connect(&url);
        let client = match tokio::time::timeout(START_TIMEOUT, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!(
                "chromedriver could not start {CHROMIUM}: {e}\n--- chromedriver log\n{}",
                driver.log_tail(&log)
            ),
            Err(_) => panic!(
                "{CHROMIUM} did not start within {START_TIMEOUT:?}\n--- chromedriver log\n{}",
                driver.log_tail(&log)
            ),
        };
        set_viewport(&client, WIDTH, HEIGHT).await;
        Browser { client, driver }
    }

    /// Ends the session (chromedriver quits Chromium), then stops
    /// chromedriver. Dropping the browser instead kills both.
    pub async fn quit(self) {
        let Browser { client, driver } = self;
        let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
        drop(driver);
    }
}

impl Driver {
    /// Waits until chromedriver accepts connections on `port`, or panics
    /// with its log if it exits or does not within [`START_TIMEOUT`].
    fn wait_listening(&mut self, port: u16, log: &Path) {
        let deadline = Instant::now() + START_TIMEOUT;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{CHROMEDRIVER} exited ({status}) before listening on port {port}\n--- its log\n{}",
                    self.log_tail(log)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{CHROMEDRIVER} did not listen on port {port} within {START_TIMEOUT:?}\n--- its log\n{}",
                self.log_tail(log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines of chromedriver's log, then of its stderr, for
    /// failure messages.
    fn log_tail(&self, log: &Path) -> String {
        format!(
            "{}\n--- its stderr\n{}",
            leasehold_testkit::child::tail(log, 30),
            leasehold_testkit::child::tail(&self.dir.join(STDERR), 30)
        )
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: chromedriver and whatever Chromium processes are
        // left in it (none after a clean `quit`).
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sizes the window so that the page's viewport is `width` x `height`
/// (the window's own frame, if any, comes on top).
pub async fn set_viewport(client: &Client, width: u32, height: u32) {
    client
        .set_window_size(width, height)
        .await
        .expect("set the window size");
    let inner = client
        .execute("return [window.innerWidth, window.innerHeight]", vec![])
        .await
        .expect("read the viewport size");
    let inner = |i: usize| inner[i].as_u64().and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
    let (frame_w, frame_h) = (width.saturating_sub(inner(0)), height.saturating_sub(inner(1)));
    if frame_w > 0 || frame_h > 0 {
        client
            .set_window_size(width + frame_w, height + frame_h)
            .await
            .expect("set the window size");
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("bind a free loopback port")
        .port()
}
