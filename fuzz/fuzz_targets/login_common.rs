//! Shared helpers of the login fuzz targets: a byte reader and a dictionary of text fragments
//! so that most inputs reach deep states of the login state machines.

/// Reads bytes from the fuzz input; yields zeros once exhausted.
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Builds a data segment from dictionary tokens and raw bytes.
    pub fn text(&mut self, dictionary: &[&str], computed: &[String]) -> Vec<u8> {
        let mut out = Vec::new();
        let count = self.byte() % 12;
        for _ in 0..count {
            let pick = usize::from(self.byte());
            match pick % 8 {
                0 => {
                    // Raw bytes.
                    let len = usize::from(self.byte() % 32);
                    for _ in 0..len {
                        let b = self.byte();
                        out.push(b);
                    }
                }
                1 if !computed.is_empty() => {
                    out.extend_from_slice(computed[pick % computed.len()].as_bytes());
                    out.push(0);
                }
                _ => {
                    out.extend_from_slice(dictionary[pick % dictionary.len()].as_bytes());
                    out.push(0);
                }
            }
        }
        out
    }
}

pub const DICTIONARY: &[&str] = &[
    "InitiatorName=iqn.2024-01.fuzz:initiator",
    "TargetName=iqn.2024-01.fuzz:target",
    "TargetName=iqn.2024-01.fuzz:chap",
    "TargetName=iqn.nope:x",
    "SessionType=Normal",
    "SessionType=Discovery",
    "SessionType=Bogus",
    "InitiatorAlias=host",
    "AuthMethod=CHAP,None",
    "AuthMethod=CHAP",
    "AuthMethod=None",
    "CHAP_A=5",
    "CHAP_A=8,7,6,5",
    "CHAP_N=iqn.2024-01.fuzz:initiator",
    "CHAP_R=0x00112233445566778899aabbccddeeff",
    "CHAP_I=7",
    "CHAP_C=0x0102030405060708",
    "CHAP_C=0bAQIDBA==",
    "HeaderDigest=CRC32C,None",
    "DataDigest=None",
    "MaxRecvDataSegmentLength=262144",
    "MaxBurstLength=16776192",
    "FirstBurstLength=262144",
    "InitialR2T=No",
    "ImmediateData=Yes",
    "ErrorRecoveryLevel=0",
    "MaxConnections=1",
    "IFMarker=No",
    "OFMarkInt=2048",
    "X-com.example.foo=1",
    "TargetAlias=disk",
    "TargetPortalGroupTag=1",
    "TargetAddress=10.0.0.1:3260,1",
    "MaxBurstLength=Reject",
    "MaxBurstLength=0x",
];
