//! iSCSI initiator: tokio driver around sluice-proto
