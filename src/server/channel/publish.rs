//! Routing complete messages; publisher confirms and transactions.

use std::sync::Arc;

use dwellmq_codec::methods::*;
use dwellmq_codec::{reply_code, FieldValue, Method, ShortStr};
use dwellmq_core::{BrokerError, BrokerResult, Message};

use super::confirms::Confirms;
use super::settle::Settlement;
use super::{Channel, ConnContext};
use crate::broker::exchange::Exchange;
use crate::broker::persist::PublishTicket;
use crate::broker::publish::{self, Prepared};
use crate::server::outbound::Outbound;

/// A complete message as published, before routing.
pub(super) struct Publication {
    exchange: ShortStr,
    /// The exchange as found when the content completed, routed through at once (one lookup
    /// per publish); `None` in a transaction, which looks it up again at `tx.commit`.
    found: Option<Arc<Exchange>>,
    routing_key: ShortStr,
    mandatory: bool,
    message: Arc<Message>,
    /// Milliseconds a delayed exchange on the message's way holds it (0 = route now).
    delay_ms: u64,
    /// Routing keys from the `CC` and `BCC` headers.
    extra_keys: Vec<ShortStr>,
    /// The `BCC` header, removed from `message`; a held copy keeps it, to route by it at
    /// release.
    bcc: Option<FieldValue>,
}

/// How the channel treats publishes.
pub(super) enum PublishMode {
    Plain,
    /// Publisher confirms: `next_tag` numbers publishes; every publish up to `acked_to` is
    /// routed, and `confirms` hears of it once per read batch (`pushed_to`), then sends one
    /// `multiple` ack, holding back at a publish whose commit is pending.
    Confirm {
        next_tag: u64,
        acked_to: u64,
        pushed_to: u64,
        confirms: Arc<Confirms>,
    },
    /// `tx.select`: publishes and settlements wait for `tx.commit`.
    Transactional {
        publishes: Vec<Publication>,
        settlements: Vec<Settlement>,
    },
}

impl Channel {
    /// `confirm.select`: publisher confirms from now on.
    pub(super) fn confirm_select(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ConfirmSelect,
    ) -> BrokerResult<()> {
        match self.mode {
            PublishMode::Transactional { .. } => {
                return Err(BrokerError::PreconditionFailed(
                    "cannot switch from tx to confirm mode".into(),
                ))
            }
            PublishMode::Plain => {
                self.mode = PublishMode::Confirm {
                    next_tag: 1,
                    acked_to: 0,
                    pushed_to: 0,
                    confirms: Confirms::new(self.id(), Arc::clone(cx.outbound)),
                }
            }
            PublishMode::Confirm { .. } => {}
        }
        if !m.no_wait {
            self.reply(cx, Method::ConfirmSelectOk);
        }
        Ok(())
    }

    /// `tx.select`: publishes and settlements wait for `tx.commit`.
    pub(super) fn tx_select(&mut self, cx: &mut ConnContext<'_>) -> BrokerResult<()> {
        match self.mode {
            PublishMode::Confirm { .. } => {
                return Err(BrokerError::PreconditionFailed(
                    "cannot switch from confirm to tx mode".into(),
                ))
            }
            PublishMode::Plain => {
                self.mode = PublishMode::Transactional {
                    publishes: Vec::new(),
                    settlements: Vec::new(),
                }
            }
            PublishMode::Transactional { .. } => {}
        }
        self.reply(cx, Method::TxSelectOk);
        Ok(())
    }

    /// `tx.commit`: applies the buffered settlements, then the buffered publishes. With a
    /// store, `tx.commit-ok` waits until the persistent copies the publishes left in durable
    /// queues (and what durable delayed exchanges hold of them) are committed; if that commit
    /// fails, the channel is closed with 506 RESOURCE_ERROR instead (`CommitWait`).
    pub(super) fn tx_commit(&mut self, cx: &mut ConnContext<'_>) -> BrokerResult<()> {
        let (publishes, settlements) = self.take_transaction()?;
        for settlement in settlements {
            self.settle(cx.vhost, settlement)?;
        }
        let token = cx.commit_wait.token();
        let ticket = cx.state.store().map(|_| {
            let wait = Arc::clone(cx.commit_wait);
            PublishTicket::new(move |committed, _| wait.finish(token, committed))
        });
        for publication in publishes {
            self.route_and_enqueue_with(cx, publication, ticket.as_ref());
        }
        match ticket {
            Some(ticket) if ticket.is_used() => {
                // Registered before the commit can be reported (the publisher's count below
                // is the last one).
                cx.commit_wait.start(
                    token,
                    self.id(),
                    Method::TxCommitOk,
                    (90, 20),
                    "tx.commit failed: the store could not write the transaction's persistent messages",
                );
                ticket.complete(true);
            }
            _ => self.reply(cx, Method::TxCommitOk),
        }
        Ok(())
    }

    /// `tx.rollback`: drops what the transaction buffered.
    pub(super) fn tx_rollback(&mut self, cx: &mut ConnContext<'_>) -> BrokerResult<()> {
        self.take_transaction()?;
        self.reply(cx, Method::TxRollbackOk);
        Ok(())
    }

    fn take_transaction(&mut self) -> BrokerResult<(Vec<Publication>, Vec<Settlement>)> {
        match &mut self.mode {
            PublishMode::Transactional {
                publishes,
                settlements,
            } => Ok((std::mem::take(publishes), std::mem::take(settlements))),
            _ => Err(BrokerError::PreconditionFailed(
                "channel is not transactional".into(),
            )),
        }
    }

    /// The publish's content is complete: validate, then route (or buffer for a transaction).
    pub(super) fn finish_publish(&mut self, cx: &mut ConnContext<'_>) -> BrokerResult<()> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let header = pending.header.unwrap_or_default();
        let submitted = publish::Submitted {
            exchange: pending.method.exchange.clone(),
            routing_key: pending.method.routing_key.clone(),
            properties: header.properties,
            body: pending.body.into_body(),
            user: cx.user,
            reply_address: self.reply_address(),
        };
        let (exchange, prepared) = publish::accept(cx.vhost, submitted)?;
        let Prepared {
            message,
            delay_ms,
            extra_keys,
            bcc,
        } = prepared;
        let transactional = matches!(self.mode, PublishMode::Transactional { .. });
        let publication = Publication {
            exchange: pending.method.exchange,
            found: (!transactional).then_some(exchange),
            routing_key: pending.method.routing_key,
            mandatory: pending.method.mandatory,
            message,
            delay_ms,
            extra_keys,
            bcc,
        };
        if let PublishMode::Transactional { publishes, .. } = &mut self.mode {
            publishes.push(publication);
            return Ok(());
        }
        self.route_and_enqueue(cx, publication);
        Ok(())
    }

    pub(super) fn route_and_enqueue(&mut self, cx: &mut ConnContext<'_>, publication: Publication) {
        self.route_and_enqueue_with(cx, publication, None);
    }

    /// Routes a publish; `tx_ticket` (a transaction's, at `tx.commit`) hears of the commits
    /// of its persistent copies.
    fn route_and_enqueue_with(
        &mut self,
        cx: &mut ConnContext<'_>,
        mut publication: Publication,
        tx_ticket: Option<&Arc<PublishTicket>>,
    ) {
        let confirm_tag = self.next_confirm_tag();
        let first_on_channel = self.counters.publish == 0;
        let body_len = publication.message.body.len();
        cx.counts
            .received(confirm_tag.is_some(), body_len, first_on_channel);
        // The exchange found when the content completed routes it; at `tx.commit` it is looked
        // up again, and one deleted meanwhile makes the message unroutable, as in RabbitMQ.
        let exchange = publication
            .found
            .take()
            .or_else(|| cx.vhost.exchange(&publication.exchange).ok());
        let outcome = match &exchange {
            Some(exchange) => self.route(cx, exchange, &publication, confirm_tag, tx_ticket),
            None => {
                self.counters.publish += 1;
                publish::Outcome {
                    returned: publication.mandatory,
                    dropped: !publication.mandatory,
                    ..publish::Outcome::default()
                }
            }
        };
        if outcome.returned {
            cx.counts.unroutable_returned += 1;
            self.return_unroutable(cx, &publication);
        }
        cx.counts.unroutable_dropped += u64::from(outcome.dropped);
        cx.counts.routed += u64::from(outcome.routed);
        self.settle_publish(cx, confirm_tag, outcome);
    }

    /// The publish's confirm tag under confirms (the next one), `None` otherwise.
    fn next_confirm_tag(&mut self) -> Option<u64> {
        match &mut self.mode {
            PublishMode::Confirm { next_tag, .. } => {
                let tag = *next_tag;
                *next_tag += 1;
                Some(tag)
            }
            _ => None,
        }
    }

    /// Routes through `exchange` into its queues (`broker::publish`'s pipeline).
    fn route(
        &mut self,
        cx: &mut ConnContext<'_>,
        exchange: &Arc<Exchange>,
        publication: &Publication,
        confirm_tag: Option<u64>,
        tx_ticket: Option<&Arc<PublishTicket>>,
    ) -> publish::Outcome {
        // Taken out for the call, so that the channel can be borrowed meanwhile.
        let mut routing = std::mem::take(&mut self.routing);
        // A persistent message's confirm waits for the commits of its copies in durable
        // queues, any message's for its copies held by durable delayed exchanges and in quorum
        // queues (which keep every message); a transaction's ticket takes those copies too.
        let mut confirm_ticket;
        let mut transaction_ticket;
        let make_ticket: Option<&mut dyn FnMut() -> Arc<PublishTicket>> =
            match (&self.mode, confirm_tag, tx_ticket) {
                (PublishMode::Confirm { confirms, .. }, Some(tag), _) => {
                    confirm_ticket = move || {
                        let confirms = Arc::clone(confirms);
                        PublishTicket::new(move |ok, by| confirms.settled(tag, ok, by))
                    };
                    Some(&mut confirm_ticket)
                }
                (_, _, Some(tx_ticket)) => {
                    transaction_ticket = move || Arc::clone(tx_ticket);
                    Some(&mut transaction_ticket)
                }
                _ => None,
            };
        let outgoing = publish::Outgoing {
            exchange,
            message: &publication.message,
            routing_key: &publication.routing_key,
            extra_keys: &publication.extra_keys,
            bcc: publication.bcc.as_ref(),
            // Due its delay after the publish reached the broker (its read), however long the
            // frames read with it took to handle.
            hold_until: (publication.delay_ms > 0)
                .then(|| cx.received_ms.saturating_add(publication.delay_ms)),
            mandatory: publication.mandatory,
            dead_lettered: false,
        };
        let outcome = publish::route_and_enqueue(cx.vhost, outgoing, &mut routing, make_ticket);
        self.routing = routing;
        self.counters.published(exchange, outcome.routed);
        outcome
    }

    /// The publish's confirm: acked with the batch, nacked (a queue refused it, or a test's
    /// fault), or held until the commit of its persistent copies.
    fn settle_publish(
        &mut self,
        cx: &mut ConnContext<'_>,
        confirm_tag: Option<u64>,
        outcome: publish::Outcome,
    ) {
        // A confirm's ticket is settled here; a transaction's (no confirm tag) at `tx.commit`.
        let ticket = outcome.ticket.zip(confirm_tag);
        // An injected fault nacks confirms whatever became of the message.
        let nack = confirm_tag.is_some() && (outcome.rejected || cx.state.hooks().take_nack());
        if nack {
            cx.counts.nacked += 1;
        } else if confirm_tag.is_some() {
            cx.counts.confirmed += 1;
        }
        if let Some((ticket, tag)) = ticket {
            if ticket.is_used() {
                if let PublishMode::Confirm { confirms, .. } = &self.mode {
                    confirms.wait_for(tag);
                }
                if nack {
                    ticket.fail();
                }
                // The publisher's own count: the outcome may be reported from now on.
                ticket.complete(true);
                self.confirm(confirm_tag);
                return;
            }
            ticket.complete(true);
        }
        if nack {
            self.nack(cx.outbound, confirm_tag);
        } else {
            self.confirm(confirm_tag);
        }
    }

    /// A confirm-mode publish that a queue refused: the acks gathered before it go out first,
    /// then its `basic.nack`, so that no `multiple` ack ever covers it.
    fn nack(&mut self, outbound: &Outbound, confirm_tag: Option<u64>) {
        let Some(tag) = confirm_tag else {
            return;
        };
        self.flush_confirms(outbound);
        if let PublishMode::Confirm {
            acked_to,
            pushed_to,
            confirms,
            ..
        } = &mut self.mode
        {
            confirms.nack(tag);
            *acked_to = tag;
            *pushed_to = tag;
        }
    }

    /// Marks a confirm-mode publish as done (its ack goes out with the read batch's).
    fn confirm(&mut self, confirm_tag: Option<u64>) {
        if let (Some(tag), PublishMode::Confirm { acked_to, .. }) = (confirm_tag, &mut self.mode) {
            *acked_to = tag;
            self.counters.confirm += 1;
        }
    }

    /// `basic.return` with `NO_ROUTE` for a mandatory message no queue would take.
    pub(super) fn return_unroutable(&self, cx: &ConnContext<'_>, publication: &Publication) {
        self.reply(
            cx,
            Method::BasicReturn(BasicReturn {
                reply_code: reply_code::NO_ROUTE,
                reply_text: ShortStr::from_static("NO_ROUTE"),
                exchange: publication.exchange.clone(),
                routing_key: publication.routing_key.clone(),
            }),
        );
        cx.outbound
            .with(|sink| sink.content(self.id(), &publication.message, self.delivery.frame_max));
    }

    /// Sends the confirms gathered since the last call as one `basic.ack` with `multiple`
    /// (up to the first publish still waiting for its commit).
    pub(crate) fn flush_confirms(&mut self, _outbound: &Outbound) {
        if let PublishMode::Confirm {
            acked_to,
            pushed_to,
            confirms,
            ..
        } = &mut self.mode
        {
            if *acked_to > *pushed_to {
                confirms.routed(*acked_to);
                *pushed_to = *acked_to;
            }
        }
    }
}
