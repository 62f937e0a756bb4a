//! `[session]`: the operational keys the target offers (RFC 7143 section 13).
//!
//! Each key's range and type come from the key table (`sluice_proto::text::keys`) through its
//! [`KeyId`]; only the file's own syntax (sizes, durations) is read here.

use std::ops::Range;

use sluice_proto::text::KeyId;
use sluice_target::config::{OperationalOffer, QUEUE_DEPTH};
use toml::Spanned;

use super::convert::int_in;
use super::error::{at, Located};
use super::kind::{ErrorKind, FileKey};
use super::schema::SessionToml;
use super::values::{Dur, Size};

/// Converts `[session]`, recording in `keys` where each operational key's value is.
pub(super) fn convert_session(
    s: &SessionToml,
    keys: &mut Vec<(KeyId, Range<usize>)>,
    queue_depth_span: &mut Option<Range<usize>>,
) -> Result<OperationalOffer, Located> {
    let mut offer = OperationalOffer::default();
    let mut key = Keys(keys);
    if let Some(v) = &s.max_recv_data_segment_length {
        offer.max_recv_data_segment_length = key.size(KeyId::MaxRecvDataSegmentLength, v)?;
    }
    if let Some(v) = &s.max_burst_length {
        offer.max_burst_length = key.size(KeyId::MaxBurstLength, v)?;
    }
    if let Some(v) = &s.first_burst_length {
        offer.first_burst_length = key.size(KeyId::FirstBurstLength, v)?;
    }
    if let Some(v) = &s.max_outstanding_r2t {
        offer.max_outstanding_r2t = key.number(KeyId::MaxOutstandingR2T, v)?;
    }
    if let Some(v) = &s.default_time2wait {
        offer.default_time2wait = key.seconds(KeyId::DefaultTime2Wait, v)?;
    }
    if let Some(v) = &s.default_time2retain {
        offer.default_time2retain = key.seconds(KeyId::DefaultTime2Retain, v)?;
    }
    if let Some(v) = &s.error_recovery_level {
        offer.error_recovery_level = key.number(KeyId::ErrorRecoveryLevel, v)?;
    }
    if let Some(v) = &s.max_connections {
        offer.max_connections = key.number(KeyId::MaxConnections, v)?;
    }
    if let Some(v) = &s.queue_depth {
        let (min, max) = (QUEUE_DEPTH.start(), QUEUE_DEPTH.end());
        offer.queue_depth = int_in(v, FileKey::QueueDepth, (*min).into(), (*max).into())?;
        *queue_depth_span = Some(v.span());
    }
    offer.immediate_data = s.immediate_data.unwrap_or(offer.immediate_data);
    offer.phase_collapse = s.phase_collapse.unwrap_or(offer.phase_collapse);
    offer.initial_r2t = s.initial_r2t.unwrap_or(offer.initial_r2t);
    offer.data_pdu_in_order = s.data_pdu_in_order.unwrap_or(offer.data_pdu_in_order);
    offer.data_sequence_in_order = s
        .data_sequence_in_order
        .unwrap_or(offer.data_sequence_in_order);
    if let Some(d) = s.header_digest {
        offer.header_digest = d.into();
    }
    if let Some(d) = s.data_digest {
        offer.data_digest = d.into();
    }
    Ok(offer)
}

/// Reads numerical keys against the key table, and notes where each value is.
struct Keys<'a>(&'a mut Vec<(KeyId, Range<usize>)>);

impl Keys<'_> {
    /// A size (`"256K"`) of a numerical key.
    fn size<T: TryFrom<u64>>(&mut self, key: KeyId, v: &Spanned<Size>) -> Result<T, Located> {
        self.check(key, v.span(), v.get_ref().0)
    }

    /// A plain integer of a numerical key.
    fn number<T: TryFrom<u64>>(&mut self, key: KeyId, v: &Spanned<u64>) -> Result<T, Located> {
        self.check(key, v.span(), *v.get_ref())
    }

    /// A duration of a key the RFC counts in whole seconds.
    fn seconds<T: TryFrom<u64>>(&mut self, key: KeyId, v: &Spanned<Dur>) -> Result<T, Located> {
        let d = v.get_ref().0;
        if d.subsec_nanos() != 0 {
            return Err(at(v.span(), ErrorKind::WholeSeconds(key)));
        }
        self.check(key, v.span(), d.as_secs())
    }

    fn check<T: TryFrom<u64>>(
        &mut self,
        key: KeyId,
        span: Range<usize>,
        value: u64,
    ) -> Result<T, Located> {
        self.0.push((key, span.clone()));
        key.check_number(value)
            .map_err(|e| at(span, ErrorKind::Key(e)))
    }
}
