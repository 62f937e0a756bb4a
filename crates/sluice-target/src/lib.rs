//! iSCSI target: tokio driver around sluice-proto, sluice-scsi and sluice-storage
