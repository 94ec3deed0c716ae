//! The one duration syntax of every flag, the library's (`--every 30s`,
//! `#[job(lease = "60s")]`): whole numbers each followed by a unit, `ms`,
//! `s`, `m` or `h`, largest first: `250ms`, `10s`, `5m`, `1h30m`.

use std::time::Duration;

/// The longest `--connect-timeout` and `--refresh`.
const MAX: Duration = Duration::from_secs(3600);

/// A duration in the library's syntax, above zero and at most an hour;
/// the error names the syntax (clap adds the flag and the value).
fn bounded(text: &str) -> Result<Duration, String> {
    let d = leasehold_rules::parse_duration(text.trim()).map_err(|e| e.to_string())?;
    if d > MAX {
        return Err("at most 1h".to_owned());
    }
    Ok(d)
}

/// `--connect-timeout`: `10s`, `1m`, …, at most `1h`.
pub(crate) fn connect_timeout(text: &str) -> Result<Duration, String> {
    bounded(text)
}

/// `--refresh`: whole seconds (`5s`, `1m`), at most `1h`, or `off` (pages
/// never reload), given as [`Duration::ZERO`].
pub(crate) fn refresh(text: &str) -> Result<Duration, String> {
    if text.trim() == "off" {
        return Ok(Duration::ZERO);
    }
    let d = bounded(text).map_err(|e| format!("{e}; or `off` to never reload"))?;
    if d.subsec_nanos() != 0 {
        return Err("pages reload after whole seconds: write e.g. 2s, not 1s500ms (or `off`)".to_owned());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_the_librarys_duration_syntax() {
        assert_eq!(connect_timeout("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(connect_timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(connect_timeout("250ms"), Ok(Duration::from_millis(250)));
        assert!(connect_timeout("10").unwrap_err().contains("write \"10s\""));
        assert_eq!(connect_timeout("2h"), Err("at most 1h".to_owned()));
        assert!(connect_timeout("0s").is_err());
        assert_eq!(refresh("off"), Ok(Duration::ZERO));
        assert_eq!(refresh("5s"), Ok(Duration::from_secs(5)));
        assert!(refresh("1s500ms").unwrap_err().contains("whole seconds"));
        assert!(refresh("5").unwrap_err().contains("or `off`"));
    }
}
