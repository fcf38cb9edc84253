//! A message body as it arrived: slices of the publisher's read buffer, never joined.

use std::sync::Arc;

use bytes::Bytes;

/// A message body. Most bodies arrive in one frame and stay one slice; a body split over
/// several frames keeps its frames' slices instead of being copied into one buffer.
#[derive(Debug, Clone)]
pub enum Body {
    /// One contiguous slice (also the empty body).
    Single(Bytes),
    /// Several slices in order, as the body frames carried them.
    Chunked(Arc<[Bytes]>),
}

impl Default for Body {
    fn default() -> Self {
        Body::Single(Bytes::new())
    }
}

impl Body {
    /// Builds a body from its frames' payloads.
    pub fn from_chunks(mut chunks: Vec<Bytes>) -> Body {
        match chunks.len() {
            0 => Body::default(),
            1 => Body::Single(chunks.pop().unwrap_or_default()),
            _ => Body::Chunked(chunks.into()),
        }
    }

    /// The slices, in order.
    pub fn chunks(&self) -> &[Bytes] {
        match self {
            Body::Single(b) => std::slice::from_ref(b),
            Body::Chunked(chunks) => chunks,
        }
    }

    /// Total length in octets.
    pub fn len(&self) -> usize {
        match self {
            Body::Single(b) => b.len(),
            Body::Chunked(chunks) => chunks.iter().map(Bytes::len).sum(),
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends, for each frame of at most `frame_payload_max` octets, the slices that make it
    /// up (`frame(len, slices)`), without copying.
    pub fn for_each_frame(&self, frame_payload_max: usize, mut frame: impl FnMut(usize, &[Bytes])) {
        let max = frame_payload_max.max(1);
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut filled = 0;
        for chunk in self.chunks() {
            let mut offset = 0;
            while offset < chunk.len() {
                let take = (max - filled).min(chunk.len() - offset);
                pieces.push(chunk.slice(offset..offset + take));
                filled += take;
                offset += take;
                if filled == max {
                    frame(filled, &pieces);
                    pieces.clear();
                    filled = 0;
                }
            }
        }
        if filled > 0 {
            frame(filled, &pieces);
        }
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::Single(b)
    }
}

impl PartialEq<[u8]> for Body {
    fn eq(&self, other: &[u8]) -> bool {
        let mut rest = other;
        for chunk in self.chunks() {
            let Some((head, tail)) = rest.split_at_checked(chunk.len()) else {
                return false;
            };
            if head != &chunk[..] {
                return false;
            }
            rest = tail;
        }
        rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(body: &Body, max: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        body.for_each_frame(max, |len, pieces| {
            let joined: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
            assert_eq!(joined.len(), len);
            out.push(joined);
        });
        out
    }

    #[test]
    fn reframes_chunks_to_any_frame_size_without_losing_bytes() {
        let body = Body::from_chunks(vec![
            Bytes::from_static(b"abcde"),
            Bytes::from_static(b"fg"),
            Bytes::from_static(b"hijklmn"),
        ]);
        assert_eq!(body.len(), 14);
        assert!(body == *b"abcdefghijklmn".as_slice());
        assert_eq!(
            frames(&body, 4),
            [
                b"abcd".to_vec(),
                b"efgh".to_vec(),
                b"ijkl".to_vec(),
                b"mn".to_vec()
            ]
        );
        assert_eq!(frames(&body, 100), [b"abcdefghijklmn".to_vec()]);
        assert!(frames(&Body::default(), 4).is_empty());
    }

    #[test]
    fn a_single_chunk_stays_single() {
        assert!(matches!(
            Body::from_chunks(vec![Bytes::from_static(b"x")]),
            Body::Single(_)
        ));
    }
}
