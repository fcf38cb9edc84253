//! The simulation's at-least-once dead-lettering: `q3` dead-letters rejected and expired
//! messages through `dlx3` into `dead3`, which is sometimes unbound and sometimes full; what
//! `dead3` does not take stays kept in `q3`. The model's rule: a confirmed message in `q3` is
//! in `q3`, kept by `q3` or in `dead3`, exactly once, across every failure; and at the end of
//! a run, once `dead3` is bound and has room, every kept message reaches it.

use std::collections::BTreeSet;

use lapin::options::{BasicAckOptions, BasicRejectOptions, QueueBindOptions};
use lapin::types::FieldTable;

use super::body::id_of;
use super::model::Place;
use super::{Sim, DLX3};

/// Bound for the last phase's rounds: each lets `dead3` take up to 4 kept messages.
const DELIVERY_ROUNDS: usize = 100;

impl Sim {
    /// Ids of the dead-lettered messages `queue` keeps.
    pub(super) fn kept_in(&self, queue: &str) -> Vec<u64> {
        self.broker()
            .peek_kept_dead_letters("/", queue, usize::MAX)
            .iter()
            .map(|m| id_of(&m.body))
            .collect()
    }

    /// Rejects one message of `q3`: it goes to `dead3` or, refused or unroutable, is kept.
    pub(super) async fn reject_at_least_once(&mut self) -> String {
        let Some((id, tag)) = self.get("q3").await else {
            return "get q3: empty".into();
        };
        if let Err(e) = self
            .ch()
            .basic_reject(tag, BasicRejectOptions { requeue: false })
            .await
        {
            self.fail(&format!("reject failed: {e}"));
        }
        self.round_trip("q3").await;
        let to = vec![Place::Kept("q3".into()), Place::Queue("dead3".into())];
        self.model.dead_lettered(id, "q3", to, "rejected");
        format!("get {id} from q3 and reject it (to dead3 or kept)")
    }

    /// Binds `dead3` to `dlx3` (a new binding routes what `q3` keeps again at once), or
    /// unbinds it. Either is harmless when already so.
    pub(super) async fn bind_dead3(&mut self, bind: bool) {
        let ch = self.ch().clone();
        let done = if bind {
            ch.queue_bind(
                "dead3".into(),
                DLX3.into(),
                "q3".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        } else {
            ch.queue_unbind(
                "dead3".into(),
                DLX3.into(),
                "q3".into(),
                FieldTable::default(),
            )
            .await
        };
        if let Err(e) = done {
            self.fail(&format!("(un)binding dead3 (bind: {bind}) failed: {e}"));
        }
    }

    pub(super) async fn toggle_dead3(&mut self) -> String {
        let bind = self.rng.below(2) == 0;
        self.bind_dead3(bind).await;
        let kept = self.kept_in("q3").len();
        if bind {
            format!("bind dead3 ({kept} kept by q3 now)")
        } else {
            format!("unbind dead3 ({kept} kept by q3 now)")
        }
    }

    /// The run's last phase: `dead3` is emptied and bound again, round after round, until `q3`
    /// keeps nothing; every message it kept at the start must have reached `dead3`.
    pub(super) async fn deliver_kept(&mut self) -> String {
        let kept: BTreeSet<u64> = self.kept_in("q3").into_iter().collect();
        let mut delivered = BTreeSet::new();
        for _ in 0..DELIVERY_ROUNDS {
            while let Some((id, tag)) = self.get("dead3").await {
                if let Err(e) = self.ch().basic_ack(tag, BasicAckOptions::default()).await {
                    self.fail(&format!("ack failed: {e}"));
                }
                self.model.removed(id, "acked from dead3");
                delivered.insert(id);
            }
            self.round_trip("dead3").await;
            if self.kept_in("q3").is_empty() {
                break;
            }
            // A binding added routes the kept messages again at once.
            self.bind_dead3(false).await;
            self.bind_dead3(true).await;
        }
        let left = self.kept_in("q3");
        if !left.is_empty() {
            self.fail(&format!(
                "q3 still keeps {left:?} after {DELIVERY_ROUNDS} rounds with dead3 bound and empty"
            ));
        }
        let missing: Vec<u64> = kept.difference(&delivered).copied().collect();
        if !missing.is_empty() {
            self.fail(&format!(
                "kept messages {missing:?} never reached dead3 once it was bound"
            ));
        }
        self.check("after the kept messages were delivered", false)
            .await;
        self.report.kept_delivered += kept.len() as u64;
        format!("{} kept messages delivered to dead3", kept.len())
    }
}
