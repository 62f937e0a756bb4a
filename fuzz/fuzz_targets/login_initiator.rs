#![no_main]
//! InitiatorLogin fed an arbitrary sequence of Login Responses built from the fuzz bytes
//! (header fields plus dictionary text). It must never panic, and every request it builds must
//! keep ISID, ITT, CID and CmdSN and never set both T and C.

use bytes::Bytes;
use sluice_proto::chap::ChapAlgorithm;
use sluice_proto::login::{
    ChapCredential, InitiatorChap, InitiatorConfig, InitiatorLogin, InitiatorStep, LoginStatus,
};
use sluice_proto::pdu::types::{LoginRequest, LoginResponse};
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};
use sluice_proto::text::OperationalOffer;

#[path = "login_common.rs"]
mod common;
use common::{Reader, DICTIONARY};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let mut r = Reader(input);
    let mode = r.byte();
    let chap = (mode & 3 != 0).then(|| InitiatorChap {
        credential: ChapCredential {
            user: "i".into(),
            secret: b"initiator-secret".to_vec(),
        },
        algorithms: vec![ChapAlgorithm::Md5, ChapAlgorithm::Sha256],
        mutual: (mode & 2 != 0).then(|| ChapCredential {
            user: "t".into(),
            secret: b"target-secret".to_vec(),
        }),
    });
    let config = InitiatorConfig {
        initiator_name: "iqn.2024-01.fuzz:initiator".into(),
        initiator_alias: None,
        target_name: (mode & 4 == 0).then(|| "iqn.2024-01.fuzz:target".into()),
        isid: Isid([0x80, 0, 0, 0, 0, 1]),
        tsih: Tsih(u16::from(mode & 8 != 0)),
        cid: 3,
        chap,
        offer: OperationalOffer::default(),
    };
    let mut login = InitiatorLogin::new(config, Itt(4), SeqNum(5), SeqNum(0));
    let Ok(mut req) = login.start() else {
        return;
    };
    let mut random = |buf: &mut [u8]| buf.fill(0x42);
    for _ in 0..16 {
        check(&req);
        if r.is_empty() {
            break;
        }
        let flags = r.byte();
        let status = r.byte();
        let rsp = LoginResponse {
            transit: flags & 0x80 != 0,
            cont: flags & 0x40 != 0,
            // Mostly echo the stage of the request so that the text gets processed.
            csg: if flags & 0x20 != 0 {
                (flags >> 2) & 3
            } else {
                req.csg
            },
            nsg: flags & 3,
            version_max: 0,
            version_active: u8::from(status == 0xfe),
            isid: req.isid,
            tsih: Tsih(u16::from(r.byte() & 1)),
            itt: if status == 0xfd { Itt(0) } else { req.itt },
            stat_sn: SeqNum(u32::from(r.byte())),
            exp_cmd_sn: SeqNum(5),
            max_cmd_sn: SeqNum(5),
            status: LoginStatus::new(if status < 0xf0 { 0 } else { status & 3 }, status & 0x0f),
            data: Bytes::from(r.text(DICTIONARY, &[])),
        };
        match login.handle_response(&rsp, &mut random) {
            InitiatorStep::Send(next) => req = next,
            _ => break,
        }
    }
});

fn check(req: &LoginRequest) {
    assert_eq!(
        (req.isid, req.itt, req.cid, req.cmd_sn),
        (Isid([0x80, 0, 0, 0, 0, 1]), Itt(4), 3, SeqNum(5))
    );
    assert!(!(req.transit && req.cont));
    assert_eq!(req.version_min, 0);
}
