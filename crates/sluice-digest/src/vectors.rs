//! RFC 3720 Appendix B.4, "CRC Examples": the published inputs and the digest bytes as they
//! go on the wire. The tests check every implementation against them, and the perf lab checks
//! every algorithm it times.

/// One example: what it is, the input, and the four digest bytes on the wire.
#[derive(Clone, Debug)]
pub struct Vector {
    /// The example's name in the RFC.
    pub name: &'static str,
    /// The bytes digested.
    pub input: Vec<u8>,
    /// The digest as it goes on the wire ([`crate::to_wire`]).
    pub wire: [u8; 4],
}

/// The five examples of RFC 3720 Appendix B.4.
#[must_use]
pub fn rfc3720_b4() -> Vec<Vector> {
    // "An iSCSI - SCSI Read (10) Command PDU": a 48-byte BHS, opcode 0x01 with F and R set,
    // ITT 0x14, expected length 0x400, CmdSN 0x14, ExpStatSN 0x18, CDB 28 00 .. 02 00 ...
    let mut read10 = vec![0u8; 48];
    read10[0] = 0x01;
    read10[1] = 0xc0;
    read10[16] = 0x14;
    read10[22] = 0x04;
    read10[27] = 0x14;
    read10[31] = 0x18;
    read10[32] = 0x28;
    read10[40] = 0x02;
    let v = |name, input, wire| Vector { name, input, wire };
    vec![
        v(
            "32 bytes of zeroes",
            vec![0x00; 32],
            [0xaa, 0x36, 0x91, 0x8a],
        ),
        v("32 bytes of ones", vec![0xff; 32], [0x43, 0xab, 0xa8, 0x62]),
        v(
            "32 bytes incrementing 00..1f",
            (0..32).collect(),
            [0x4e, 0x79, 0xdd, 0x46],
        ),
        v(
            "32 bytes decrementing 1f..00",
            (0..32).rev().collect(),
            [0x5c, 0xdb, 0x3f, 0x11],
        ),
        v(
            "SCSI Read (10) Command PDU",
            read10,
            [0x56, 0x3a, 0x96, 0xd9],
        ),
    ]
}
