//! Why a workload could not be built or run.

/// A workload specification or run failure.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A size distribution such as `8k:0.1,64k:0.9` was malformed.
    #[error("size distribution {text:?}: {why}")]
    SizeDist {
        /// The text given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// A trace file line was malformed.
    #[error("trace line {line}: {why}")]
    Trace {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The workload does not fit the device (range, alignment, sizes).
    #[error("{0}")]
    Workload(String),
    /// An emulated link could not be set up.
    #[error("emulated link: {0}")]
    Link(String),
    /// The initiator failed outside the measured I/O (e.g. before the run).
    #[error(transparent)]
    Initiator(#[from] sluice_initiator::Error),
}
