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
}

impl fmt::Debug for ConsoleOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleOptions")
            .field("authorize", &self.authorize.as_ref().map(|_| "<hook>"))
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .field("refresh", &self.refresh)
            .field("fleet_window", &self.fleet_window)
            .finish()
    }
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsoleOptions {
    /// Read-only, refreshing every 5 s, the fleet page looking back 15 min.
    pub fn new() -> Self {
        ConsoleOptions {
            authorize: None,
            token: None,
            refresh: Duration::from_secs(5),
            fleet_window: Duration::from_secs(15 * 60),
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
}
