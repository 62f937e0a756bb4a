//! Which of the study's other halves a `simstudy` preset runs beside chapter 5: the
//! chapter-6 CRC and TCP checksum aliasing ([`crate::crc_alias`]) and Figs. 5.10/5.11 again
//! over real sockets with the experimental UDP transport ([`crate::udp_vs_tcp`]). Each writes
//! its own files into the same output directory and hands back a Markdown section for the
//! report.

use crate::crc_alias::CrcAliasScale;
use crate::udp_vs_tcp::Scale as SocketsScale;

/// The companion studies of one preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Companions {
    /// The CRC aliasing study, at this scale.
    pub crc_alias: Option<CrcAliasScale>,
    /// UDP against TCP over real loopback sockets, at this scale.
    pub udp_sockets: Option<SocketsScale>,
    /// The preset has no chapter-5 points of its own.
    pub runs_only_companions: bool,
}

/// The companions of `preset`: `tiny` and `quick` run every part of the study at their
/// scale, `fig6` the aliasing study in full, `udp-sockets` the socket measurement in full;
/// the chapter-5 figure presets run nothing more.
#[must_use]
pub fn companions(preset: &str) -> Companions {
    let (crc_alias, udp_sockets, runs_only_companions) = match preset {
        "tiny" => (Some(CrcAliasScale::Tiny), Some(SocketsScale::Tiny), false),
        "quick" => (Some(CrcAliasScale::Quick), Some(SocketsScale::Quick), false),
        "fig6" => (Some(CrcAliasScale::Full), None, true),
        "udp-sockets" => (None, Some(SocketsScale::Full), true),
        _ => (None, None, false),
    };
    Companions {
        crc_alias,
        udp_sockets,
        runs_only_companions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_study_presets_run_the_aliasing_study_and_figures_do_not() {
        assert_eq!(companions("tiny").crc_alias, Some(CrcAliasScale::Tiny));
        assert_eq!(companions("quick").crc_alias, Some(CrcAliasScale::Quick));
        assert!(companions("fig6").runs_only_companions);
        assert_eq!(companions("quick").udp_sockets, Some(SocketsScale::Quick));
        assert!(companions("udp-sockets").runs_only_companions);
        assert_eq!(companions("fig5.3"), companions("no such preset"));
    }
}
