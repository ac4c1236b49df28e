//! HTTP basic authentication against bcrypt hashes, without telling an
//! attacker which usernames exist and without paying bcrypt on every
//! scrape.
//!
//! - Usernames are compared through their SHA-256 digests, in constant
//!   time, against every configured user: the time taken does not depend on
//!   which user matched, nor on how much of a name matched.
//! - One bcrypt verification runs for every uncached attempt, against a
//!   dummy hash of the same cost when the user is unknown, so unknown users
//!   take as long as wrong passwords.
//! - Successful verifications are remembered by the SHA-256 of user and
//!   password (never the password itself): bcrypt costs ~70 ms of CPU at
//!   cost 10 by design, which a scrape every 15 s should not pay each time.
//! - bcrypt runs on the blocking pool, one verification at a time, so a
//!   flood of wrong passwords costs at most one core and never stalls the
//!   async workers that serve the other scrapes. Attempts wait for their
//!   turn as part of their request, not on a thread: a client that hangs up
//!   takes its attempt with it, so guesses never pile up as threads, as work
//!   done after their clients left, or as work that shutdown waits for.

use axum::http::HeaderValue;
use base64::Engine;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};
use tokio::sync::Semaphore;

/// A bcrypt hash that no password matches in practice (it is of 32 random
/// bytes); its cost field is replaced by the users' cost. Salt and digest
/// are the 53 characters after `$2b$NN$`.
const DUMMY_SALT_AND_DIGEST: &str = "wtM6l7/bCOkhFdTnHx3ECeWfjkatvregzS6p6T0s.b1A.m6QKL1/q";

/// At most this many verified credentials are remembered; a full cache is
/// emptied. Real configs have a few users with one password each; the cap
/// only matters if many passwords verify (bcrypt ignores bytes past 72).
const CACHE_CAP: usize = 256;

type Digest = [u8; 32];

/// The configured users, and the credentials already verified.
pub struct BasicAuth {
    users: Vec<User>,
    /// Verified when the user is unknown, to take as long as a known one.
    dummy_hash: String,
    verified: Mutex<HashSet<Digest>>,
    /// One permit: serialises bcrypt verifications, waited for without a
    /// thread.
    bcrypt_turn: Arc<Semaphore>,
}

struct User {
    name_digest: Digest,
    hash: String,
}

impl BasicAuth {
    /// Checks that `hash` is a bcrypt hash, so that a bad one fails when the
    /// config is loaded rather than at the first scrape.
    pub fn check_hash(hash: &str) -> Result<(), bcrypt::BcryptError> {
        hash.parse::<bcrypt::HashParts>().map(|_| ())
    }

    /// Users as (name, bcrypt hash); hashes are checked with
    /// [`Self::check_hash`] first.
    pub fn new(users: Vec<(String, String)>) -> Self {
        let cost = most_common_cost(users.iter().map(|(_, hash)| hash.as_str()));
        Self {
            users: users
                .into_iter()
                .map(|(name, hash)| User {
                    name_digest: sha256(&[name.as_bytes()]),
                    hash,
                })
                .collect(),
            dummy_hash: format!("$2b${cost:02}${DUMMY_SALT_AND_DIGEST}"),
            verified: Mutex::new(HashSet::new()),
            bcrypt_turn: Arc::new(Semaphore::new(1)),
        }
    }

    /// How many users are configured.
    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// Whether the `Authorization` header carries the credentials of a
    /// configured user.
    pub async fn allows(self: &Arc<Self>, authorization: Option<&HeaderValue>) -> bool {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return false;
        };
        // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
        let key = sha256(&[
            &(user.len() as u64).to_le_bytes(),
            user.as_slice(),
            password.as_slice(),
        ]);
        if self.cached(&key) {
            return true;
        }
        let (known, index) = self.find(&user);
        // Never closed, so acquiring cannot fail.
        let Ok(turn) = self.bcrypt_turn.clone().acquire_owned().await else {
            return false;
        };
        let auth = self.clone();
        let verified = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let hash = match auth.users.get(index) {
                Some(user) if known => &user.hash,
                _ => &auth.dummy_hash,
            };
            bcrypt::verify(&password, hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let allowed = known && verified;
        if allowed {
            let mut cache = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= CACHE_CAP {
                cache.clear();
            }
            cache.insert(key);
        }
        allowed
    }

    fn cached(&self, key: &Digest) -> bool {
        self.verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(key)
    }

    /// Whether `user` is configured, and its index: every user is compared,
    /// in constant time, whatever matches.
    fn find(&self, user: &[u8]) -> (bool, usize) {
        let digest = sha256(&[user]);
        let mut found = Choice::from(0);
        let mut index = 0u64;
        for (i, candidate) in self.users.iter().enumerate() {
            let same = candidate.name_digest.ct_eq(&digest);
            index.conditional_assign(&(i as u64), same);
            found |= same;
        }
        (found.into(), usize::try_from(index).unwrap_or(usize::MAX))
    }
}

/// `(user, password)` from `Basic base64(user:password)` (RFC 7617).
fn credentials(header: &HeaderValue) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = header.as_bytes();
    let (scheme, encoded) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

fn sha256(parts: &[&[u8]]) -> Digest {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        context.update(part);
    }
    let mut digest = [0; 32];
    digest.copy_from_slice(context.finish().as_ref());
    digest
}

/// The bcrypt cost most users' hashes have (10 when there are none), so that
/// the dummy verification takes as long as theirs.
fn most_common_cost<'a>(hashes: impl Iterator<Item = &'a str>) -> u32 {
    let costs: Vec<u32> = hashes
        .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
        .map(|parts| parts.get_cost())
        .collect();
    costs
        .iter()
        .copied()
        .max_by_key(|cost| costs.iter().filter(|c| *c == cost).count())
        .unwrap_or(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).expect("ASCII")
    }

    fn auth() -> Arc<BasicAuth> {
        let users = vec![
            (
                "alice".to_owned(),
                bcrypt::hash("wonderland", 4).expect("hash"),
            ),
            (
                "bob".to_owned(),
                bcrypt::hash("builder:x", 4).expect("hash"),
            ),
        ];
        for (_, hash) in &users {
            BasicAuth::check_hash(hash).expect("valid hash");
        }
        Arc::new(BasicAuth::new(users))
    }

    #[tokio::test]
    async fn right_password_only() {
        let auth = auth();
        assert!(auth.allows(Some(&header("alice", "wonderland"))).await);
        // Cached now, and still right.
        assert!(auth.allows(Some(&header("alice", "wonderland"))).await);
        assert!(auth.allows(Some(&header("bob", "builder:x"))).await);
        assert!(!auth.allows(Some(&header("alice", "wonderlan"))).await);
        assert!(!auth.allows(Some(&header("alice", "builder:x"))).await);
        assert!(!auth.allows(Some(&header("carol", "wonderland"))).await);
        assert!(!auth.allows(Some(&header("", ""))).await);
        assert!(!auth.allows(None).await);
        let bearer = HeaderValue::from_static("Bearer abc");
        assert!(!auth.allows(Some(&bearer)).await);
        let garbage = HeaderValue::from_static("Basic !!!");
        assert!(!auth.allows(Some(&garbage)).await);
    }

    #[tokio::test]
    async fn scheme_is_case_insensitive() {
        let auth = auth();
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:wonderland");
        let value = HeaderValue::from_str(&format!("basic {encoded}")).expect("ASCII");
        assert!(auth.allows(Some(&value)).await);
    }

    #[test]
    fn dummy_hash_is_valid_at_every_cost() {
        for cost in 4..=31 {
            let dummy = format!("$2b${cost:02}${DUMMY_SALT_AND_DIGEST}");
            BasicAuth::check_hash(&dummy).expect("dummy parses");
        }
        assert!(!bcrypt::verify("", &format!("$2b$04${DUMMY_SALT_AND_DIGEST}")).expect("verifies"));
    }

    #[test]
    fn dummy_takes_the_users_cost() {
        let hashes = ["$2b$12$x", "$2y$04$y"];
        assert_eq!(
            most_common_cost(hashes.into_iter()),
            10,
            "unparsable: default"
        );
        let real = [
            bcrypt::hash("a", 5).expect("hash"),
            bcrypt::hash("b", 4).expect("hash"),
            bcrypt::hash("c", 5).expect("hash"),
        ];
        assert_eq!(most_common_cost(real.iter().map(String::as_str)), 5);
    }

    #[test]
    fn finds_every_user_and_only_them() {
        let auth = auth();
        assert_eq!(auth.find(b"alice"), (true, 0));
        assert_eq!(auth.find(b"bob"), (true, 1));
        assert!(!auth.find(b"alic").0);
        assert!(!auth.find(b"").0);
    }
}
