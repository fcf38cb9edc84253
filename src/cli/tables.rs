//! The config file's tables that only it sets: `[[users]]`, `[[permissions]]`,
//! `[[policies]]` and `[tls]`, with RabbitMQ's names for their fields.

use std::net::SocketAddr;
use std::path::PathBuf;

use dwellmq::{
    ApplyTo, PermissionConfig, Policy, PolicyConfig, PolicyDefinition, PolicyValue, TlsConfig,
    TlsVerify, UserConfig,
};

use super::values::Addr;

/// `[[users]]`, read after `[[permissions]]`: a user they name gets no default vhosts.
pub(crate) fn users(
    value: &toml::Value,
    permissions: &[PermissionConfig],
) -> Result<Vec<UserConfig>, String> {
    let users = value.as_array().ok_or("users must be an array of tables")?;
    users.iter().map(|u| user(u, permissions)).collect()
}

pub(crate) fn permissions(value: &toml::Value) -> Result<Vec<PermissionConfig>, String> {
    let entries = value
        .as_array()
        .ok_or("permissions must be an array of tables")?;
    entries.iter().map(permission).collect()
}

pub(crate) fn policies(value: &toml::Value) -> Result<Vec<PolicyConfig>, String> {
    let policies = value
        .as_array()
        .ok_or("policies must be an array of tables")?;
    policies.iter().map(policy).collect()
}

fn string(value: &toml::Value, name: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{name} must be a string"))
}

fn string_list(value: &toml::Value, name: &str) -> Result<Vec<String>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{name} must be an array of strings"))?
        .iter()
        .map(|v| string(v, name))
        .collect()
}

/// One `[[users]]` table. Without `vhosts`, a user gets every vhost (`["*"]`) unless a
/// `[[permissions]]` entry names it.
fn user(value: &toml::Value, permissions: &[PermissionConfig]) -> Result<UserConfig, String> {
    let t = value
        .as_table()
        .ok_or("each [[users]] entry must be a table")?;
    let field = |k: &str| t.get(k).map(|v| string(v, &format!("users.{k}")));
    let name = field("name").ok_or("users.name is required")??;
    let (password, password_hash) = match (field("password"), field("password_hash")) {
        (Some(password), None) => (password?, None),
        (None, Some(hash)) => (String::new(), Some(hash?)),
        _ => {
            return Err(format!(
                "user '{name}' needs exactly one of password and password_hash"
            ))
        }
    };
    let named = permissions.iter().any(|p| p.user == name);
    Ok(UserConfig {
        vhosts: match t.get("vhosts") {
            Some(v) => string_list(v, "users.vhosts")?,
            None if named => Vec::new(),
            None => vec!["*".into()],
        },
        name,
        password,
        password_hash,
        loopback_only: t
            .get("loopback_only")
            .map(|v| {
                v.as_bool()
                    .ok_or("users.loopback_only must be true or false")
            })
            .transpose()?
            .unwrap_or(false),
        tags: match t.get("tags") {
            Some(v) => string_list(v, "users.tags")?,
            None => Vec::new(),
        },
    })
}

/// One `[[permissions]]` table: user, vhost (default "/"), configure, write, read.
fn permission(value: &toml::Value) -> Result<PermissionConfig, String> {
    let t = value
        .as_table()
        .ok_or("each [[permissions]] entry must be a table")?;
    let field = |k: &str| {
        t.get(k)
            .map(|v| string(v, &format!("permissions.{k}")))
            .transpose()
    };
    let required = |k: &str| field(k)?.ok_or_else(|| format!("permissions.{k} is required"));
    Ok(PermissionConfig {
        user: required("user")?,
        vhost: field("vhost")?.unwrap_or_else(|| "/".into()),
        configure: required("configure")?,
        write: required("write")?,
        read: required("read")?,
    })
}

/// The `[tls]` table, with RabbitMQ's `ssl_options` names.
pub(crate) fn tls(value: &toml::Value) -> Result<TlsConfig, String> {
    let table = value.as_table().ok_or("tls must be a table")?;
    let path = |key: &str| -> Result<Option<PathBuf>, String> {
        table
            .get(key)
            .map(|v| string(v, &format!("tls.{key}")).map(PathBuf::from))
            .transpose()
    };
    let certfile = path("certfile")?.ok_or("tls.certfile is required")?;
    let keyfile = path("keyfile")?.ok_or("tls.keyfile is required")?;
    let mut config = TlsConfig::new(SocketAddr::from(([127, 0, 0, 1], 5671)), certfile, keyfile);
    for (key, v) in table {
        match key.as_str() {
            "certfile" | "keyfile" => {}
            "cacertfile" => config.cacertfile = path("cacertfile")?,
            "listen" => {
                let list = string_list(v, "tls.listen")?;
                config.listen = list
                    .iter()
                    .map(|a| a.parse().map(|Addr(a)| a))
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("tls.listen: {e}"))?;
            }
            "verify" => {
                config.verify = match string(v, "tls.verify")?.as_str() {
                    "verify_none" => TlsVerify::VerifyNone,
                    "verify_peer" => TlsVerify::VerifyPeer,
                    other => {
                        return Err(format!(
                            "tls.verify must be verify_none or verify_peer, not '{other}'"
                        ))
                    }
                }
            }
            "fail_if_no_peer_cert" => {
                config.fail_if_no_peer_cert = v
                    .as_bool()
                    .ok_or("tls.fail_if_no_peer_cert must be true or false")?;
            }
            other => {
                return Err(format!(
                    "unknown setting tls.{other} (known: listen, certfile, keyfile, cacertfile, verify, fail_if_no_peer_cert)"
                ))
            }
        }
    }
    Ok(config)
}

/// One `[[policies]]` table.
fn policy(value: &toml::Value) -> Result<PolicyConfig, String> {
    let table = value.as_table().ok_or("each policy must be a table")?;
    let text = |key: &str| table.get(key).and_then(toml::Value::as_str);
    let name = text("name").ok_or("a policy needs a name")?.to_string();
    let invalid = |e: String| format!("policy '{name}': {e}");
    let pattern = text("pattern")
        .ok_or_else(|| invalid("pattern is missing".into()))?
        .to_string();
    let apply_to = ApplyTo::from_name(text("apply_to").unwrap_or("all"))
        .map_err(|e| invalid(e.to_string()))?;
    let priority = match table.get("priority") {
        None => 0,
        Some(v) => v
            .as_integer()
            .ok_or_else(|| invalid("priority must be an integer".into()))?,
    };
    let definition = table
        .get("definition")
        .and_then(toml::Value::as_table)
        .ok_or_else(|| invalid("definition must be a table".into()))?;
    let entries = definition
        .iter()
        .map(|(key, v)| match v {
            toml::Value::Integer(n) => Ok((key.as_str(), PolicyValue::Integer(*n))),
            toml::Value::String(s) => Ok((key.as_str(), PolicyValue::Text(s.clone()))),
            _ => Err(invalid(format!("{key} must be an integer or a string"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let definition = PolicyDefinition::from_entries(entries).map_err(|e| invalid(e.to_string()))?;
    Ok(PolicyConfig {
        vhost: text("vhost").unwrap_or("/").to_string(),
        policy: Policy {
            name,
            pattern,
            apply_to,
            priority,
            definition,
        },
    })
}
