//! MODE SENSE (6/10) and MODE SELECT (6/10) (SPC-4 6.11–6.14, 7.5; SBC-3 6.4).
//!
//! Pages: 08h Caching (WCE changeable), 0Ah Control (D_SENSE and SWP changeable: SWP=1
//! write-protects the LU, SPC-4 7.5.8), 1Ch Informational Exceptions Control (DEXCPT
//! changeable, no effect), and for a thin LU with a soft threshold the Logical Block
//! Provisioning subpage 1Ch/02h (nothing changeable; `threshold.rs`). Saved values are not
//! supported: MODE SENSE with
//! PC=11b answers SAVING PARAMETERS NOT SUPPORTED and MODE SELECT with SP=1 INVALID FIELD IN
//! CDB. The device-specific parameter carries WP (read-only LU) and DPOFUA=1.

use crate::field::{be16, be64, put_truncated, u8_at};
use crate::lu::{Cmd, CmdResult};
use crate::sense::{
    invalid_field_in_cdb, invalid_field_in_param, param_list_length_error, top_bit, SenseData,
    SenseKey,
};
use crate::unit_attention::MODE_PARAMETERS_CHANGED;

const CACHING: u8 = 0x08;
const CONTROL: u8 = 0x0A;
const IEC: u8 = 0x1C;
const ALL_PAGES: u8 = 0x3F;
/// Supported pages, in the order MODE SENSE returns them.
const PAGES: [u8; 3] = [CACHING, CONTROL, IEC];

/// Current mode page values of one logical unit.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) struct ModePages {
    caching: Vec<u8>,
    control: Vec<u8>,
    iec: Vec<u8>,
}

impl ModePages {
    /// The default values, with WCE as configured.
    pub(crate) fn new(wce: bool) -> Self {
        Self {
            caching: default_page(CACHING, wce),
            control: default_page(CONTROL, wce),
            iec: default_page(IEC, wce),
        }
    }

    /// Caching page WCE bit.
    pub(crate) fn wce(&self) -> bool {
        u8_at(&self.caching, 2) & 0x04 != 0
    }

    /// Control page D_SENSE bit.
    pub(crate) fn d_sense(&self) -> bool {
        u8_at(&self.control, 2) & 0x04 != 0
    }

    /// Control page SWP bit: the LU is software write-protected.
    pub(crate) fn swp(&self) -> bool {
        u8_at(&self.control, 4) & 0x08 != 0
    }

    fn page_mut(&mut self, code: u8) -> Option<&mut Vec<u8>> {
        match code {
            CACHING => Some(&mut self.caching),
            CONTROL => Some(&mut self.control),
            IEC => Some(&mut self.iec),
            _ => None,
        }
    }
}

fn default_page(code: u8, wce: bool) -> Vec<u8> {
    match code {
        CACHING => {
            let mut p = vec![0u8; 20];
            p[0] = CACHING;
            p[1] = 0x12;
            if wce {
                p[2] = 0x04;
            }
            p
        }
        CONTROL => {
            let mut p = vec![0u8; 12];
            p[0] = CONTROL;
            p[1] = 0x0A;
            p[2] = 0x02; // GLTSD=1 (no implicit log saving), TST=000b, D_SENSE=0
            p[3] = 0x10; // QUEUE ALGORITHM MODIFIER 1h (unrestricted), QERR=00b
            p
        }
        _ => {
            let mut p = vec![0u8; 12];
            p[0] = IEC;
            p[1] = 0x0A;
            p[2] = 0x08; // DEXCPT=1: informational exceptions disabled
            p
        }
    }
}

/// The changeable-values mask of a page (page code and length bytes included as in MODE
/// SENSE with PC=01b).
fn changeable_page(code: u8) -> Vec<u8> {
    let mut p = vec![0u8; default_page(code, false).len()];
    p[0] = code;
    p[1] = (p.len() - 2) as u8;
    p[2] = match code {
        CACHING => 0x04, // WCE
        CONTROL => 0x04, // D_SENSE
        _ => 0x08,       // DEXCPT
    };
    if code == CONTROL {
        p[4] = 0x08; // SWP
    }
    p
}

/// MODE SENSE(6) and MODE SENSE(10).
pub(crate) fn mode_sense(cmd: &mut Cmd<'_>) -> CmdResult {
    let cdb = cmd.cdb;
    let ten = u8_at(cdb, 0) == crate::cdb::opcode::MODE_SENSE_10;
    let dbd = u8_at(cdb, 1) & 0x08 != 0;
    let llbaa = ten && u8_at(cdb, 1) & 0x10 != 0;
    let pc = u8_at(cdb, 2) >> 6;
    let page = u8_at(cdb, 2) & 0x3F;
    let subpage = u8_at(cdb, 3);
    let alloc = if ten {
        usize::from(be16(cdb, 7))
    } else {
        usize::from(u8_at(cdb, 4))
    };
    if pc == 0b11 {
        return Err(
            SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x39, 0x00).with_field_pointer(
                true,
                2,
                Some(7),
            ),
        );
    }
    let mut wanted: &[u8] = match page {
        ALL_PAGES => &PAGES,
        p => match PAGES.iter().position(|&x| x == p) {
            Some(i) => &PAGES[i..=i],
            None => return Err(invalid_field_in_cdb(2, Some(5))),
        },
    };
    let lu = cmd.lu;
    // Subpage 00h is the page itself; FFh means "all subpages". The one subpage is the
    // Logical Block Provisioning page (1Ch/02h) of a thin LU with a soft threshold.
    let lbp = lu.threshold().map(|t| t.mode_page(lu, pc == 0b01));
    let lbp = match (page, subpage, lbp) {
        (_, 0x00, _) | (_, 0xFF, None) => None,
        (ALL_PAGES | IEC, 0xFF, lbp) => lbp,
        (IEC, 0x02, Some(lbp)) => {
            wanted = &[];
            Some(lbp)
        }
        (_, 0xFF, _) => None,
        _ => return Err(invalid_field_in_cdb(3, Some(7))),
    };
    let mut pages = Vec::new();
    {
        let st = lu.state();
        for &p in wanted {
            let bytes = match pc {
                0b00 => match p {
                    CACHING => st.mode.caching.clone(),
                    CONTROL => st.mode.control.clone(),
                    _ => st.mode.iec.clone(),
                },
                0b01 => changeable_page(p),
                _ => default_page(p, lu.config().write_cache),
            };
            pages.extend_from_slice(&bytes);
        }
    }
    if let Some(lbp) = lbp {
        pages.extend_from_slice(&lbp);
    }
    let mut bd = Vec::new();
    if !dbd {
        let n = lu.num_blocks();
        let bs = lu.block_size();
        if llbaa {
            bd.extend_from_slice(&n.to_be_bytes());
            bd.extend_from_slice(&[0; 4]);
            bd.extend_from_slice(&bs.to_be_bytes());
        } else {
            bd.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
            bd.push(0); // density code
            bd.extend_from_slice(&bs.to_be_bytes()[1..]);
        }
        if pc == 0b01 {
            bd.fill(0);
        }
    }
    let mut dsp = 0x10; // DPOFUA
    if lu.read_only() {
        dsp |= 0x80; // WP
    }
    let mut d = Vec::new();
    if ten {
        let total = 8 + bd.len() + pages.len();
        d.extend_from_slice(&((total - 2) as u16).to_be_bytes());
        d.extend_from_slice(&[0, dsp, u8::from(llbaa && !bd.is_empty()), 0]);
        d.extend_from_slice(&(bd.len() as u16).to_be_bytes());
    } else {
        let total = 4 + bd.len() + pages.len();
        // At most 4 + 8 + 44 bytes.
        d.extend_from_slice(&[(total - 1) as u8, 0, dsp, bd.len() as u8]);
    }
    d.extend_from_slice(&bd);
    d.extend_from_slice(&pages);
    put_truncated(cmd.data_in, &d, alloc);
    Ok(())
}

/// MODE SELECT(6) and MODE SELECT(10). The whole parameter list is validated before any
/// page changes; a change raises MODE PARAMETERS CHANGED for every other nexus.
pub(crate) fn mode_select(cmd: &mut Cmd<'_>) -> CmdResult {
    let cdb = cmd.cdb;
    let ten = u8_at(cdb, 0) == crate::cdb::opcode::MODE_SELECT_10;
    if u8_at(cdb, 1) & 0x01 != 0 {
        return Err(invalid_field_in_cdb(1, Some(0))); // SP: saved pages not supported
    }
    let pll = if ten {
        usize::from(be16(cdb, 7))
    } else {
        usize::from(u8_at(cdb, 4))
    };
    if pll == 0 {
        return Ok(());
    }
    if u8_at(cdb, 1) & 0x10 == 0 {
        return Err(invalid_field_in_cdb(1, Some(4))); // PF=0: vendor-specific pages
    }
    let header_len = if ten { 8 } else { 4 };
    let data = cmd.data_out.contiguous(pll);
    let Some(data) = data.get(..pll) else {
        return Err(param_list_length_error());
    };
    if pll < header_len {
        return Err(param_list_length_error());
    }
    let medium_type_at = if ten { 2 } else { 1 };
    if data[medium_type_at] != 0 {
        return Err(invalid_field_in_param(medium_type_at as u16, Some(7)));
    }
    let (bdl, long) = if ten {
        (usize::from(be16(data, 6)), data[4] & 0x01 != 0)
    } else {
        (usize::from(data[3]), false)
    };
    let desc_len = if long { 16 } else { 8 };
    let bdl_at = if ten { 6 } else { 3 };
    if bdl % desc_len != 0 {
        return Err(invalid_field_in_param(bdl_at, Some(7)));
    }
    let pages_at = header_len + bdl;
    if pages_at > pll {
        return Err(param_list_length_error());
    }
    let lu = cmd.lu;
    for k in 0..bdl / desc_len {
        let at = header_len + k * desc_len;
        let (blocks, bs, bs_at) = if long {
            (
                be64(data, at),
                u64::from(crate::field::be32(data, at + 12)),
                at + 12,
            )
        } else {
            (
                crate::field::be_at(data, at, 4),
                crate::field::be_at(data, at + 5, 3),
                at + 5,
            )
        };
        if bs != u64::from(lu.block_size()) {
            return Err(invalid_field_in_param(bs_at as u16, Some(7)));
        }
        let n = lu.num_blocks();
        let n_field = if long { n } else { n.min(u64::from(u32::MAX)) };
        if blocks != 0 && blocks != n_field {
            return Err(invalid_field_in_param(at as u16, Some(7)));
        }
    }
    let mut st = lu.state();
    let mut new = st.mode.clone();
    let mut pos = pages_at;
    while pos < pll {
        let Some(&[b0, plen]) = data.get(pos..pos + 2) else {
            return Err(param_list_length_error());
        };
        let end = pos + 2 + usize::from(plen);
        let Some(given) = data.get(pos..end) else {
            return Err(param_list_length_error());
        };
        if b0 & 0x40 != 0 {
            return Err(invalid_field_in_param(pos as u16, Some(6))); // SPF: no subpages
        }
        let code = b0 & 0x3F;
        let Some(cur) = new.page_mut(code) else {
            return Err(invalid_field_in_param(pos as u16, Some(5)));
        };
        if given.len() != cur.len() {
            return Err(invalid_field_in_param(pos as u16 + 1, Some(7)));
        }
        let mask = changeable_page(code);
        for i in 2..cur.len() {
            let diff = (given[i] ^ cur[i]) & !mask[i];
            if diff != 0 {
                return Err(invalid_field_in_param((pos + i) as u16, top_bit(diff)));
            }
            cur[i] = (cur[i] & !mask[i]) | (given[i] & mask[i]);
        }
        pos = end;
    }
    if new != st.mode {
        st.mode = new;
        lu.mode_changed(&st.mode);
        st.ua
            .establish_others(Some(cmd.nexus), MODE_PARAMETERS_CHANGED);
    }
    Ok(())
}

#[cfg(test)]
#[path = "mode_tests.rs"]
mod tests;
