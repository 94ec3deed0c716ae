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
///     .token(std::env::var("LEASEHOLD_CONSOLE_TOKEN").unwrap_or_default())?
///     .refresh(Duration::from_secs(10));
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Clone)]
pub struct ConsoleOptions {
    pub(crate) authorize: Option<Authorize>,
    pub(crate) token: Option<String>,
    pub(crate) refresh: Duration,
    pub(crate) fleet_window: Duration,
    pub(crate) max_concurrent_reads: usize,
    pub(crate) read_wait: Duration,
    pub(crate) allowed_hosts: Option<Vec<String>>,
    pub(crate) secure_cookie: bool,
    pub(crate) trust_forwarded_proto: bool,
    pub(crate) session_idle: Duration,
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
            .field("allowed_hosts", &self.allowed_hosts)
            .field("secure_cookie", &self.secure_cookie)
            .field("trust_forwarded_proto", &self.trust_forwarded_proto)
            .field("session_idle", &self.session_idle)
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

    /// How long a token login lasts without a request, by default: see
    /// [`session_idle`](Self::session_idle).
    pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

    /// How long a token login lasts at most, however active.
    pub const SESSION_MAX: Duration = Duration::from_secs(12 * 3600);

    /// The fewest bits of entropy a [`token`](Self::token) may have.
    pub const MIN_TOKEN_BITS: u32 = 128;

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
            allowed_hosts: None,
            secure_cookie: false,
            trust_forwarded_proto: false,
            session_idle: Self::DEFAULT_SESSION_IDLE,
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
    ///
    /// The token must be hard to guess: [`Error::InvalidInput`](crate::Error::InvalidInput)
    /// (which never shows it) when it has fewer than
    /// [`MIN_TOKEN_BITS`](Self::MIN_TOKEN_BITS) bits of entropy by its
    /// length and alphabet (32 hex digits, 22 letters and digits, or 20
    /// characters mixing in symbols), or fewer than 96 once repetition
    /// counts once and runs of 4 or more consecutive characters (`4567`,
    /// `dcba`, `aaaa`) count as one: `0123456789abcdef0123456789abcdef`
    /// and `Password1!Password1!…` are refused. Make one with
    /// `openssl rand -hex 32` (`-hex 16` is just enough).
    /// Failed logins are slowed down per name given at the login (a few
    /// tries, then a doubling wait up to a minute), so wrong tokens under
    /// one name do not lock out the operator under theirs, with a ceiling
    /// for all names together (100, then one a second); the comparison
    /// takes a time that does not depend on where the inputs differ.
    ///
    /// When [`authorize`](Self::authorize) is set too, a token login is
    /// recorded as `token:<name>`, so it can never act as (or take the CSRF
    /// token of) a user the hook names.
    pub fn token(mut self, token: impl Into<String>) -> crate::Result<Self> {
        let token = token.into();
        if !token.is_empty() {
            let raw = token_bits(&token);
            let patterned = patterned_bits(&token);
            if raw < Self::MIN_TOKEN_BITS || patterned < MIN_PATTERNED_BITS {
                let bits = raw.min(patterned);
                return Err(crate::Error::invalid(
                    "console token",
                    format_args!("<{} characters, not shown>", token.chars().count()),
                    format!(
                        "it has about {bits} bits of entropy (repeated or consecutive characters count for \
                         little), at least {} are needed: make one with `openssl rand -hex 32`",
                        Self::MIN_TOKEN_BITS
                    ),
                ));
            }
        }
        self.token = (!token.is_empty()).then_some(token);
        Ok(self)
    }

    /// Answers only requests whose `Host` (host and port, as the browser
    /// sends it: `ops.example.com`, `127.0.0.1:8080`, `[::1]:8080`) is one
    /// of `hosts`, compared without regard to case; any other gets 421
    /// Misdirected Request. This stops DNS rebinding: a page on
    /// `attacker.example` whose name the attacker re-points at the
    /// console's address reaches it with its own name in `Host`.
    ///
    /// Default: no check. Mounted in a service, the console is reached
    /// through the service's own front (its proxy or load balancer decides
    /// which names it serves, and the console cannot know them); set the
    /// names here when nothing in front checks them. `leasehold console`
    /// sets its listen address, `localhost` and `[::1]` with its port.
    pub fn allowed_hosts<I, H>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = H>,
        H: Into<String>,
    {
        self.allowed_hosts = Some(hosts.into_iter().map(|h| h.into().to_ascii_lowercase()).collect());
        self
    }

    /// Marks the login cookie `Secure` (sent over HTTPS only) and names it
    /// `__Host-leasehold_console` when the console is mounted at the root
    /// (`__Secure-leasehold_console` under a path), so an HTTP service on
    /// another port of the same host never receives it. Set it when the
    /// console is served over TLS, including behind a TLS-terminating
    /// proxy. Default off (plain HTTP on loopback); a request whose URI
    /// says `https` (HTTP/2 over TLS) gets the `Secure` cookie anyway, and
    /// so does one a trusted proxy marks ([`trust_forwarded_proto`](Self::trust_forwarded_proto)).
    pub fn secure_cookie(mut self, secure: bool) -> Self {
        self.secure_cookie = secure;
        self
    }

    /// Trusts the `X-Forwarded-Proto` header: a request carrying exactly
    /// `X-Forwarded-Proto: https` is taken to have reached the proxy over
    /// TLS, so its login cookie is `Secure` (named as with
    /// [`secure_cookie`](Self::secure_cookie)). Set it only when a proxy
    /// in front sets (overwrites) that header on every request and nothing
    /// reaches the console around it: any client can send the header
    /// itself. Default off: the header is ignored.
    pub fn trust_forwarded_proto(mut self, trust: bool) -> Self {
        self.trust_forwarded_proto = trust;
        self
    }

    /// How long a token login lasts without a request (default
    /// [`DEFAULT_SESSION_IDLE`](Self::DEFAULT_SESSION_IDLE), at least 1 s);
    /// it ends after [`SESSION_MAX`](Self::SESSION_MAX) however active.
    /// Open pages that refresh themselves keep it alive.
    pub fn session_idle(mut self, idle: Duration) -> Self {
        self.session_idle = idle.clamp(Duration::from_secs(1), Self::SESSION_MAX);
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

/// The fewest bits a [`token`](ConsoleOptions::token) must keep once
/// repetition and runs are discounted ([`patterned_bits`]): below
/// [`MIN_TOKEN_BITS`](ConsoleOptions::MIN_TOKEN_BITS), because a random
/// token has the odd run by chance (`…4567…` in hex), which must not
/// refuse it, while a made-up one (`0123…`, a word repeated) keeps far
/// fewer.
const MIN_PATTERNED_BITS: u32 = 96;

/// Consecutive characters that count as one in [`patterned_bits`]: code
/// points going up by one (`4567`, `defg`), down by one, or staying the
/// same (`aaaa`).
const MIN_RUN: usize = 4;

/// The bits of a token of `len` characters drawn from `alphabet`.
fn bits(len: usize, alphabet: f64) -> u32 {
    // Truncation is the intent: the estimate rounds down.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let bits = (len as f64 * alphabet.log2()).floor() as u32;
    bits
}

/// The size of the alphabet a token's characters come from: hex digits
/// 16, letters and digits 62, anything broader 94; a token made of fewer
/// than 8 distinct characters counts only those.
fn alphabet(chars: &[char]) -> f64 {
    let mut distinct = chars.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 8 {
        #[allow(clippy::cast_precision_loss)]
        return distinct.len() as f64;
    }
    if chars.iter().all(char::is_ascii_hexdigit) {
        16.0
    } else if chars.iter().all(char::is_ascii_alphanumeric) {
        62.0
    } else {
        94.0
    }
}

/// A token's entropy in bits, estimated from its length and the alphabet
/// its characters come from: hex digits 4 bits each, letters and digits
/// about 5.95, anything broader 6.55.
fn token_bits(token: &str) -> u32 {
    let chars: Vec<char> = token.chars().collect();
    bits(chars.len(), alphabet(&chars))
}

/// [`token_bits`] of what is left of the token once its patterns count
/// for little: a token that repeats a period (`abcdefghabcdefgh…`,
/// `Password1!Password1!…`, the last repetition possibly cut short)
/// counts one period, and in it a run of at least [`MIN_RUN`] consecutive
/// characters counts as one character.
fn patterned_bits(token: &str) -> u32 {
    let chars: Vec<char> = token.chars().collect();
    let n = chars.len();
    let period = (1..=n / 2)
        .find(|&p| (p..n).all(|i| chars[i] == chars[i - p]))
        .unwrap_or(n);
    let base = &chars[..period];
    let mut len = 0;
    let mut i = 0;
    while i < base.len() {
        let run = run_at(base, i);
        len += if run >= MIN_RUN { 1 } else { run };
        i += run;
    }
    bits(len, alphabet(&chars))
}

/// The length of the run of consecutive characters (see [`MIN_RUN`])
/// starting at `chars[start]`, at least 1 when `start` is in `chars`.
fn run_at(chars: &[char], start: usize) -> usize {
    let step = |i: usize| {
        let (a, b) = (u32::from(chars[i]), u32::from(chars[i + 1]));
        i64::from(b) - i64::from(a)
    };
    if start + 1 >= chars.len() {
        return chars.len().saturating_sub(start).min(1);
    }
    let d = step(start);
    if d.abs() > 1 {
        return 1;
    }
    let mut end = start + 1;
    while end + 1 < chars.len() && step(end) == d {
        end += 1;
    }
    end - start + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_tokens_are_refused_without_being_shown() {
        for weak in [
            "demo",
            "s3cret-token",
            "0123456789abcdef0123456789abcde",
            &"a".repeat(64),
            "0123456789abcdef0123456789abcdef",
            &"abcdefgh".repeat(4),
            &"Password1!".repeat(3),
            "Password1!Password1!Passw",
            "fedcba9876543210fedcba9876543210",
            "0123456789abcdef0f1e2d3c4b5a6978",
        ] {
            let err = ConsoleOptions::new().token(weak).expect_err(weak).to_string();
            assert!(err.contains("openssl rand -hex 32"), "{err}");
            assert!(!err.contains(weak), "the token is not shown: {err}");
        }
        for strong in [
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "Jx8-pQz!rT4vW9_kL2mN7b",
            "3f9a1c07d2e84b6fa0c59e1d7b3c28f4a6e0d9b1c5f7e2a3d8b4c6f0e1a2d3b5",
            // A random token with a chance run in it.
            "3f9a4567d2e84b6fa0c59e1d7b3c28f4",
        ] {
            assert!(ConsoleOptions::new().token(strong).is_ok(), "{strong}");
        }
        assert!(
            ConsoleOptions::new()
                .token("")
                .expect("empty: read-only")
                .token
                .is_none()
        );
    }

    /// What `openssl rand -hex 16` and `-hex 32` make always passes,
    /// whatever runs chance puts in it.
    #[test]
    fn random_hex_tokens_pass() {
        for _ in 0..20_000 {
            for bytes in [16, 32] {
                let token: String = (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
                assert!(ConsoleOptions::new().token(token.as_str()).is_ok(), "{token}");
            }
        }
    }
}
