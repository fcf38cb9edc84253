//! The binary's advice when a port cannot be bound: which flag moves it.
//!
//! A newcomer's machine often runs a RabbitMQ already, holding 5672 and 15672; the error alone
//! ("Address already in use") does not say which of dwellmq's listeners wanted the port nor
//! how to move it.

use dwellmq::{ListenerRole, StartError};

/// The advice for a start error, if it is a port that could not be bound.
pub(crate) fn advice(error: &StartError) -> Option<&'static str> {
    let StartError::Bind { role, .. } = error else {
        return None;
    };
    Some(match role {
        ListenerRole::Amqp => {
            "move AMQP with --listen ADDR (--listen 127.0.0.1:0 picks a free port and prints \
             it); 5672 is RabbitMQ's AMQP port too"
        }
        ListenerRole::AmqpTls => {
            "move AMQP over TLS with --tls-listen ADDR (port 0 picks a free port); 5671 is \
             RabbitMQ's AMQPS port too"
        }
        ListenerRole::Http => {
            "move the HTTP management API with --http ADDR (--http 127.0.0.1:0 picks a free \
             port and prints it) or turn it off with --http off; 15672 is RabbitMQ's management \
             port too"
        }
        ListenerRole::Metrics => {
            "move Prometheus metrics with --metrics ADDR (port 0 picks a free port) or turn \
             them off with --metrics off; 15692 is RabbitMQ's Prometheus port too"
        }
        // A role added later: the error itself names it.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind_error(addr: &str, role: ListenerRole) -> StartError {
        StartError::Bind {
            addr: addr.parse().unwrap(),
            role,
            source: std::io::ErrorKind::AddrInUse.into(),
        }
    }

    #[test]
    fn each_listener_names_the_flag_that_moves_it() {
        for (role, addr, says) in [
            (ListenerRole::Amqp, "127.0.0.1:5672", "with --listen ADDR"),
            (
                ListenerRole::AmqpTls,
                "127.0.0.1:5671",
                "with --tls-listen ADDR",
            ),
            (ListenerRole::Http, "127.0.0.1:15672", "with --http ADDR"),
            (
                ListenerRole::Metrics,
                "127.0.0.1:15692",
                "with --metrics ADDR",
            ),
        ] {
            let advice = advice(&bind_error(addr, role)).expect("advice for a bind error");
            assert!(advice.contains(says), "{advice}");
            let port = addr.rsplit(':').next().unwrap();
            assert!(
                advice.contains(&format!("{port} is RabbitMQ's")),
                "{advice}"
            );
        }
        let http = advice(&bind_error("127.0.0.1:15672", ListenerRole::Http)).unwrap();
        assert!(http.contains("HTTP management API"), "{http}");
        assert!(http.contains("--http off"), "{http}");
        assert!(advice(&StartError::NoListenAddress).is_none());
    }
}
