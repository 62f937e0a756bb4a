#![no_main]
//! An arbitrary sequence of Login Requests, built from the fuzz bytes (header fields plus text
//! from a dictionary and raw bytes), driven through TargetLogin with a fixed environment. It
//! must never panic, every response must echo ISID and ITT, and after Complete or Fail every
//! further request must fail.

use bytes::Bytes;
use sluice_proto::chap::{encode_hex, ChapAlgorithm};
use sluice_proto::login::{
    ChapCredential, ChapSecrets, LoginStatus, LoginStep, SessionBinding, TargetLogin,
    TargetLoginEnv, TargetLoginPolicy,
};
use sluice_proto::pdu::types::LoginRequest;
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};

#[path = "login_common.rs"]
mod common;
use common::{Reader, DICTIONARY};

struct Env {
    counter: u8,
    bind_fails: bool,
}

impl TargetLoginEnv for Env {
    fn target(&self, name: &str) -> Option<TargetLoginPolicy> {
        match name {
            "iqn.2024-01.fuzz:target" => Some(TargetLoginPolicy::default()),
            "iqn.2024-01.fuzz:chap" => {
                let mut chap =
                    ChapSecrets::one_way("iqn.2024-01.fuzz:initiator", *b"initiator-secret");
                chap.mutual = Some(ChapCredential {
                    user: "t".into(),
                    secret: b"target-secret".to_vec(),
                });
                Some(TargetLoginPolicy {
                    chap: Some(chap),
                    ..TargetLoginPolicy::default()
                })
            }
            _ => None,
        }
    }
    fn discovery_policy(&self) -> TargetLoginPolicy {
        TargetLoginPolicy::default()
    }
    fn random_bytes(&mut self, buf: &mut [u8]) {
        // Fixed "randomness" so that the CHAP responses below can be precomputed.
        for b in buf {
            *b = self.counter;
        }
    }
    fn bind_session(&mut self, _: &SessionBinding) -> Result<Tsih, LoginStatus> {
        if self.bind_fails {
            Err(LoginStatus::SESSION_DOES_NOT_EXIST)
        } else {
            Ok(Tsih(1))
        }
    }
}

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let mut r = Reader(input);
    let mut env = Env {
        counter: 0,
        bind_fails: r.byte() & 1 == 1,
    };
    // Valid CHAP responses for the fixed challenge (all bytes 0, identifier 0) so that the
    // fuzzer can get past authentication.
    let computed: Vec<String> = ChapAlgorithm::ALL
        .iter()
        .map(|a| {
            format!(
                "CHAP_R={}",
                encode_hex(&a.response(0, b"initiator-secret", &[0; 32]))
            )
        })
        .collect();
    let mut login = TargetLogin::new(SeqNum(u32::from(r.byte())), u32::from(r.byte()));
    let mut finished = false;
    for _ in 0..16 {
        if r.is_empty() {
            break;
        }
        let flags = r.byte();
        let req = LoginRequest {
            transit: flags & 0x80 != 0,
            cont: flags & 0x40 != 0 && flags & 0x20 != 0,
            csg: (flags >> 2) & 3,
            nsg: flags & 3,
            version_max: 0,
            version_min: u8::from(r.byte() == 0xff),
            isid: Isid([0, 2, 0x3d, 0, 0, 1]),
            tsih: Tsih(u16::from(r.byte() == 0xff)),
            itt: Itt(9),
            cid: 0,
            cmd_sn: SeqNum(u32::MAX),
            exp_stat_sn: SeqNum(0),
            data: Bytes::from(r.text(DICTIONARY, &computed)),
        };
        let step = login.handle_request(&req, &mut env);
        let rsp = match &step {
            LoginStep::Respond(rsp) => rsp,
            LoginStep::Complete { response, .. } => response,
            LoginStep::Fail(rsp) => rsp,
        };
        assert_eq!(
            (rsp.isid, rsp.itt, rsp.version_active),
            (req.isid, req.itt, 0)
        );
        assert!(!(rsp.transit && rsp.cont));
        assert!(rsp.data.len() <= 8192);
        if finished {
            assert!(matches!(step, LoginStep::Fail(_)));
        }
        match step {
            LoginStep::Complete { response, .. } => {
                assert!(response.transit && response.nsg == 3);
                finished = true;
            }
            LoginStep::Fail(rsp) => {
                assert!(rsp.status.class >= 2);
                finished = true;
            }
            LoginStep::Respond(rsp) => assert_eq!(rsp.status.class, 0),
        }
    }
});
