//! The client's connection: opened through a tap that notes its frames, closed channel first
//! then connection, each close bounded. A close that does not complete within its bound fails
//! the run with the seed, what each side sent, and which side did not do its part.

use std::time::Duration;

use dwellmq::BrokerHandle;
use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection, ConnectionProperties};

use super::tap::{Tap, Traffic};
use super::{Sim, STUCK};

/// How long a client's close (of its channel, then of its connection) may take: the broker
/// answers a close at once; 5 s is far beyond any commit the answer could wait behind.
pub const CLOSE_BOUND: Duration = Duration::from_secs(5);

/// The client: a connection through a tap, with one channel in confirm mode.
pub struct Client {
    pub tap: Tap,
    pub connection: Connection,
}

/// Connects to `broker` through a new tap.
pub async fn connect(broker: &BrokerHandle) -> Result<(Client, Channel), String> {
    let tap = Tap::new(broker.local_addr()).await;
    let open = async {
        let connection = Connection::connect(&tap.url(), ConnectionProperties::default())
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        let ch = connection
            .create_channel()
            .await
            .map_err(|e| format!("opening a channel: {e}"))?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| format!("confirm mode: {e}"))?;
        Ok::<_, String>((connection, ch))
    };
    match tokio::time::timeout(STUCK, open).await {
        Ok(Ok((connection, ch))) => Ok((Client { tap, connection }, ch)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("connecting takes over {STUCK:?}")),
    }
}

impl Sim {
    /// Closes the client's channel, then its connection, each within [`CLOSE_BOUND`].
    pub(super) async fn close_client(&mut self) -> String {
        let Some(client) = self.client.take() else {
            return "no client".into();
        };
        if let Some(ch) = self.ch.take() {
            let close = ch.close(200, "bye".into());
            match tokio::time::timeout(CLOSE_BOUND, close).await {
                Ok(Ok(())) => self.report.closes += 1,
                Ok(Err(e)) => self.fail_close(&client, &format!("the channel close failed: {e}")),
                Err(_) => self.client_stalled(&client, "channel"),
            }
        }
        let close = client.connection.close(200, "bye".into());
        match tokio::time::timeout(CLOSE_BOUND, close).await {
            Ok(Ok(())) => self.report.closes += 1,
            Ok(Err(e)) => self.fail_close(&client, &format!("the connection close failed: {e}")),
            Err(_) => self.client_stalled(&client, "connection"),
        }
        "closed".into()
    }

    /// A close of `what` (`channel` or `connection`) did not complete in time: the run fails,
    /// naming the side that did not do its part (the broker, if it never answered close-ok).
    fn client_stalled(&mut self, client: &Client, what: &str) -> ! {
        let traffic = client.tap.traffic();
        let close = format!("{what}.close");
        let close_ok = format!("{what}.close-ok");
        let broker_did_its_part =
            traffic.sent_to_broker(&close) && traffic.sent_to_client(&close_ok);
        let whose = if broker_did_its_part {
            "the broker answered close-ok; lapin never completed it"
        } else {
            "the broker never answered it"
        };
        self.fail_close(
            client,
            &format!("the {what} close did not complete ({whose})"),
        )
    }

    fn fail_close(&self, client: &Client, what: &str) -> ! {
        let traffic = client.tap.traffic();
        let status = client.connection.status();
        let verdict = close_verdict(&traffic);
        self.fail(&format!(
            "{what} within {CLOSE_BOUND:?} ({verdict}); lapin: connected {}, closing {}, blocked {}; \
             broker: {} connections, disk alarm {}, memory {} of {}\n\
             client to broker (ended {}): {:?}\n  {}\nbroker to client (ended {}): {:?}\n  {}",
            status.connected(),
            status.closing(),
            status.blocked(),
            self.broker().connection_count(),
            self.broker().disk_alarm(),
            self.broker().memory_used(),
            self.broker().memory_high_watermark(),
            traffic.to_broker.ended,
            traffic.to_broker.connection_methods,
            traffic.to_broker.frames.join("\n  "),
            traffic.to_client.ended,
            traffic.to_client.connection_methods,
            traffic.to_client.frames.join("\n  "),
        ))
    }
}

/// Which side did not do its part of a connection close, from what went through the tap.
fn close_verdict(traffic: &Traffic) -> &'static str {
    let blocked_last = traffic
        .to_client
        .connection_methods
        .iter()
        .rev()
        .find(|m| matches!(**m, "connection.blocked" | "connection.unblocked"))
        == Some(&"connection.blocked");
    match (
        traffic.sent_to_broker("connection.close"),
        traffic.sent_to_client("connection.close-ok"),
    ) {
        (false, _) if blocked_last => {
            "the client was blocked and never sent connection.close; the broker never unblocked it"
        }
        (false, _) => "the client never sent connection.close",
        (true, false) => "the broker never answered connection.close",
        (true, true) => "the broker answered close-ok; the client did not finish",
    }
}
