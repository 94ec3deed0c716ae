//! `Key`: a lease key checked once, where it enters, and trusted after
//! (the type's docs say where and by which rule).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::validate;

/// A lease key, checked once where it enters and trusted after.
///
/// The operators' paths — the CLI's arguments, the console's forms,
/// [`Operator`](crate::operator::Operator)'s actions, the store's reads of
/// one key — take a `Key`. Text becomes one by [`Key::new`] (or `parse`,
/// `try_from`), which applies the rule; a `Key` handed on is not checked
/// again, down to the statement that binds it. The methods that take a key
/// take [`impl IntoKey`](IntoKey), so a `&str` can be passed directly and
/// is checked there, at its entry.
///
/// The rule is the one for a key that may already have a row: not empty,
/// at most [`MAX_KEY_BYTES`](crate::store::MAX_KEY_BYTES) bytes, no NUL —
/// what the `key` column holds. Hidden characters (bidi controls,
/// zero-width, …) are allowed *here*, so that a row stored before they
/// were refused can still be read, shown (escaped) and acted on, down to
/// forgetting it; a key a row is made for (a job's key, a kind's stored
/// key) is refused them where the row is made. Cheap to clone; reads as a
/// `&str`.
///
/// ```
/// use leasehold::Key;
/// let key = Key::new("billing:acme")?;
/// assert_eq!(key, "billing:acme");
/// assert!(Key::new("").is_err());
/// assert!("with\0nul".parse::<Key>().is_err());
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// `key`, checked: fails with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput), naming the value
    /// and the limit, when it is empty, longer than 255 bytes or holds a
    /// NUL.
    pub fn new(key: impl Into<String>) -> Result<Key> {
        let key = key.into();
        validate::existing_key(&key)?;
        Ok(Key(key))
    }

    /// Text that passed the rule where it entered, or stricter: a key read
    /// from a row, a [`NewKey`](crate::NewKey)'s key.
    pub(crate) fn checked(key: String) -> Key {
        Key(key)
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as an owned `String`.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// What the methods that act on one key take: a [`Key`] (checked when it
/// was made, not again) or text (`&str`, `String`, `&String`), checked by
/// [`Key::new`] on the way in. Sealed: leasehold's own types only.
pub trait IntoKey: sealed::Sealed {
    /// The checked key.
    fn into_key(self) -> Result<Key>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Key {}
    impl Sealed for &super::Key {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
}

impl IntoKey for Key {
    fn into_key(self) -> Result<Key> {
        Ok(self)
    }
}

impl IntoKey for &Key {
    fn into_key(self) -> Result<Key> {
        Ok(self.clone())
    }
}

impl IntoKey for &str {
    fn into_key(self) -> Result<Key> {
        Key::new(self)
    }
}

impl IntoKey for String {
    fn into_key(self) -> Result<Key> {
        Key::new(self)
    }
}

impl IntoKey for &String {
    fn into_key(self) -> Result<Key> {
        Key::new(self.as_str())
    }
}

impl FromStr for Key {
    type Err = Error;
    fn from_str(key: &str) -> Result<Key> {
        Key::new(key)
    }
}

impl TryFrom<&str> for Key {
    type Error = Error;
    fn try_from(key: &str) -> Result<Key> {
        Key::new(key)
    }
}

impl TryFrom<String> for Key {
    type Error = Error;
    fn try_from(key: String) -> Result<Key> {
        Key::new(key)
    }
}

impl Deref for Key {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<Key> for String {
    fn from(key: Key) -> String {
        key.0
    }
}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Key {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// As a `String`'s: quoted, with control and hidden characters escaped.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// The key as it is. A key may hold hidden characters (see [`Key`]): show
/// it on a terminal or a page escaped.
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_checked_as_it_becomes_a_key_and_a_key_is_handed_on_as_is() {
        let msg = Key::new("").unwrap_err().to_string();
        assert!(msg.contains("lease key") && msg.contains("empty"), "{msg}");
        let msg = "k".repeat(256).into_key().unwrap_err().to_string();
        assert!(msg.contains("256 bytes") && msg.contains("255"), "{msg}");
        assert!("a\0b".parse::<Key>().is_err());
        // What a row may hold from before hidden characters were refused.
        let old = Key::new("evil\u{202e}key").unwrap();
        assert_eq!(format!("{old:?}"), "\"evil\\u{202e}key\"");
        assert_eq!((&old).into_key().unwrap(), old);
        let key: Key = "billing:acme".try_into().unwrap();
        assert_eq!(key.as_str(), "billing:acme");
        assert_eq!(String::from(key.clone()), "billing:acme");
        assert_eq!(key.to_string(), "billing:acme");
    }
}
