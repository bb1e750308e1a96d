//! Telling our own writes from anyone else's. A 412 on a refresh or a
//! release says only that the object's metageneration moved: a write of
//! ours whose reply was lost (a timeout, a reset after the server applied
//! it) moves it, and so does anyone editing the object's metadata. Only
//! what the revision on the server says can tell them apart, so each write
//! of a hold carries a nonce: the hold's random token and the
//! metageneration that write creates.
//!
//! A write names the metageneration it replaces, so at most one write can
//! create each metageneration, and every retry of it carries the same
//! nonce. A revision is ours exactly when its nonce names its own
//! metageneration: anyone else's write (a custom key, a new `expires_at`,
//! a second holder configured with the same identity) either leaves our
//! last nonce behind at a later metageneration or writes one that is not
//! ours. As we only ever write over revisions of our own, a revision of
//! ours also proves that nobody changed the object in between.

use super::store::{LockObject, Metadata};
use crate::identity::random_hex;

/// One hold's writer: its identity and its token.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    pub(crate) identity: String,
    token: String,
}

impl Writer {
    pub(crate) fn new(identity: &str) -> Writer {
        Writer {
            identity: identity.to_owned(),
            token: random_hex(16),
        }
    }

    /// The metadata of a write that creates `metageneration` (1: the
    /// create), expiring at `expires_at` (server time).
    pub(crate) fn metadata(&self, metageneration: i64, expires_at: f64) -> Metadata {
        Metadata {
            identity: self.identity.clone(),
            expires_at,
            nonce: self.nonce(metageneration),
        }
    }

    /// Whether `object` is a revision this writer made, with nothing
    /// written over it since.
    pub(crate) fn made(&self, object: &LockObject) -> bool {
        object.identity.as_deref() == Some(self.identity.as_str())
            && object.nonce.as_deref() == Some(self.nonce(object.version.metageneration).as_str())
    }

    fn nonce(&self, metageneration: i64) -> String {
        format!("{}.{metageneration}", self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcs::store::Version;

    fn revision(writer: &Writer, written_as: i64, metageneration: i64) -> LockObject {
        let metadata = writer.metadata(written_as, 10.0);
        LockObject {
            version: Version {
                generation: 7,
                metageneration,
            },
            identity: Some(metadata.identity),
            expires_at: Some(metadata.expires_at),
            nonce: Some(metadata.nonce),
        }
    }

    #[test]
    fn a_revision_is_ours_only_as_the_metageneration_our_write_created() {
        let writer = Writer::new("host/1");
        assert!(writer.made(&revision(&writer, 3, 3)));
        // Someone patched another key (or `expires_at`) over our revision 3.
        assert!(!writer.made(&revision(&writer, 3, 4)));
    }

    #[test]
    fn a_second_holder_with_the_same_identity_is_not_us() {
        let ours = Writer::new("host/1");
        let twin = Writer::new("host/1");
        assert!(!ours.made(&revision(&twin, 2, 2)));
    }
}
