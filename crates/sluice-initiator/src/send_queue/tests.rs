use std::task::Waker;

use proptest::collection::vec;
use proptest::prelude::*;
use sluice_proto::framing::encode;
use sluice_proto::pdu::arbitrary;

use super::*;

/// A writer that takes 1 to a few bytes per call, across buffer boundaries of a vectored
/// write, and now and then takes nothing (`Pending`) — a socket at its slowest.
struct Trickle {
    wire: Vec<u8>,
    /// Bytes taken per call, cycled through.
    takes: Vec<usize>,
    calls: usize,
}

impl Trickle {
    fn new(takes: Vec<usize>) -> Self {
        Self {
            wire: Vec::new(),
            takes,
            calls: 0,
        }
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let call = self.calls;
        self.calls += 1;
        if call % 5 == 4 {
            // The tests poll again at once; no waker is needed.
            return Poll::Pending;
        }
        let mut room = self.takes[call % self.takes.len()].max(1);
        let mut taken = 0;
        for buf in bufs {
            let n = room.min(buf.len());
            self.wire.extend_from_slice(&buf[..n]);
            room -= n;
            taken += n;
            if room == 0 {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Polls one write until it is ready (the writer's `Pending` is momentary).
fn write_once(q: &mut SendQueue, wr: &mut Trickle) -> io::Result<usize> {
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(r) = q.poll_write(Pin::new(&mut *wr), &mut cx) {
            return r;
        }
    }
}

fn encoded(pdus: &[Pdu], digests: Digests) -> Vec<u8> {
    let mut out = BytesMut::new();
    for pdu in pdus {
        encode(pdu, digests, &mut out);
    }
    out.to_vec()
}

/// Any PDU, or a Data-Out whose data segment is up to a few KiB of any length (every
/// padding length, above and below the copy threshold).
fn pdu() -> impl Strategy<Value = Pdu> {
    prop_oneof![
        arbitrary::pdu(),
        (arbitrary::data_out(), 0usize..5000).prop_map(|(mut d, len)| {
            d.data = (0..len)
                .map(|i| (i * 7 + 3) as u8)
                .collect::<Vec<_>>()
                .into();
            Pdu::DataOut(d)
        }),
    ]
}

proptest! {
    /// Whatever is queued, and however little the writer takes per call, the bytes written
    /// are the PDUs' `encode` outputs back to back, and each PDU's reported wire length is
    /// its `encode` length.
    #[test]
    fn writes_what_encode_gives(
        pdus in vec(pdu(), 0..12),
        header in any::<bool>(),
        data in any::<bool>(),
        own_chunk_min in prop_oneof![Just(OWN_CHUNK_MIN), 1usize..400],
        takes in vec(1usize..700, 1..8),
        writes_between in vec(0usize..4, 12),
    ) {
        let digests = Digests { header, data };
        let mut q = SendQueue::with_own_chunk_min(own_chunk_min);
        let mut wr = Trickle::new(takes);
        let mut queued = 0;
        // Queue PDUs while earlier ones are partly written, as the driver does.
        for (pdu, writes) in pdus.iter().zip(&writes_between) {
            let len = q.push(pdu, digests);
            prop_assert_eq!(len, encoded(std::slice::from_ref(pdu), digests).len());
            queued += len;
            prop_assert_eq!(q.len(), queued - wr.wire.len());
            for _ in 0..*writes {
                if q.is_empty() {
                    break;
                }
                let n = write_once(&mut q, &mut wr).unwrap();
                prop_assert!(n > 0);
                prop_assert_eq!(q.len(), queued - wr.wire.len());
            }
        }
        while !q.is_empty() {
            write_once(&mut q, &mut wr).unwrap();
        }
        prop_assert_eq!(wr.wire, encoded(&pdus, digests));
        prop_assert!(q.chunks.is_empty() && q.tail.is_empty());
    }
}

fn data_out(data: Bytes) -> Pdu {
    Pdu::DataOut(sluice_proto::pdu::DataOut {
        final_bit: true,
        lun: Default::default(),
        itt: sluice_proto::seq::Itt(7),
        ttt: sluice_proto::seq::Ttt::RESERVED,
        exp_stat_sn: Default::default(),
        data_sn: 0,
        buffer_offset: 0,
        data,
    })
}

/// A long data segment is queued as the very bytes the PDU carries (no copy), a short one is
/// copied into the tail beside its header.
#[test]
fn long_data_segments_are_not_copied() {
    let long = Bytes::from(vec![0xa5u8; OWN_CHUNK_MIN + 3]);
    let short = Bytes::from(vec![0x5au8; OWN_CHUNK_MIN - 1]);
    let mut q = SendQueue::default();
    let digests = Digests {
        header: true,
        data: true,
    };
    q.push(&data_out(long.clone()), digests);
    q.push(&data_out(short.clone()), digests);
    let shared: Vec<_> = q
        .chunks
        .iter()
        .filter(|c| c.as_ptr() == long.as_ptr())
        .collect();
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0].len(), long.len());
    assert!(q.chunks.iter().all(|c| c.as_ptr() != short.as_ptr()));
    // The header chunk, the data; the trailer and the short PDU whole in the tail.
    assert_eq!(q.chunks.len(), 2);
    // Padding 1 + digest 4 of the long PDU; header 48 + digest 4, data, padding 1 and digest
    // 4 of the short one.
    assert_eq!(q.tail.len(), 1 + 4 + 48 + 4 + (OWN_CHUNK_MIN - 1) + 1 + 4);
}

/// The whole queue through tokio's vectored write path, and a writer that takes nothing is
/// an error rather than a loop.
#[tokio::test]
async fn write_all_and_write_zero() {
    let pdus: Vec<_> = [0, 1, 4095, 4096, 70_001, 2]
        .into_iter()
        .map(|len| data_out(Bytes::from(vec![len as u8; len])))
        .collect();
    let mut q = SendQueue::default();
    for pdu in &pdus {
        q.push(pdu, Digests::NONE);
    }
    let mut wire = Vec::new();
    q.write_all(&mut wire).await.unwrap();
    assert_eq!(wire, encoded(&pdus, Digests::NONE));
    assert!(q.is_empty());

    q.push(&pdus[1], Digests::NONE);
    let mut full = [0u8; 0];
    let err = q
        .write_all(&mut std::io::Cursor::new(&mut full[..]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WriteZero);
}
