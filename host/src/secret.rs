//! Secrets: the launcher's control secret, launch tokens, session ids. Made
//! from the system's random source, compared in constant time, and never
//! printed by `Debug`.

use serde::{Deserialize, Serialize};

/// 32 random bytes as hex: launch tokens, sessions, secrets.
pub fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the system's random source works");
    hex::encode(b)
}

/// Equality that takes the same time wherever the strings differ.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A secret held in a value that may be logged or printed with `{:?}`: its
/// `Debug` says only that it is there. Serialized as the plain string (it is
/// written to `launcher.json` and sent on the control connection).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// A new random secret.
    pub fn random() -> Secret {
        Secret(random_hex())
    }

    /// The secret itself, for the one place that sends or compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `other` is this secret (in constant time).
    pub fn matches(&self, other: &Secret) -> bool {
        same(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_in_debug_output() {
        let s = Secret::random();
        let shown = format!("{s:?} {:?}", Some(&s));
        assert!(!shown.contains(s.expose()), "{shown}");
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn secrets_compare_by_value_and_random_ones_differ() {
        let a = Secret::random();
        assert_eq!(a.expose().len(), 64);
        assert!(a.matches(&a.clone()));
        assert!(!a.matches(&Secret::random()));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "abcd"));
    }
}
