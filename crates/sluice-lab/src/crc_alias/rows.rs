//! The study's result rows: one value of one figure, written as CSV (through the lab's
//! [`crate::study::table`]) and JSON.

use crate::study::table::{clean, Cells, Row, Value};

/// One computed or measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct AliasRow {
    /// Figure it belongs to (`fig6_7`, `tcp`, `framer`, `crosscheck`, ...).
    pub figure: String,
    /// The check: a CRC's name, `tcp-checksum` or `tcp+crc32c`.
    pub checker: String,
    /// How the value was obtained: `markov`, `reduced`, `montecarlo`, `stratified`,
    /// `closed-form`, `measured`, `predicted`.
    pub method: String,
    /// What was counted or estimated (`P(alias|error)`, `tcp-pass-share`, ...).
    pub quantity: String,
    /// Bit error rate (0 when the corruption has a fixed number of bits).
    pub ber: f64,
    /// Packet length in bits.
    pub bits: u64,
    /// Bits flipped per corruption (0 for a bit error rate).
    pub flips: u64,
    /// The value.
    pub value: f64,
    /// 95 % interval or bound, low end (the value itself when exact).
    pub low: f64,
    /// 95 % interval or bound, high end.
    pub high: f64,
    /// Trials (0 for computed values).
    pub trials: u64,
    /// Events counted among the trials.
    pub events: u64,
}

impl AliasRow {
    /// A computed value without interval.
    #[must_use]
    pub fn exact(
        figure: &str,
        checker: &str,
        method: &str,
        ber: f64,
        bits: u64,
        value: f64,
    ) -> AliasRow {
        AliasRow {
            figure: figure.into(),
            checker: checker.into(),
            method: method.into(),
            quantity: "P(alias|error)".into(),
            ber,
            bits,
            flips: 0,
            value,
            low: value,
            high: value,
            trials: 0,
            events: 0,
        }
    }
}

impl Row for AliasRow {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        use Value::{Float, Text, UInt};
        vec![
            ("figure", Text(clean(&self.figure))),
            ("checker", Text(clean(&self.checker))),
            ("method", Text(clean(&self.method))),
            ("quantity", Text(clean(&self.quantity))),
            ("ber", Float(self.ber)),
            ("bits", UInt(self.bits)),
            ("flips", UInt(self.flips)),
            ("value", Float(self.value)),
            ("low", Float(self.low)),
            ("high", Float(self.high)),
            ("trials", UInt(self.trials)),
            ("events", UInt(self.events)),
        ]
    }

    fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
        Ok(AliasRow {
            figure: c.text("figure")?.into(),
            checker: c.text("checker")?.into(),
            method: c.text("method")?.into(),
            quantity: c.text("quantity")?.into(),
            ber: c.float("ber")?,
            bits: c.uint("bits")?,
            flips: c.uint("flips")?,
            value: c.float("value")?,
            low: c.float("low")?,
            high: c.float("high")?,
            trials: c.uint("trials")?,
            events: c.uint("events")?,
        })
    }
}

/// The rows as a JSON array of objects.
#[must_use]
pub fn to_json(rows: &[AliasRow]) -> String {
    let objects: Vec<String> = rows
        .iter()
        .map(|r| {
            let cells: Vec<String> = r
                .fields()
                .into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::Text(s) => {
                            format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
                        }
                        Value::Float(x) if !x.is_finite() => "null".into(),
                        Value::Missing => "null".into(),
                        other => other.to_string(),
                    };
                    format!("\"{k}\":{v}")
                })
                .collect();
            format!("{{{}}}", cells.join(","))
        })
        .collect();
    format!("[\n{}\n]\n", objects.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::table::{csv_header, csv_row, parse_csv};

    #[test]
    fn rows_survive_csv_and_make_json() {
        let r = AliasRow::exact("fig6_7", "CRC-16", "markov", 1e-4, 512, 1.5e-9);
        let text = format!("{}\n{}\n", csv_header(&r), csv_row(&r));
        assert_eq!(parse_csv::<AliasRow>(&text).unwrap(), vec![r.clone()]);
        let json = to_json(&[r]);
        assert!(json.contains("\"checker\":\"CRC-16\"") && json.contains("\"bits\":512"));
    }
}
