//! How fast a consumer empties a long queue: `drain` consumes `--messages` from `--queue`
//! with acknowledgements (prefetch `--prefetch`, one `multiple` ack per `--ack-every`) and
//! reports the rate, from the consume to the last delivery.

use std::time::Instant;

use dwellmq_codec::methods::*;
use dwellmq_codec::{FramePayload, Method, ShortStr};

use crate::raw_client::{Error, RawClient};
use crate::Options;

/// `drain --addr A --queue Q --messages N [--prefetch 1000] [--ack-every 100]`.
pub(crate) async fn run(options: &Options) -> Result<(), Error> {
    let addr = options.string("addr", "127.0.0.1:5672");
    let queue = options.string("queue", "load-restart");
    let messages: u64 = options.get("messages", 1_000_000)?;
    let prefetch: u16 = options.get("prefetch", 1000)?;
    let ack_every: u64 = options.get("ack-every", 100)?;
    let mut client = RawClient::connect(&addr).await?;
    client
        .send(
            1,
            Method::BasicQos(BasicQos {
                prefetch_size: 0,
                prefetch_count: prefetch,
                global: false,
            }),
        )
        .await?;
    client.expect(|m| matches!(m, Method::BasicQosOk)).await?;
    let started = Instant::now();
    client
        .send(
            1,
            Method::BasicConsume(BasicConsume {
                queue: queue.as_str().into(),
                consumer_tag: ShortStr::from("drain"),
                no_ack: false,
                ..Default::default()
            }),
        )
        .await?;
    let mut delivered = 0u64;
    while delivered < messages {
        match client.next_frame().await?.payload {
            FramePayload::Method(Method::BasicDeliver(deliver)) => {
                delivered += 1;
                if delivered.is_multiple_of(ack_every) || delivered == messages {
                    client
                        .send(
                            1,
                            Method::BasicAck(BasicAck {
                                delivery_tag: deliver.delivery_tag,
                                multiple: true,
                            }),
                        )
                        .await?;
                }
            }
            FramePayload::Method(m @ (Method::ConnectionClose(_) | Method::ChannelClose(_))) => {
                return Err(format!("broker closed: {m:?}").into());
            }
            _ => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "drain: {messages} messages consumed and acked from '{queue}' in {secs:.2} s = {:.0} msg/s",
        messages as f64 / secs
    );
    Ok(())
}
