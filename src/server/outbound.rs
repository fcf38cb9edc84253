//! A connection's outbound byte stream: frames are appended by whoever produces them (the
//! connection task, or a queue delivering to one of its consumers) and a single writer task
//! drains everything accumulated with as few syscalls as possible.
//!
//! Every octet buffered here, from the moment it is appended until the socket takes it, is
//! charged to the memory monitor, and the buffer bounds itself: above [`CONGESTED_BYTES`]
//! queues stop delivering to the connection, and above [`READ_PAUSE_BYTES`] the connection
//! stops reading its client (whose requests would only add replies) until the buffer is back
//! under half that. A client that pipelines requests and never reads holds a bounded amount.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dwellmq_codec::{
    constants::FRAME_END, encode_body_start, encode_header_raw, encode_heartbeat, encode_method,
    Method,
};
use dwellmq_core::queue::Congestion;
use dwellmq_core::{Body, Message};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::broker::memory::MemoryMonitor;

/// Buffers per `writev` call (Linux's IOV_MAX).
const MAX_IOVECS: usize = 1024;

/// Above this many buffered bytes the connection counts as congested: queues stop delivering to
/// its consumers until the writer has brought it back to half of it.
pub(crate) const CONGESTED_BYTES: usize = 4 << 20;

/// Above this many buffered bytes the connection stops reading its client until the writer has
/// brought it back to half of it. Above the congestion bound, so that deliveries stop first:
/// what still arrives past it is replies to requests already read, and one message at most.
pub(crate) const READ_PAUSE_BYTES: usize = 8 << 20;

#[derive(Default)]
struct Pending {
    /// Completed buffers in order, followed by `tail`.
    segments: Vec<Bytes>,
    segment_bytes: usize,
    tail: BytesMut,
    closed: bool,
    /// The writer holds a batch it has not finished writing.
    writing: bool,
    /// Octets appended and not yet taken by the socket (queued here or in the writer's
    /// batch): what is charged to the memory monitor.
    buffered: usize,
}

impl Pending {
    fn queued(&self) -> usize {
        self.segment_bytes + self.tail.len()
    }
}

/// The shared outbound buffer of one connection.
pub(crate) struct Outbound {
    pending: Mutex<Pending>,
    /// Wakes the writer task when data arrives on an empty buffer.
    data: Notify,
    /// Wakes the connection task when a congested buffer has drained.
    writable: Notify,
    /// Read by queues before they deliver to this connection's consumers.
    congested: Arc<Congestion>,
    /// Charged with every buffered octet.
    memory: Arc<MemoryMonitor>,
    /// Reading is paused until the buffer is back under half of [`READ_PAUSE_BYTES`]. Set and
    /// cleared under the `pending` lock; an atomic so that the read loop checks it cheaply
    /// between frames.
    read_paused: AtomicBool,
    /// Octets the socket has taken since the connection opened.
    written: AtomicU64,
}

/// Appends frames to a locked outbound buffer.
pub(crate) struct FrameSink<'a> {
    pending: &'a mut Pending,
}

impl FrameSink<'_> {
    /// Appends a method frame.
    pub(crate) fn method(&mut self, channel: u16, method: &Method) {
        encode_method(&mut self.pending.tail, channel, method);
    }

    /// Appends a content header and the body frames of `message`, split to `frame_max`.
    pub(crate) fn content(&mut self, channel: u16, message: &Message, frame_max: u32) {
        self.content_with(channel, message, &message.properties_encoded, frame_max);
    }

    /// The same, with `properties` (encoded) in place of the message's own.
    pub(crate) fn content_with(
        &mut self,
        channel: u16,
        message: &Message,
        properties: &Bytes,
        frame_max: u32,
    ) {
        let body = &message.body;
        encode_header_raw(
            &mut self.pending.tail,
            channel,
            dwellmq_codec::constants::BASIC_CLASS_ID,
            body.len() as u64,
            properties,
        );
        let chunk_max = (frame_max as usize).saturating_sub(8).max(1);
        let pending = &mut *self.pending;
        // Each body frame's payload goes out as its own buffers (vectored write): bodies are
        // never copied between the publisher's read buffer and this socket, whatever the size.
        let mut frame = |len: usize, pieces: &[Bytes]| {
            encode_body_start(&mut pending.tail, channel, len);
            let head = pending.tail.split().freeze();
            pending.segment_bytes += head.len() + len;
            pending.segments.push(head);
            pending.segments.extend(pieces.iter().cloned());
            pending.tail.extend_from_slice(&[FRAME_END]);
        };
        match &message.body {
            Body::Single(b) if b.len() <= chunk_max => {
                if !b.is_empty() {
                    frame(b.len(), std::slice::from_ref(b));
                }
            }
            body => body.for_each_frame(chunk_max, frame),
        }
    }

    /// Appends raw octets (the protocol header sent to a peer that asked for another version).
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.pending.tail.extend_from_slice(bytes);
    }

    /// Appends a heartbeat frame.
    pub(crate) fn heartbeat(&mut self) {
        encode_heartbeat(&mut self.pending.tail);
    }
}

impl Outbound {
    pub(crate) fn new(memory: Arc<MemoryMonitor>) -> Self {
        Outbound {
            pending: Mutex::new(Pending::default()),
            data: Notify::new(),
            writable: Notify::new(),
            congested: Arc::new(Congestion::with_cap(CONGESTED_BYTES)),
            memory,
            read_paused: AtomicBool::new(false),
            written: AtomicU64::new(0),
        }
    }

    /// Runs `f` with the buffer locked, then wakes the writer if the buffer was empty.
    /// Returns `None` once the connection is closed (nothing more is sent).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut FrameSink<'_>) -> R) -> Option<R> {
        let mut pending = self.pending.lock();
        if pending.closed {
            return None;
        }
        let was_empty = pending.tail.is_empty() && pending.segments.is_empty();
        let before = pending.queued();
        let result = f(&mut FrameSink {
            pending: &mut pending,
        });
        let added = pending.queued().saturating_sub(before);
        pending.buffered += added;
        self.memory.charge_bytes(added);
        self.congested.buffered_grew_to(pending.buffered);
        if pending.buffered > READ_PAUSE_BYTES {
            self.read_paused.store(true, Ordering::Release);
        }
        drop(pending);
        if was_empty {
            self.data.notify_one();
        }
        Some(result)
    }

    /// Appends one method frame.
    pub(crate) fn send_method(&self, channel: u16, method: &Method) {
        self.with(|sink| sink.method(channel, method));
    }

    /// The congestion flag queues read.
    pub(crate) fn congestion(&self) -> Arc<Congestion> {
        Arc::clone(&self.congested)
    }

    /// Stops accepting frames; the writer finishes what is queued and exits.
    pub(crate) fn close(&self) {
        self.pending.lock().closed = true;
        self.data.notify_one();
    }

    /// Waits until a congested buffer has drained, or a paused connection may read again.
    pub(crate) async fn writable(&self) {
        self.writable.notified().await
    }

    /// Asks the connection task to let queues deliver again (what they had decided to deliver
    /// is now buffered, see `Congestion::unreserve`).
    pub(crate) fn wake_queues(&self) {
        self.writable.notify_one();
    }

    /// Whether the connection must stop reading its client: its output is over
    /// [`READ_PAUSE_BYTES`] and has not yet drained to half of it.
    pub(crate) fn read_paused(&self) -> bool {
        self.read_paused.load(Ordering::Acquire)
    }

    /// Octets the socket has taken so far (progress of a client that reads).
    pub(crate) fn written_total(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Octets appended and not yet taken by the socket.
    pub(crate) fn buffered(&self) -> usize {
        self.pending.lock().buffered
    }

    /// The socket took `written` octets: gives them back to the memory monitor, and lifts the
    /// congestion and the read pause once the buffer is back under half their bounds.
    fn wrote(&self, written: usize) {
        let mut pending = self.pending.lock();
        let written = written.min(pending.buffered);
        pending.buffered -= written;
        self.memory.release_bytes(written);
        self.written.fetch_add(written as u64, Ordering::Relaxed);
        self.congested.set_buffered(pending.buffered);
        let mut wake = self.congested.relieve();
        if pending.buffered <= READ_PAUSE_BYTES / 2 && self.read_paused.load(Ordering::Acquire) {
            self.read_paused.store(false, Ordering::Release);
            wake = true;
        }
        drop(pending);
        if wake {
            self.writable.notify_one();
        }
    }

    /// The writer is gone: nothing buffered will be written, so its charge is given back (and
    /// a connection paused on it may go on to see that its peer is gone).
    pub(crate) fn abandon(&self) {
        let mut pending = self.pending.lock();
        pending.closed = true;
        let left = std::mem::take(&mut pending.buffered);
        pending.segments.clear();
        pending.segment_bytes = 0;
        pending.tail.clear();
        self.read_paused.store(false, Ordering::Release);
        self.memory.release_bytes(left);
        self.congested.set_buffered(0);
        drop(pending);
        self.congested.set(false);
        self.writable.notify_one();
    }

    /// Takes everything queued (segments then tail). Empty with `closed == true` means stop.
    fn take(&self, segments: &mut Vec<Bytes>) -> bool {
        let mut pending = self.pending.lock();
        pending.writing = !pending.segments.is_empty() || !pending.tail.is_empty();
        segments.append(&mut pending.segments);
        pending.segment_bytes = 0;
        if !pending.tail.is_empty() {
            segments.push(pending.tail.split().freeze());
        }
        pending.closed
    }
}

impl Drop for Outbound {
    /// Whatever is still charged (the writer never ran) goes back with the buffer.
    fn drop(&mut self) {
        let left = std::mem::take(&mut self.pending.get_mut().buffered);
        self.memory.release_bytes(left);
    }
}

impl crate::broker::IdleProbe for Outbound {
    fn unwritten(&self) -> Option<crate::handle::UnwrittenOutput> {
        let pending = self.pending.lock();
        let queued_bytes = pending.queued();
        if pending.closed || (queued_bytes == 0 && !pending.writing) {
            return None;
        }
        Some(crate::handle::UnwrittenOutput {
            queued_bytes,
            writing: pending.writing,
        })
    }

    fn buffered(&self) -> usize {
        Outbound::buffered(self)
    }
}

/// Drains `outbound` into `socket` until the connection closes or a write fails.
pub(crate) async fn run_writer<W>(outbound: std::sync::Arc<Outbound>, mut socket: W)
where
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let mut batch: Vec<Bytes> = Vec::new();
    loop {
        let closed = outbound.take(&mut batch);
        if batch.is_empty() {
            outbound.pending.lock().writing = false;
            if closed {
                break;
            }
            outbound.data.notified().await;
            continue;
        }
        if write_all_vectored(&mut socket, &mut batch, |n| outbound.wrote(n))
            .await
            .is_err()
        {
            break;
        }
    }
    outbound.abandon();
    let _ = socket.shutdown().await;
}

/// Writes the whole batch, telling `progress` how many octets each write took.
async fn write_all_vectored<W>(
    socket: &mut W,
    batch: &mut Vec<Bytes>,
    progress: impl Fn(usize),
) -> std::io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    use bytes::Buf;
    use std::io::IoSlice;
    use tokio::io::AsyncWriteExt;
    let mut first = 0;
    while first < batch.len() {
        let slices: Vec<IoSlice<'_>> = batch[first..]
            .iter()
            .take(MAX_IOVECS)
            .map(|b| IoSlice::new(b))
            .collect();
        let mut written = socket.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        progress(written);
        while written > 0 {
            let head = &mut batch[first];
            if written >= head.len() {
                written -= head.len();
                first += 1;
            } else {
                head.advance(written);
                written = 0;
            }
        }
    }
    batch.clear();
    Ok(())
}
