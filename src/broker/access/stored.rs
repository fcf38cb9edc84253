//! Users and permissions as the durable store keeps them (`users` and `permissions` tables,
//! crates/dwellmq-store/DESIGN.md), and how a restart applies them over the configured ones.
//!
//! Runtime changes (HTTP API, definitions import) are written; at start the configured users
//! and permissions come first and the stored records override them name by name, so the last
//! runtime change wins. A deletion is written as a mark (a user record with an empty
//! credential, a permission record without patterns), so a configured user or permission
//! deleted at runtime stays deleted.

use dwellmq_store::{PermissionDef, PermissionPatterns, UserDef};

use super::password::{HashingAlgorithm, PasswordHash};
use super::{Permission, User};

/// `flags` bit 0 of a stored credential: only loopback connections may log in.
const LOOPBACK_ONLY: u8 = 1;

/// A user's store record: credential `u8 algorithm (0 SHA-256, 1 SHA-512) ‖ u8 flags ‖ salt ‖
/// digest` (salt and digest absent for a user without a password).
pub(super) fn user_record(user: &User) -> UserDef {
    let algorithm = match user.password.algorithm() {
        HashingAlgorithm::Sha256 => 0,
        HashingAlgorithm::Sha512 => 1,
    };
    let flags = if user.loopback_only { LOOPBACK_ONLY } else { 0 };
    let mut credential = vec![algorithm, flags];
    credential.extend_from_slice(user.password.raw());
    UserDef {
        name: user.name.clone(),
        credential,
        tags: user.tags.clone(),
    }
}

/// The mark that a user was deleted at runtime.
pub(super) fn user_deleted(name: &str) -> UserDef {
    UserDef {
        name: name.to_string(),
        credential: Vec::new(),
        tags: Vec::new(),
    }
}

/// What a stored user record says.
pub(super) enum StoredUser {
    Present(User),
    Deleted(String),
}

/// Decodes a user record; `Err` names what is wrong with it.
pub(super) fn user_from_record(def: &UserDef) -> Result<StoredUser, String> {
    let Some((&algorithm, rest)) = def.credential.split_first() else {
        return Ok(StoredUser::Deleted(def.name.clone()));
    };
    let Some((&flags, raw)) = rest.split_first() else {
        return Err("credential too short".into());
    };
    let algorithm = match algorithm {
        0 => HashingAlgorithm::Sha256,
        1 => HashingAlgorithm::Sha512,
        other => return Err(format!("unknown hashing algorithm {other}")),
    };
    let password = PasswordHash::from_raw(algorithm, raw).map_err(|e| e.to_string())?;
    Ok(StoredUser::Present(User {
        name: def.name.clone(),
        password,
        tags: def.tags.clone(),
        loopback_only: flags & LOOPBACK_ONLY != 0,
    }))
}

/// A permission's store record; `None`: the mark that it was cleared at runtime.
pub(super) fn permission_record(
    vhost: &str,
    user: &str,
    permission: Option<&Permission>,
) -> PermissionDef {
    PermissionDef {
        vhost: vhost.to_string(),
        user: user.to_string(),
        patterns: permission.map(|p| PermissionPatterns {
            configure: p.configure.as_str().to_string(),
            write: p.write.as_str().to_string(),
            read: p.read.as_str().to_string(),
        }),
    }
}
