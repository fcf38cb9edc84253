//! A user's permissions in one vhost: three regular expressions, matched as RabbitMQ matches
//! them (`re:run` without anchoring, so `foo` allows `myfoo1`; an empty pattern is `^$`,
//! which no resource name matches).

use regex_lite::Regex;

/// What an operation needs on a resource (RabbitMQ's `configure`, `write`, `read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Configure,
    Write,
    Read,
}

/// The kind of resource a permission is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceKind {
    Queue,
    Exchange,
}

impl ResourceKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ResourceKind::Queue => "queue",
            ResourceKind::Exchange => "exchange",
        }
    }
}

/// One pattern, compiled once, with the text it came from (for the API and definitions).
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    source: String,
    regex: Regex,
}

impl Pattern {
    pub(crate) fn new(source: &str) -> Result<Self, regex_lite::Error> {
        let effective = if source.is_empty() { "^$" } else { source };
        Ok(Pattern {
            source: source.to_string(),
            regex: Regex::new(effective)?,
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    fn allows(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }
}

/// A user's configure / write / read patterns in one vhost.
#[derive(Debug, Clone)]
pub(crate) struct Permission {
    pub(crate) configure: Pattern,
    pub(crate) write: Pattern,
    pub(crate) read: Pattern,
}

/// A pattern that is not a valid regular expression, with RabbitMQ's field name.
#[derive(Debug, thiserror::Error)]
#[error("invalid {field} pattern '{pattern}': {error}")]
pub(crate) struct PatternError {
    pub(crate) field: &'static str,
    pub(crate) pattern: String,
    pub(crate) error: regex_lite::Error,
}

impl Permission {
    /// Compiles the three patterns.
    pub(crate) fn new(configure: &str, write: &str, read: &str) -> Result<Self, PatternError> {
        let compile = |field: &'static str, pattern: &str| {
            Pattern::new(pattern).map_err(|error| PatternError {
                field,
                pattern: pattern.to_string(),
                error,
            })
        };
        Ok(Permission {
            configure: compile("configure", configure)?,
            write: compile("write", write)?,
            read: compile("read", read)?,
        })
    }

    /// Everything (`.*` three times), what the old `vhosts` list of a user grants.
    pub(crate) fn full() -> Self {
        // `.*` always compiles.
        let all = Pattern {
            source: ".*".into(),
            regex: Regex::new(".*").unwrap_or_else(|_| unreachable!()),
        };
        Permission {
            configure: all.clone(),
            write: all.clone(),
            read: all,
        }
    }

    /// Whether `operation` on the resource named `name` is allowed. The default exchange is
    /// checked as `amq.default`, as RabbitMQ does.
    pub(crate) fn allows(&self, operation: Operation, kind: ResourceKind, name: &str) -> bool {
        let name = if kind == ResourceKind::Exchange && name.is_empty() {
            "amq.default"
        } else {
            name
        };
        match operation {
            Operation::Configure => self.configure.allows(name),
            Operation::Write => self.write.allows(name),
            Operation::Read => self.read.allows(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;
    use ResourceKind::*;

    #[test]
    fn patterns_match_unanchored_like_rabbitmq() {
        let p = Permission::new("^app\\.", "foo", "").unwrap();
        assert!(p.allows(Configure, Queue, "app.jobs"));
        assert!(!p.allows(Configure, Queue, "my.app.jobs"));
        // Unanchored: a pattern without ^/$ matches anywhere in the name.
        assert!(p.allows(Write, Exchange, "myfoo1"));
        assert!(!p.allows(Write, Exchange, "bar"));
        // Empty means ^$: nothing a client can name.
        assert!(!p.allows(Read, Queue, "anything"));
        assert!(
            !p.allows(Read, Exchange, ""),
            "the default exchange is amq.default"
        );
    }

    #[test]
    fn the_default_exchange_is_amq_default() {
        let p = Permission::new("", "^amq\\.default$", "").unwrap();
        assert!(p.allows(Write, Exchange, ""));
        assert!(!p.allows(Write, Queue, ""));
    }

    #[test]
    fn bad_patterns_name_their_field() {
        let err = Permission::new(".*", "(", ".*").unwrap_err();
        assert_eq!(err.field, "write");
        assert!(Permission::full().allows(Configure, Queue, "x"));
    }
}
