//! Pause points a test closes so that a race it is about happens every time, not once in a
//! while: a page read in flight while its queue is deleted, a bind stopped between finding its
//! destination and adding the binding while the destination is deleted.

use std::time::Duration;

use super::BrokerHandle;

/// How long a held page read waits at most for [`BrokerHandle::release_page_reads`].
const PAGE_HOLD_LIMIT: Duration = Duration::from_secs(30);

impl BrokerHandle {
    /// Page reads (a paging queue's messages read back from the store) stop after reading and
    /// before handing the page to their queue, until [`BrokerHandle::release_page_reads`] (or
    /// 30 s): the page is in flight while the test acts on the queue.
    pub fn hold_page_reads(&self) {
        self.state.hooks().page_reads.close(PAGE_HOLD_LIMIT);
    }

    /// Hands the held pages over and lets later reads through.
    pub fn release_page_reads(&self) {
        self.state.hooks().page_reads.open();
    }

    /// Page reads held now.
    pub fn page_reads_held(&self) -> usize {
        self.state.hooks().page_reads.waiting()
    }

    /// Binds stop after finding their destination and before adding the binding, each for
    /// `max_wait` at most, until [`BrokerHandle::resume_binds`]. The bind's thread (a runtime
    /// worker) waits, with whatever the bind holds: keep `max_wait` short.
    pub fn pause_binds(&self, max_wait: Duration) {
        self.state.hooks().binds.close(max_wait);
    }

    /// Lets the paused binds go on, and later ones through.
    pub fn resume_binds(&self) {
        self.state.hooks().binds.open();
    }

    /// Binds that stopped at the pause since [`BrokerHandle::pause_binds`], those that went on
    /// since included.
    pub fn binds_stopped(&self) -> usize {
        self.state.hooks().binds.stopped()
    }
}
