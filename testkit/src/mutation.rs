//! Clause removal at run time: a proxy in front of this process's clusters
//! that rewrites one guard clause in every statement the tests send.
//!
//! `scripts/clause-removal.py` removes each guard clause of the lease SQL
//! in turn and runs the scenarios named with it. Rebuilding the test binary
//! for every mutation is most of that script's time, so it first tries a
//! mutation here, on one unmutated build: with `LEASEHOLD_MUTATION_MARKERS`
//! set, [`crate::server_options`] and [`crate::PgCluster::options`] hand out
//! the address of a rewriting proxy instead of the server's, which
//! replaces the clause on the wire exactly as the script does in the
//! source:
//!
//! - every `/* guard:<name> */` marker not named is removed first (with
//!   the spaces after it), so a clause that holds other markers matches;
//! - at each named marker, the clause `LEASEHOLD_MUTATION_OLD` must follow,
//!   compared word by word (any run of white space matches any other), and
//!   the marker and the clause are replaced by `LEASEHOLD_MUTATION_NEW`.
//!
//! Only guard markers written inside the SQL text reach the wire. What the
//! rewriter did is appended to the file `LEASEHOLD_MUTATION_REPORT`, one
//! line per kind of event: `applied`, or `mismatch <marker>` when a named
//! marker arrived without its clause after it. The script trusts a run
//! only when the mutation was applied and never mismatched; otherwise
//! (a marker outside the SQL text, a clause built by a macro, a statement
//! sent on a connection the rewriter does not see) it builds the mutant
//! from source as before.
//!
//! Plain threads and blocking sockets: the rewriter outlives the tokio
//! runtime of the test that started it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Mutex, OnceLock};

/// The mutation named by the environment, when clause removal runs one.
#[derive(Debug, Clone)]
struct Mutation {
    markers: Vec<String>,
    old: Vec<String>,
    new: String,
    report: Option<String>,
}

fn mutation() -> Option<&'static Mutation> {
    static MUTATION: OnceLock<Option<Mutation>> = OnceLock::new();
    MUTATION
        .get_or_init(|| {
            let markers = std::env::var("LEASEHOLD_MUTATION_MARKERS").ok()?;
            Some(Mutation {
                markers: markers.split_whitespace().map(str::to_owned).collect(),
                old: std::env::var("LEASEHOLD_MUTATION_OLD")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
                new: std::env::var("LEASEHOLD_MUTATION_NEW").unwrap_or_default(),
                report: std::env::var("LEASEHOLD_MUTATION_REPORT").ok(),
            })
        })
        .as_ref()
}

/// Whether this process runs a clause-removal mutation.
pub fn active() -> bool {
    mutation().is_some()
}

/// The port clients should connect to for the server on loopback port
/// `server`: a rewriter's while a mutation runs (one per server, started on
/// first use), otherwise `server` itself.
pub fn front(server: u16) -> u16 {
    if mutation().is_none() {
        return server;
    }
    static FRONTS: Mutex<Vec<(u16, u16)>> = Mutex::new(Vec::new());
    let mut fronts = FRONTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, port)) = fronts.iter().find(|(s, _)| *s == server) {
        return port;
    }
    let port = Rewriter::start(server)
        .unwrap_or_else(|e| panic!("starting the clause-removal rewriter in front of port {server}: {e}"));
    fronts.push((server, port));
    crate::live_clusters().push(port);
    port
}

/// The proxy: accepts on a free loopback port, forwards to the server.
struct Rewriter;

impl Rewriter {
    fn start(server: u16) -> io::Result<u16> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    if let Ok(upstream) = TcpStream::connect(("127.0.0.1", server)) {
                        connection(client, upstream);
                    }
                });
            }
        });
        Ok(port)
    }
}

fn connection(client: TcpStream, server: TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(mut client_back), Ok(mut server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let answers = std::thread::spawn(move || {
        let _ = io::copy(&mut server_in, &mut client_back);
        let _ = client_back.shutdown(Shutdown::Both);
    });
    let _ = requests(&client, &server);
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    let _ = answers.join();
}

const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;
const CANCEL_REQUEST: u32 = 80877102;

/// Forwards the client's messages, rewriting the SQL of simple queries
/// (`Q`) and of statements being prepared (`P`).
fn requests(mut client: &TcpStream, mut server: &TcpStream) -> io::Result<()> {
    // Untyped messages until the startup message: an SSL or GSS request
    // (the server answers one byte, forwarded by the other direction) or
    // a cancel request (the whole conversation).
    loop {
        let mut len = [0u8; 4];
        client.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        client.read_exact(&mut body)?;
        server.write_all(&(len as u32).to_be_bytes())?;
        server.write_all(&body)?;
        let code = body
            .get(..4)
            .map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        match code {
            SSL_REQUEST | GSSENC_REQUEST => continue,
            CANCEL_REQUEST => return Ok(()),
            _ => break,
        }
    }
    let Some(mutation) = mutation() else {
        io::copy(&mut client, &mut server)?;
        return Ok(());
    };
    loop {
        let mut head = [0u8; 5];
        client.read_exact(&mut head)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        client.read_exact(&mut body)?;
        let body = match head[0] {
            b'Q' => rewrite_at(body, 0, mutation),
            b'P' => match body.iter().position(|&b| b == 0) {
                Some(name_end) => rewrite_at(body, name_end + 1, mutation),
                None => body,
            },
            _ => body,
        };
        let mut out = Vec::with_capacity(body.len() + 5);
        out.push(head[0]);
        out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        out.extend_from_slice(&body);
        server.write_all(&out)?;
    }
}

/// `body` with the NUL-terminated SQL text that starts at `at` rewritten.
fn rewrite_at(body: Vec<u8>, at: usize, mutation: &Mutation) -> Vec<u8> {
    let Some(len) = body.get(at..).and_then(|rest| rest.iter().position(|&b| b == 0)) else {
        return body;
    };
    let Ok(sql) = std::str::from_utf8(&body[at..at + len]) else {
        return body;
    };
    if !sql.contains(MARKER_OPEN) {
        return body;
    }
    let (sql, events) = rewrite(sql, mutation);
    for event in events {
        report(mutation, &event);
    }
    let mut out = body[..at].to_vec();
    out.extend_from_slice(sql.as_bytes());
    out.extend_from_slice(&body[at + len..]);
    out
}

const MARKER_OPEN: &str = "/* guard:";
const MARKER_CLOSE: &str = " */";

/// `sql` with the mutation applied, and what happened: `applied` and
/// `mismatch <marker>` events (none when no named marker is in `sql`).
fn rewrite(sql: &str, mutation: &Mutation) -> (String, Vec<String>) {
    let mut events = Vec::new();
    // Markers not named go first (with the spaces after them); named ones
    // become numbered placeholders, as in the script.
    let mut plain = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(open) = rest.find(MARKER_OPEN) {
        let after_open = &rest[open + MARKER_OPEN.len()..];
        let name_len = after_open
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.'))
            .unwrap_or(after_open.len());
        if !after_open[name_len..].starts_with(MARKER_CLOSE) {
            plain.push_str(&rest[..open + MARKER_OPEN.len()]);
            rest = after_open;
            continue;
        }
        let name = &after_open[..name_len];
        plain.push_str(&rest[..open]);
        if let Some(i) = mutation.markers.iter().position(|m| m == name) {
            plain.push_str(&format!("\0{i}\0"));
        }
        rest = after_open[name_len + MARKER_CLOSE.len()..].trim_start_matches([' ', '\t']);
    }
    plain.push_str(rest);
    for i in 0..mutation.markers.len() {
        let here = format!("\0{i}\0");
        while let Some(at) = plain.find(&here) {
            let clause_at = at + here.len();
            match clause_end(&plain[clause_at..], &mutation.old) {
                Some(end) => {
                    plain.replace_range(at..clause_at + end, &mutation.new);
                    events.push("applied".to_owned());
                }
                None => {
                    plain.replace_range(at..clause_at, "");
                    events.push(format!("mismatch {}", mutation.markers[i]));
                }
            }
        }
    }
    (plain, events)
}

/// Where the clause `words` ends when it starts `text` (after optional
/// white space, its words separated by white space), or `None`.
fn clause_end(text: &str, words: &[String]) -> Option<usize> {
    let mut at = text.len() - text.trim_start().len();
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            let rest = &text[at..];
            let gap = rest.len() - rest.trim_start().len();
            if gap == 0 {
                return None;
            }
            at += gap;
        }
        if !text[at..].starts_with(word.as_str()) {
            return None;
        }
        at += word.len();
    }
    Some(at)
}

/// Appends `event` to the report file, once per kind of event.
fn report(mutation: &Mutation, event: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let Some(path) = &mutation.report else { return };
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|s| s == event) {
        return;
    }
    seen.push(event.to_owned());
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(file, "{event}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutation(markers: &str, old: &str, new: &str) -> Mutation {
        Mutation {
            markers: markers.split_whitespace().map(str::to_owned).collect(),
            old: old.split_whitespace().map(str::to_owned).collect(),
            new: new.to_owned(),
            report: None,
        }
    }

    #[test]
    fn a_named_clause_is_replaced_and_other_markers_go() {
        let sql =
            "UPDATE t SET x = 1 WHERE (/* guard:a.one */ l.holder = $2 OR\n   /* guard:a.two */ l.expires_at <= now())";
        let (out, events) = rewrite(sql, &mutation("a.one", "l.holder = $2 OR", ""));
        assert_eq!(out, "UPDATE t SET x = 1 WHERE (\n   l.expires_at <= now())");
        assert_eq!(events, ["applied"]);
        let (out, _) = rewrite(sql, &mutation("a.two", "l.expires_at <= now()", "true"));
        assert_eq!(out, "UPDATE t SET x = 1 WHERE (l.holder = $2 OR\n   true)");
    }

    #[test]
    fn a_marker_without_its_clause_is_reported() {
        let (out, events) = rewrite("SELECT /* guard:a.one */ 1", &mutation("a.one", "2", "3"));
        assert_eq!(out, "SELECT 1");
        assert_eq!(events, ["mismatch a.one"]);
    }

    #[test]
    fn a_statement_without_the_marker_is_unchanged() {
        let (out, events) = rewrite("SELECT /* guard:b.x */ 1", &mutation("a.one", "1", "2"));
        assert_eq!(out, "SELECT 1");
        assert!(events.is_empty());
    }
}
