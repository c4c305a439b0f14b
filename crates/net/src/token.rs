//! Join tokens: how a new worker proves it was invited and how it recognises the real cluster.
//!
//! A [`JoinToken`] is a random 256-bit secret plus the SHA-256 fingerprint of the cluster CA.
//! The host prints it once; the user pastes it (`parcae-worker --join ADDR --token T`). The
//! worker pins the host's CA by the fingerprint (so it cannot be fooled by a stranger at ADDR)
//! and presents the secret (so the host knows it was invited). Text form:
//!
//! ```text
//! parcae1-<64 hex digits: secret>-<64 hex digits: CA fingerprint>
//! ```

use std::fmt;
use std::str::FromStr;

use ring::rand::SecureRandom;
use subtle::ConstantTimeEq;

use crate::ca::Fingerprint;

/// The prefix (and version) of a token's text form.
pub const TOKEN_PREFIX: &str = "parcae1";

/// Why a token string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not `parcae1-...`.
    #[error(
        "join token must start with \"{TOKEN_PREFIX}-\" (got {0:?}); paste the whole token the host printed"
    )]
    BadPrefix(String),
    /// Wrong number of `-`-separated parts.
    #[error("join token must have 3 parts separated by '-' ({TOKEN_PREFIX}-SECRET-FINGERPRINT), found {0}")]
    BadShape(usize),
    /// A part with the wrong length or a non-hex character.
    #[error("join token {part} must be 64 hex digits: {reason}")]
    BadPart {
        /// "secret" or "CA fingerprint".
        part: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The random number generator failed.
    #[error("random number generator failed")]
    Random,
}

/// A join token: random secret + CA fingerprint. `Debug` does not print the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    secret: [u8; 32],
    ca_fingerprint: Fingerprint,
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinToken")
            .field("secret", &"<redacted>")
            .field("ca_fingerprint", &self.ca_fingerprint)
            .finish()
    }
}

impl JoinToken {
    /// A new token with a fresh random secret for the CA with `ca_fingerprint`.
    pub fn generate(ca_fingerprint: Fingerprint) -> Result<Self, TokenError> {
        let mut secret = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut secret).map_err(|_| TokenError::Random)?;
        Ok(JoinToken { secret, ca_fingerprint })
    }

    /// The fingerprint of the CA a joining worker must find at the host.
    pub fn ca_fingerprint(&self) -> Fingerprint {
        self.ca_fingerprint
    }

    /// The secret, hex-encoded (what a worker sends in its join request).
    pub fn secret_hex(&self) -> String {
        hex_encode(&self.secret)
    }

    /// Compares a presented secret (hex) with this token's in constant time.
    pub fn secret_matches(&self, presented_hex: &str) -> bool {
        match hex_decode_32(presented_hex) {
            Ok(presented) => bool::from(self.secret.ct_eq(&presented)),
            Err(_) => false,
        }
    }
}

impl fmt::Display for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TOKEN_PREFIX}-{}-{}", hex_encode(&self.secret), self.ca_fingerprint.to_hex())
    }
}

impl FromStr for JoinToken {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Self, TokenError> {
        let s = s.trim();
        let parts: Vec<&str> = s.split('-').collect();
        if parts[0] != TOKEN_PREFIX {
            let shown: String = s.chars().take(12).collect();
            return Err(TokenError::BadPrefix(shown));
        }
        if parts.len() != 3 {
            return Err(TokenError::BadShape(parts.len()));
        }
        let secret =
            hex_decode_32(parts[1]).map_err(|reason| TokenError::BadPart { part: "secret", reason })?;
        let fp = hex_decode_32(parts[2])
            .map_err(|reason| TokenError::BadPart { part: "CA fingerprint", reason })?;
        Ok(JoinToken { secret, ca_fingerprint: Fingerprint(fp) })
    }
}

/// Lower-case hex encoding.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// Decodes exactly 32 bytes of hex (either case).
pub(crate) fn hex_decode_32(s: &str) -> Result<[u8; 32], String> {
    if s.len() != 64 {
        return Err(format!("found {} characters", s.len()));
    }
    let mut out = [0u8; 32];
    let digit = |i: usize, c: u8| -> Result<u8, String> {
        (c as char)
            .to_digit(16)
            .map(|d| d as u8)
            .ok_or_else(|| format!("{:?} at position {i} is not a hex digit", c as char))
    };
    let bytes = s.as_bytes();
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = (digit(2 * i, bytes[2 * i])? << 4) | digit(2 * i + 1, bytes[2 * i + 1])?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trips_and_hides_secret() {
        let token = JoinToken::generate(Fingerprint([7; 32])).unwrap();
        let text = token.to_string();
        assert_eq!(text.len(), TOKEN_PREFIX.len() + 2 + 128);
        let back: JoinToken = text.parse().unwrap();
        assert_eq!(back, token);
        assert!(back.secret_matches(&token.secret_hex()));
        assert!(!back.secret_matches(&"0".repeat(64)));
        assert!(!back.secret_matches("short"));
        assert!(!format!("{token:?}").contains(&token.secret_hex()));
    }

    #[test]
    fn bad_tokens_have_clear_errors() {
        let good = JoinToken::generate(Fingerprint([1; 32])).unwrap().to_string();
        assert!(matches!("hello".parse::<JoinToken>(), Err(TokenError::BadPrefix(_))));
        assert_eq!("parcae1-ab".parse::<JoinToken>(), Err(TokenError::BadShape(2)));
        let short = &good[..good.len() - 1];
        let err = short.parse::<JoinToken>().unwrap_err();
        assert!(err.to_string().contains("CA fingerprint must be 64 hex digits: found 63"), "{err}");
        let mut bad = good.clone();
        bad.replace_range(10..11, "z");
        let err = bad.parse::<JoinToken>().unwrap_err();
        assert!(err.to_string().contains("secret") && err.to_string().contains("'z'"), "{err}");
        // Surrounding whitespace from a paste is fine.
        assert!(format!("  {good}\n").parse::<JoinToken>().is_ok());
    }
}
