//! How the embedding service configures the console.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;

/// Decides who the request's user is, for actions: `Some(name)` may act
/// (and is recorded as `name`), `None` reads only.
pub(crate) type Authorize = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Options for [`router`](super::router). Without [`authorize`](Self::authorize)
/// or [`token`](Self::token) the console is read-only.
///
/// ```
/// use std::time::Duration;
/// use leasehold::console::ConsoleOptions;
///
/// let options = ConsoleOptions::new()
///     .token(std::env::var("LEASEHOLD_CONSOLE_TOKEN").unwrap_or_default())
///     .refresh(Duration::from_secs(10));
/// ```
#[derive(Clone)]
pub struct ConsoleOptions {
    pub(crate) authorize: Option<Authorize>,
    pub(crate) token: Option<String>,
    pub(crate) refresh: Duration,
    pub(crate) fleet_window: Duration,
    pub(crate) max_concurrent_reads: usize,
    pub(crate) read_wait: Duration,
}

impl fmt::Debug for ConsoleOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleOptions")
            .field("authorize", &self.authorize.as_ref().map(|_| "<hook>"))
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .field("refresh", &self.refresh)
            .field("fleet_window", &self.fleet_window)
            .field("max_concurrent_reads", &self.max_concurrent_reads)
            .field("read_wait", &self.read_wait)
            .finish()
    }
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsoleOptions {
    /// Page views (and actions) that use the database at once, by default:
    /// see [`max_concurrent_reads`](Self::max_concurrent_reads).
    pub const DEFAULT_MAX_CONCURRENT_READS: usize = 1;

    /// How long a page view waits for its turn by default before the
    /// console answers "busy": see [`read_wait`](Self::read_wait).
    pub const DEFAULT_READ_WAIT: Duration = Duration::from_secs(1);

    /// Read-only, refreshing every 5 s, the fleet page looking back 15 min,
    /// one page view on the database at a time, waiting at most 1 s for it.
    pub fn new() -> Self {
        ConsoleOptions {
            authorize: None,
            token: None,
            refresh: Duration::from_secs(5),
            fleet_window: Duration::from_secs(15 * 60),
            max_concurrent_reads: Self::DEFAULT_MAX_CONCURRENT_READS,
            read_wait: Self::DEFAULT_READ_WAIT,
        }
    }

    /// Lets the users your hook names act: it sees each request's head
    /// (headers set by your authentication, a session cookie…) and returns
    /// the user's name, recorded with each action, or `None` for read-only.
    pub fn authorize(mut self, hook: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.authorize = Some(Arc::new(hook));
        self
    }

    /// Lets whoever types `token` into the console's login page act, under
    /// the name they give there (what `leasehold console` does with
    /// `LEASEHOLD_CONSOLE_TOKEN`). An empty token is ignored: read-only.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.token = (!token.is_empty()).then_some(token);
        self
    }

    /// How often open pages refresh themselves; `Duration::ZERO` never.
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// How far back the fleet page looks for holders (1 s to 7 days).
    pub fn fleet_window(mut self, window: Duration) -> Self {
        self.fleet_window = window;
        self
    }

    /// How many requests may use the database at once (at least 1; default
    /// [`DEFAULT_MAX_CONCURRENT_READS`](Self::DEFAULT_MAX_CONCURRENT_READS)).
    /// Each holds at most one of the pool's connections at a time, for the
    /// statements of one page (or one action), so the console never holds
    /// more than `n` of them however many people (or scripts) load its
    /// pages. The rest of the pool stays with the service and, on a pool
    /// the runtime shares, with the heartbeats that keep runs' leases: a
    /// console that could take every connection would let a burst of page
    /// views cancel runs at their deadline.
    ///
    /// One is enough for a few operators (a page is a few milliseconds of
    /// database work, even over many keys); raise it only with the pool:
    /// keep `n` below the pool's size minus what the service and its jobs
    /// use at once. Requests beyond `n` wait their turn, in arrival order,
    /// for at most [`read_wait`](Self::read_wait).
    pub fn max_concurrent_reads(mut self, n: usize) -> Self {
        self.max_concurrent_reads = n.max(1);
        self
    }

    /// How long a request waits for its turn on the database (see
    /// [`max_concurrent_reads`](Self::max_concurrent_reads)) before the
    /// console answers "busy, retry" instead: HTTP 503 with `Retry-After`,
    /// and a page that retries by itself. Default
    /// [`DEFAULT_READ_WAIT`](Self::DEFAULT_READ_WAIT). A pool that has no
    /// connection for the console within its own `acquire_timeout` gets
    /// the same answer.
    pub fn read_wait(mut self, wait: Duration) -> Self {
        self.read_wait = wait;
        self
    }
}
