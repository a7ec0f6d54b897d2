//! HTTP basic auth against bcrypt hashes, as the exporter-toolkit checks
//! it: every request carries `Authorization: Basic …`; the password is
//! checked with bcrypt (slow on purpose, so a stolen hash is hard to
//! invert); an unknown user is checked against a dummy hash of the same
//! cost, so the answer's timing does not tell which users exist.
//!
//! A bcrypt check costs tens of milliseconds of CPU at the usual cost 10,
//! and a scraper sends its credentials with every scrape. So, like the
//! exporter-toolkit, a successful check is remembered: per user, a
//! SHA-256 of the password under a key drawn at start, compared in
//! constant time. Only one bcrypt check runs at a time (on a blocking
//! thread): a flood of wrong passwords costs at most one core and never
//! stalls the runtime; a scraper whose password is remembered is not
//! queued behind it.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// Highest bcrypt cost accepted: one check at cost 16 takes seconds,
/// which would time out a scrape.
pub const MAX_COST: u32 = 16;

/// Checks that `hash` is a bcrypt hash of an accepted cost; the reason
/// never quotes the hash.
pub fn check_hash(hash: &str) -> Result<(), &'static str> {
    let parts = bcrypt::HashParts::from_str(hash).map_err(|_bad| {
        "not a bcrypt hash ($2a$, $2b$ or $2y$; htpasswd -nBC 10 USER makes one)"
    })?;
    if parts.get_cost() > MAX_COST {
        return Err("bcrypt cost above 16: each check would take seconds");
    }
    Ok(())
}

/// The users of one listener and what they proved before.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    /// A hash of the users' highest cost, checked for unknown users.
    dummy: String,
    /// Key of the remembered digests (per process, never stored).
    key: [u8; 32],
    /// Per user: the digest of the last password bcrypt accepted.
    proven: Mutex<HashMap<String, [u8; 32]>>,
    /// One bcrypt check at a time.
    bcrypt: Arc<Semaphore>,
}

impl std::fmt::Debug for BasicAuth {
    // The hashes are credentials: not even Debug shows them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Why basic auth could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No randomness for the digest key.
    #[error("cannot draw a random key")]
    Random(#[source] getrandom::Error),
    /// Making the dummy hash failed.
    #[error("cannot make the dummy bcrypt hash")]
    Dummy(#[source] bcrypt::BcryptError),
}

impl BasicAuth {
    /// The checker for `users` (name → bcrypt hash, each already accepted
    /// by [`check_hash`]).
    pub fn new(users: BTreeMap<String, String>) -> Result<BasicAuth, AuthError> {
        let cost = users
            .values()
            .filter_map(|h| bcrypt::HashParts::from_str(h).ok())
            .map(|p| p.get_cost())
            .max()
            .unwrap_or(4);
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(AuthError::Random)?;
        let mut filler = [0u8; 16];
        getrandom::getrandom(&mut filler).map_err(AuthError::Random)?;
        let dummy = bcrypt::hash(filler, cost).map_err(AuthError::Dummy)?;
        Ok(BasicAuth {
            users,
            dummy,
            key,
            proven: Mutex::new(HashMap::new()),
            bcrypt: Arc::new(Semaphore::new(1)),
        })
    }

    fn digest(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update(user.as_bytes());
        h.update([0u8]);
        h.update(password);
        h.finalize().into()
    }

    /// Whether the `Authorization` header value names a user and its
    /// password.
    pub async fn verify(&self, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(parse_basic) else {
            return false;
        };
        let digest = self.digest(&user, &password);
        let remembered = self
            .proven
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&user)
            .is_some_and(|d| bool::from(d.ct_eq(&digest)));
        if remembered {
            return true;
        }
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy.clone(), false),
        };
        let Ok(_permit) = Arc::clone(&self.bcrypt).acquire_owned().await else {
            return false;
        };
        let checked =
            tokio::task::spawn_blocking(move || bcrypt::verify(&password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false);
        if checked && known {
            self.proven
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(user, digest);
        }
        checked && known
    }
}

/// `Basic base64(user:password)` → (user, password).
fn parse_basic(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        let raw = format!("{user}:{password}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn only_the_right_password_of_a_known_user_passes_also_when_remembered() {
        let mut users = BTreeMap::new();
        users.insert("prom".to_owned(), bcrypt::hash("s3cret:x", 4).unwrap());
        let auth = BasicAuth::new(users).unwrap();
        assert!(!auth.verify(None).await);
        assert!(!auth.verify(Some(b"Bearer abc")).await);
        assert!(!auth.verify(Some(b"Basic !!!")).await);
        assert!(!auth.verify(Some(&header("prom", "s3cret"))).await);
        assert!(!auth.verify(Some(&header("nobody", "s3cret:x"))).await);
        assert!(auth.verify(Some(&header("prom", "s3cret:x"))).await);
        // Remembered: the same answer without bcrypt, and still nothing
        // else passes.
        assert!(auth.verify(Some(&header("prom", "s3cret:x"))).await);
        assert!(!auth.verify(Some(&header("prom", "s3cret:y"))).await);
        assert!(!auth.verify(Some(&header("prom", ""))).await);
    }

    #[test]
    fn hashes_are_checked_for_form_and_cost() {
        assert!(check_hash(&bcrypt::hash("x", 4).unwrap()).is_ok());
        assert!(
            check_hash("$2y$17$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyz01234").is_err()
        );
        assert!(check_hash("plain").is_err());
        assert!(format!(
            "{:?}",
            BasicAuth::new(BTreeMap::from([(
                "u".to_owned(),
                bcrypt::hash("x", 4).unwrap()
            )]))
            .unwrap()
        )
        .contains("\"u\""));
    }
}
