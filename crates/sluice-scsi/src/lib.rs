//! SCSI (SPC/SBC) command emulation and CDB building, transport-agnostic
