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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_round_trips_through_its_record_and_a_deletion_is_a_mark() {
        let user = User {
            name: "app".into(),
            password: PasswordHash::new(HashingAlgorithm::Sha512, "pw").unwrap(),
            tags: vec!["management".into()],
            loopback_only: true,
        };
        let record = user_record(&user);
        assert_eq!(
            record.credential.len(),
            2 + 4 + 64,
            "algorithm, flags, salt, digest"
        );
        let StoredUser::Present(back) = user_from_record(&record).unwrap() else {
            panic!("a present user");
        };
        assert!(back.check_password("pw") && !back.check_password("PW"));
        assert!(back.loopback_only);
        assert_eq!(back.tags, user.tags);
        assert!(matches!(
            user_from_record(&user_deleted("app")),
            Ok(StoredUser::Deleted(name)) if name == "app"
        ));
        let mut unknown = record.clone();
        unknown.credential[0] = 9;
        assert!(user_from_record(&unknown).is_err());
        let mut truncated = record;
        truncated.credential.truncate(10);
        assert!(user_from_record(&truncated).is_err());
    }

    #[test]
    fn a_permission_record_keeps_the_patterns_as_given() {
        let permission = Permission::new("^app\\.", "", ".*").unwrap();
        let record = permission_record("/", "app", Some(&permission));
        let patterns = record.patterns.unwrap();
        assert_eq!(
            (
                patterns.configure.as_str(),
                patterns.write.as_str(),
                patterns.read.as_str()
            ),
            ("^app\\.", "", ".*")
        );
        assert!(permission_record("/", "app", None).patterns.is_none());
    }
}
