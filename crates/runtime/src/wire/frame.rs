//! Length-delimited frames (a 4-byte big-endian length, then the body) that cost a daemon only
//! the bytes that actually arrived, charged to its [`MemoryBudget`].
//!
//! tokio-util's `LengthDelimitedCodec` reserves a frame's whole announced length as soon as its
//! header arrives, so 64 peers each announcing 15 MB and sending a few bytes made an agent
//! reserve ~1 GB. This codec grows its buffer only as bytes come, charges the buffer of a frame
//! still arriving to the daemon's budget before growing it, and refuses (closing that one
//! connection) a frame that would pass the budget or the frame limit. It notes each frame's
//! progress (bytes in, length announced) in the connection's [`Activity`], from which the
//! daemon closes frames arriving too slowly and picks the slowest to evict.

use super::budget::{Charge, MemoryBudget};
use super::limits::Activity;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io;
use std::sync::Arc;
use tokio_util::codec::{Decoder, Encoder};

const HEAD: usize = 4;
/// Smallest step a buffer grows by for a frame still arriving.
const GROW_MIN: usize = 64 * 1024;
/// An empty buffer larger than this is replaced by a small one, so a connection that once
/// carried a large frame does not keep its memory while idle.
const SHRINK_ABOVE: usize = 1 << 20;
/// A buffer this small is not charged (every connection has one; charging it would take the
/// budget's lock on every small request): at most this much per connection escapes the budget.
const UNCHARGED: usize = 16 * 1024;

/// The frame codec of every gridwise connection.
#[derive(Debug)]
pub struct FrameCodec {
    max_frame: usize,
    /// Body length of the frame being read, once its header is in.
    want: Option<usize>,
    /// The arriving frame's buffer, held against the daemon's budget (accepting side only).
    charge: Option<Charge>,
    activity: Option<Arc<Activity>>,
    seen: usize,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl FrameCodec {
    /// A codec refusing frames over `max_frame` bytes, without a budget (the dialling side).
    pub fn new(max_frame: usize) -> Self {
        Self {
            max_frame,
            want: None,
            charge: None,
            activity: None,
            seen: 0,
        }
    }

    /// A codec whose frames in progress are charged to `budget` and whose reads and frame
    /// progress are noted in `activity` (the accepting side).
    pub fn guarded(max_frame: usize, budget: &Arc<MemoryBudget>, activity: Arc<Activity>) -> Self {
        Self {
            charge: Some(budget.empty_charge()),
            activity: Some(activity),
            ..Self::new(max_frame)
        }
    }

    /// The largest frame body sent or received, bytes (the 4-byte length header not counted).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Raises or lowers the frame limit (after the hello, which is read with a small one).
    pub fn set_max_frame(&mut self, max: usize) {
        self.max_frame = max;
    }

    /// Charges the buffer of a frame still arriving (or nothing between frames), growing it
    /// ahead of the reads so that its capacity is what is charged.
    fn account(&mut self, src: &mut BytesMut) -> io::Result<()> {
        let mid = self.want.is_some() || !src.is_empty();
        if let Some(a) = &self.activity {
            if mid {
                // Until the header is in, `src` holds only header bytes; after, only body
                // bytes of this frame (a longer `src` would have completed it).
                let head = if self.want.is_some() { HEAD } else { 0 };
                a.frame_arriving(
                    (src.len() + head) as u64,
                    self.want.map(|n| (n + HEAD) as u64),
                );
            } else {
                a.frame_done();
            }
        }
        let Some(charge) = &mut self.charge else {
            return Ok(());
        };
        if !mid {
            charge.resize(0);
            return Ok(());
        }
        let total = self.want.map_or(HEAD, |n| n);
        let spare = src.capacity() - src.len();
        let mut cap = src.capacity();
        // The room kept ahead of the reads grows with what has arrived: a frame trickled a
        // byte at a time stays in the buffer it has, where asking for GROW_MIN ahead at once
        // made every such connection hold 64 KiB (4,096 of them: a quarter of a GiB).
        let ahead = GROW_MIN.min(src.len());
        if spare == 0 || (spare < ahead && src.len() < total) {
            // Double, but never past the frame's end.
            cap = (cap * 2)
                .max(src.len() + GROW_MIN)
                .min(total.max(src.len() + 1));
        }
        let charged = if cap <= UNCHARGED { 0 } else { cap as u64 };
        if !charge.resize(charged) {
            return Err(invalid(format!(
                "receiving this frame ({} of {total} bytes so far) would pass the daemon's memory budget: closing the connection",
                src.len()
            )));
        }
        if cap > src.capacity() {
            src.reserve(cap - src.len());
        }
        Ok(())
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<BytesMut>> {
        if src.len() != self.seen
            && let Some(a) = &self.activity
        {
            a.touch();
        }
        let n = match self.want {
            Some(n) => n,
            None => {
                if src.len() < HEAD {
                    self.account(src)?;
                    self.seen = src.len();
                    return Ok(None);
                }
                let n = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
                if n > self.max_frame {
                    return Err(invalid(format!(
                        "a frame of {n} bytes is over the limit of {} bytes (max_frame_bytes)",
                        self.max_frame
                    )));
                }
                src.advance(HEAD);
                self.want = Some(n);
                n
            }
        };
        if src.len() < n {
            self.account(src)?;
            self.seen = src.len();
            return Ok(None);
        }
        let frame = src.split_to(n);
        self.want = None;
        if let Some(a) = &self.activity {
            // Bytes already here belong to the next frame, whose clock starts now.
            a.frame_done();
        }
        if src.is_empty() && src.capacity() > SHRINK_ABOVE {
            *src = BytesMut::new();
        }
        self.account(src)?;
        self.seen = src.len();
        Ok(Some(frame))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = io::Error;

    fn encode(&mut self, data: Bytes, dst: &mut BytesMut) -> io::Result<()> {
        if data.len() > self.max_frame || data.len() > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a frame of {} bytes is over the limit of {} bytes (max_frame_bytes)",
                    data.len(),
                    self.max_frame
                ),
            ));
        }
        dst.reserve(HEAD + data.len());
        dst.put_u32(data.len() as u32);
        dst.extend_from_slice(&data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn frames_round_trip_in_any_chunking() {
        let mut enc = FrameCodec::new(1 << 20);
        let mut wire = BytesMut::new();
        for body in [&b"abc"[..], b"", &[7u8; 70_000]] {
            enc.encode(Bytes::copy_from_slice(body), &mut wire).unwrap();
        }
        let bytes = wire.freeze();
        for chunk in [1, 3, 4096, 1 << 20] {
            let mut dec = FrameCodec::new(1 << 20);
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            for piece in bytes.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(f) = dec.decode(&mut buf).unwrap() {
                    out.push(f.len());
                }
            }
            assert_eq!(out, vec![3, 0, 70_000], "chunk {chunk}");
        }
    }

    #[test]
    fn an_announced_frame_costs_only_what_arrived() {
        let budget = MemoryBudget::new(64 << 20);
        let activity = Arc::new(Activity::default());
        let mut dec = FrameCodec::guarded(1 << 30, &budget, activity.clone());
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&(900u32 << 20).to_be_bytes());
        buf.extend_from_slice(&[0u8; 10]);
        assert!(dec.decode(&mut buf).unwrap().is_none());
        assert!(buf.capacity() < 1 << 20, "{}", buf.capacity());
        assert!(budget.total_bytes() - budget.available_bytes() < 1 << 20);
        assert!(activity.mid_frame());
    }

    #[test]
    fn a_trickled_frame_keeps_the_buffer_it_has() {
        let budget = MemoryBudget::new(64 << 20);
        let mut dec = FrameCodec::guarded(1 << 30, &budget, Arc::new(Activity::default()));
        let mut buf = BytesMut::with_capacity(8 * 1024);
        buf.extend_from_slice(&(1u32 << 20).to_be_bytes());
        for _ in 0..200 {
            assert!(dec.decode(&mut buf).unwrap().is_none());
            buf.extend_from_slice(&[0]);
        }
        // 4,096 such connections must not hold 64 KiB each.
        assert!(buf.capacity() <= 8 * 1024, "{}", buf.capacity());
        assert_eq!(budget.total_bytes(), budget.available_bytes());
    }

    #[test]
    fn frames_past_the_budget_or_the_limit_are_refused() {
        let budget = MemoryBudget::new(1 << 20);
        let mut dec = FrameCodec::guarded(8 << 20, &budget, Arc::new(Activity::default()));
        let mut buf = BytesMut::from(&framed(&[1u8; 4 << 20])[..(3 << 20)]);
        let e = dec.decode(&mut buf).unwrap_err();
        assert!(e.to_string().contains("memory budget"), "{e}");
        let mut dec = FrameCodec::new(100);
        let mut buf = BytesMut::from(&framed(&[0u8; 101])[..]);
        let e = dec.decode(&mut buf).unwrap_err();
        assert!(e.to_string().contains("over the limit of 100"), "{e}");
        let mut enc = FrameCodec::new(100);
        assert!(
            enc.encode(Bytes::from(vec![0u8; 101]), &mut BytesMut::new())
                .is_err()
        );
    }

    #[test]
    fn a_completed_frame_gives_its_charge_back() {
        let budget = MemoryBudget::new(16 << 20);
        let mut dec = FrameCodec::guarded(8 << 20, &budget, Arc::new(Activity::default()));
        let wire = framed(&[5u8; 3 << 20]);
        let mut buf = BytesMut::new();
        let mut got = None;
        for piece in wire.chunks(100_000) {
            buf.extend_from_slice(piece);
            if let Some(f) = dec.decode(&mut buf).unwrap() {
                got = Some(f);
            }
        }
        assert_eq!(got.unwrap().len(), 3 << 20);
        assert_eq!(budget.available_bytes(), 16 << 20);
    }

    #[test]
    fn each_frame_notes_its_progress_and_restarts_the_clock() {
        let budget = MemoryBudget::new(64 << 20);
        let activity = Arc::new(Activity::default());
        let mut dec = FrameCodec::guarded(1 << 20, &budget, activity.clone());
        let mut buf = BytesMut::from(&[0u8, 0][..]);
        assert!(dec.decode(&mut buf).unwrap().is_none());
        assert_eq!(activity.frame_progress(), Some((2, None)));
        buf.extend_from_slice(&[0, 100]);
        buf.extend_from_slice(&[1u8; 10]);
        assert!(dec.decode(&mut buf).unwrap().is_none());
        assert_eq!(activity.frame_progress(), Some((14, Some(104))));
        // The rest, and three bytes of the next frame: that one is counted afresh.
        buf.extend_from_slice(&[1u8; 90]);
        buf.extend_from_slice(&[0, 0, 0]);
        assert_eq!(dec.decode(&mut buf).unwrap().unwrap().len(), 100);
        assert!(dec.decode(&mut buf).unwrap().is_none());
        assert_eq!(activity.frame_progress(), Some((3, None)));
        buf.extend_from_slice(&[0]);
        assert_eq!(dec.decode(&mut buf).unwrap().unwrap().len(), 0);
        assert_eq!(activity.frame_progress(), None);
    }

    #[tokio::test]
    async fn a_trickled_frame_ends_its_connection_a_fast_large_one_does_not() {
        use super::super::limits::{ConnLimits, Guarded};
        use futures::StreamExt;
        use std::time::Duration;
        use tokio::io::AsyncWriteExt;
        // The default pace (32 KiB/s) after a short grace; the stall timeout (60 s) never
        // comes into it.
        let limits = ConnLimits {
            frame_grace: Duration::from_millis(100),
            ..ConnLimits::default()
        };
        let budget = MemoryBudget::new(64 << 20);
        let open = || {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            let activity = Arc::new(Activity::default());
            let codec = FrameCodec::guarded(32 << 20, &budget, activity.clone());
            let framed = tokio_util::codec::Framed::new(theirs, codec);
            let peer = std::net::SocketAddr::from(([127, 0, 0, 2], 1));
            (ours, Guarded::new(framed, activity, &limits, peer))
        };
        let bound = Duration::from_secs(20);
        // A frame announcing 1 MiB, then a byte every 10 ms: never silent, always behind.
        let (mut w, mut g) = open();
        let trickle = tokio::spawn(async move {
            w.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
            while w.write_all(&[0]).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let end = tokio::time::timeout(bound, g.next()).await;
        trickle.abort();
        assert!(
            matches!(end, Ok(None)),
            "the trickled frame was not closed: {end:?}"
        );
        // 16 MiB coming as fast as it can: delivered.
        let (mut w, mut g) = open();
        let sender = tokio::spawn(async move {
            w.write_all(&framed(&vec![7u8; 16 << 20])).await.unwrap();
            w
        });
        let got = tokio::time::timeout(bound, g.next()).await;
        let _w = sender.await.unwrap();
        match got {
            Ok(Some(Ok(f))) => assert_eq!(f.len(), 16 << 20),
            other => panic!("the fast frame did not arrive: {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_stay_within_the_budget(
            bytes in proptest::collection::vec(any::<u8>(), 0..4096),
            chunk in 1usize..512,
        ) {
            let budget = MemoryBudget::new(256 << 10);
            let mut dec = FrameCodec::guarded(1 << 20, &budget, Arc::new(Activity::default()));
            let mut buf = BytesMut::new();
            for piece in bytes.chunks(chunk) {
                buf.extend_from_slice(piece);
                loop {
                    match dec.decode(&mut buf) {
                        Ok(Some(f)) => prop_assert!(f.len() <= 1 << 20),
                        Ok(None) => break,
                        Err(_) => return Ok(()),
                    }
                }
                prop_assert!(buf.capacity() <= (256 << 10) + 4096);
            }
        }
    }
}
