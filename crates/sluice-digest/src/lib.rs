//! CRC32C for iSCSI digests: hardware-accelerated data path plus Sarwate and Slicing-by-8
