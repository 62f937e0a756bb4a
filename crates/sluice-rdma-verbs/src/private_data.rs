//! RDMA-CM private data for iSER over InfiniBand and RoCE: the iSER CM header (RFC 7145
//! section 9.1) at the front of the connection request and reply, within what the connection
//! manager carries.

use sluice_proto::iser::{IserCmHeader, ISER_CM_HEADER_LEN};

use crate::error::VerbsError;

/// Most private data `rdma_connect` carries on a reliable connection over InfiniBand or
/// RoCE: the CM REQ's 92 bytes less the 36 of RDMA-CM's own header (rdma_connect(3)).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Most private data `rdma_accept` carries: the CM REP's 196 bytes (rdma_accept(3)).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;

/// What this provider can do, as its iSER CM header says it: zero-based addressing is
/// supported (`IBV_ACCESS_ZERO_BASED`), Send with Invalidate is not (the work request
/// builder it posts through has none), so a peer must not send one to it.
pub const PROVIDER_CM_HEADER: IserCmHeader = IserCmHeader {
    zbva_not_supported: false,
    send_with_invalidate_not_supported: true,
};

/// The private data of an initiator's connection request.
pub fn request(own: &IserCmHeader) -> [u8; ISER_CM_HEADER_LEN] {
    own.emit()
}

/// A target's answer to a connection request's `private_data`: the features both sides
/// use (RFC 7145 section 9.1: one that either side does not support is off) and the reply's
/// private data. Refuses private data too short for the header or longer than a request
/// carries (a peer's length is bounded before it is trusted).
pub fn reply(
    private_data: &[u8],
    own: &IserCmHeader,
) -> Result<(IserCmHeader, [u8; ISER_CM_HEADER_LEN]), VerbsError> {
    let request = parse(private_data, MAX_CONNECT_PRIVATE_DATA)?;
    let agreed = IserCmHeader::reply_to(&request, own);
    Ok((agreed, agreed.emit()))
}

/// The iSER CM header at the front of a peer's `private_data` of at most `max` bytes.
pub fn parse(private_data: &[u8], max: usize) -> Result<IserCmHeader, VerbsError> {
    if private_data.len() > max {
        return Err(VerbsError::PrivateDataTooLong {
            len: private_data.len(),
            max,
        });
    }
    IserCmHeader::parse(private_data)
        .map(|(h, _)| h)
        .map_err(|e| VerbsError::Verbs {
            call: "iSER CM private data",
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_and_reply_carry_the_iser_cm_header() {
        // Linux's iser initiator with both features: all flags clear.
        let linux = IserCmHeader::default();
        assert_eq!(request(&linux), [0, 0, 0, 0]);
        assert_eq!(request(&PROVIDER_CM_HEADER), [0x40, 0, 0, 0]);
        let (agreed, bytes) = reply(&request(&linux), &PROVIDER_CM_HEADER).unwrap();
        assert!(agreed.send_with_invalidate_not_supported && !agreed.zbva_not_supported);
        assert_eq!(bytes, [0x40, 0, 0, 0]);
        // An initiator without ZBVA: off for both; private data may run past the header.
        let mut padded = vec![0x80, 0, 0, 0];
        padded.resize(MAX_CONNECT_PRIVATE_DATA, 0);
        let (agreed, bytes) = reply(&padded, &PROVIDER_CM_HEADER).unwrap();
        assert!(agreed.zbva_not_supported);
        assert_eq!(bytes, [0xc0, 0, 0, 0]);
    }

    #[test]
    fn bad_private_data_is_refused() {
        assert!(matches!(
            reply(&[0x80, 0], &PROVIDER_CM_HEADER),
            Err(VerbsError::Verbs { .. })
        ));
        assert_eq!(
            reply(&[0; MAX_CONNECT_PRIVATE_DATA + 1], &PROVIDER_CM_HEADER),
            Err(VerbsError::PrivateDataTooLong {
                len: MAX_CONNECT_PRIVATE_DATA + 1,
                max: MAX_CONNECT_PRIVATE_DATA
            })
        );
        assert!(parse(&[0; 100], MAX_ACCEPT_PRIVATE_DATA).is_ok());
    }

    proptest! {
        #[test]
        fn any_private_data_parses_or_is_refused(data in prop::collection::vec(any::<u8>(), 0..300)) {
            match reply(&data, &PROVIDER_CM_HEADER) {
                Ok((agreed, bytes)) => {
                    prop_assert!(data.len() >= ISER_CM_HEADER_LEN && data.len() <= MAX_CONNECT_PRIVATE_DATA);
                    prop_assert!(agreed.send_with_invalidate_not_supported);
                    prop_assert_eq!(IserCmHeader::parse(&bytes).unwrap().0, agreed);
                }
                Err(_) => prop_assert!(data.len() < ISER_CM_HEADER_LEN || data.len() > MAX_CONNECT_PRIVATE_DATA),
            }
        }
    }
}
