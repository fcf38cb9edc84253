//! What a queue keeps on disk only: the types of its paged-out run.
//!
//! A durable classic queue whose ready list grows past its read-ahead window keeps the
//! messages further back only in the store, as one contiguous stretch of its order (the
//! *run*): a cursor (first position, end position, count, body octets) instead of a slot per
//! message. Under memory pressure any classic queue (durable or not) also *spills* the
//! messages beyond its window that the store does not have (transient ones): they are
//! written to a table the next start drops, and join the run the same way. The queue asks its owner for the next page of the run ([`PageRequest`]) when the
//! messages in memory in front of its consumers run low, and takes it back as
//! [`StoredEntry`]s. Core does no IO: the owner reads the store.

mod deadlines;

pub use deadlines::{RunDeadlines, StretchLimits};

use crate::packed::PackedMessage;

/// How much of a paging queue's ready list stays in memory in front of its consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    /// Ready messages kept in memory before the rest is left in the store.
    pub window_messages: usize,
    /// Their body octets, at most (whichever limit is reached first).
    pub window_bytes: u64,
}

impl Paging {
    /// The broker's default: 2,048 messages or 4 MiB in memory per queue. A consumer that
    /// keeps up never reaches the run; one that drains a backlog reads a page of
    /// [`Paging::page_len`] while it still has the other half in memory.
    pub const DEFAULT: Paging = Paging {
        window_messages: 2048,
        window_bytes: 4 << 20,
    };

    /// Messages asked for per page: half the window, at least one.
    pub fn page_len(&self) -> usize {
        (self.window_messages / 2).max(1)
    }

    /// Body octets read per page at most (at least one message): half the window's.
    pub fn page_bytes(&self) -> u64 {
        (self.window_bytes / 2).max(1)
    }

    /// A stretch of the run is a page's worth (see [`RunDeadlines`]).
    pub fn stretch_limits(&self) -> StretchLimits {
        StretchLimits {
            messages: self.page_len(),
            bytes: self.page_bytes(),
        }
    }
}

/// The stored messages of a queue that are not in memory: positions `first_seq..end_seq`
/// of its order, every stored message there being one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedRun {
    /// Where the next page is read from.
    pub first_seq: u64,
    /// The first position after the run (messages from here on are in memory).
    pub end_seq: u64,
    /// Messages in the run.
    pub count: u64,
    /// Their body octets.
    pub bytes: u64,
}

/// What a page is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Its messages join the head in memory, in front of consumers (or of a head-only
    /// expiry that must see them at the head).
    Head,
    /// Its due messages expire where they are (on-time expiry of a stretch of the run); the
    /// others stay in the store only.
    Expiry,
}

/// A page to read: up to `limit` stored messages at positions `from_seq..end_seq`, handed
/// back to [`crate::queue::QueueState::page_in`] with `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// What the page is for.
    pub kind: PageKind,
    /// Asked for because a deadline passed: an owner on a manual clock reads it at once, so
    /// that advancing the clock plays out the expiry it causes before it returns.
    pub due: bool,
    /// Which run it reads: a purge or a delete starts another, and a page of an earlier one
    /// is dropped when it comes back.
    pub generation: u64,
    /// The first position to read.
    pub from_seq: u64,
    /// Where the run ends.
    pub end_seq: u64,
    /// Messages to read at most.
    pub limit: usize,
}

/// A message of the run, read back from the store.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    /// Its position.
    pub seq: u64,
    /// The message as stored.
    pub message: PackedMessage,
    /// When it expires (ms since the epoch), if it does.
    pub expires_at: Option<u64>,
    /// Whether it was delivered before (a restart's redelivered flag).
    pub redelivered: bool,
    /// Whether it was spilled (a transient message left on disk under memory pressure)
    /// rather than persisted: a page holding one has the spilled records up to its end
    /// dropped once it is taken in.
    pub spilled: bool,
}

/// A page read back: the messages, and where the read stopped.
#[derive(Debug, Clone)]
pub struct Page {
    /// The messages, in queue order.
    pub entries: Vec<StoredEntry>,
    /// The position after the last one read (skipped malformed records included): where
    /// the next page starts.
    pub next_seq: u64,
    /// Messages read but not returned (malformed): they leave the run's count all the same.
    pub skipped: u64,
    /// The read reached the end of the run as its request knew it (`PageRequest::end_seq`):
    /// nothing more is stored up to there. The run may have grown since.
    pub exhausted: bool,
}

/// The page `request` asks for, from `stored`: up to `request.limit` stored messages from its
/// first position on, in position order (what the store returned for that limit), stopping
/// at the request's end or once `max_bytes` of bodies are read (at least one message).
pub fn assemble_page(stored: Vec<StoredEntry>, request: PageRequest, max_bytes: u64) -> Page {
    let mut page = Page {
        exhausted: stored.len() < request.limit,
        entries: Vec::with_capacity(stored.len()),
        next_seq: request.from_seq,
        skipped: 0,
    };
    let mut bytes = 0;
    for entry in stored {
        if entry.seq >= request.end_seq {
            page.exhausted = true;
            break;
        }
        if bytes >= max_bytes && !page.entries.is_empty() {
            page.exhausted = false;
            break;
        }
        bytes += entry.message.body_len() as u64;
        page.next_seq = entry.seq + 1;
        page.entries.push(entry);
    }
    if page.exhausted {
        page.next_seq = request.end_seq;
    }
    page
}
