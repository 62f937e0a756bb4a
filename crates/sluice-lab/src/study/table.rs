//! Rows of results as CSV: every study writes one row per run as it finishes, and reads its
//! own file back to resume an interrupted run or to redraw its report.

use std::collections::HashMap;
use std::fmt;

/// A cell: what the CSV and JSON writers need to know about a value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Text (never contains a comma or a newline: see [`clean`]).
    Text(String),
    /// A count or size.
    UInt(u64),
    /// A measurement.
    Float(f64),
    /// A yes/no setting.
    Bool(bool),
    /// Not known (e.g. the CPU time of a target that runs elsewhere).
    Missing,
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Text(s) => f.write_str(s),
            Value::UInt(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Missing => Ok(()),
        }
    }
}

/// Text safe for a CSV cell: no commas or line breaks.
#[must_use]
pub fn clean(s: &str) -> String {
    s.replace([',', '\n', '\r'], " ")
}

/// One row of a study's results.
pub trait Row: Sized {
    /// Every column, in order, with its value.
    fn fields(&self) -> Vec<(&'static str, Value)>;
    /// The row back from its cells (as [`fields`](Self::fields) wrote them).
    fn from_cells(cells: &Cells<'_>) -> Result<Self, String>;
}

/// The CSV header line of rows like `example`.
pub fn csv_header<R: Row>(example: &R) -> String {
    let names: Vec<&str> = example.fields().iter().map(|(n, _)| *n).collect();
    names.join(",")
}

/// `row` as one CSV line.
pub fn csv_row<R: Row>(row: &R) -> String {
    let cells: Vec<String> = row.fields().iter().map(|(_, v)| v.to_string()).collect();
    cells.join(",")
}

/// Reads a CSV file written with [`csv_header`] and [`csv_row`].
pub fn parse_csv<R: Row>(text: &str) -> Result<Vec<R>, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Ok(Vec::new());
    };
    let names: Vec<&str> = header.split(',').collect();
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != names.len() {
            return Err(format!(
                "row {}: {} cells, the header has {}",
                i + 2,
                cells.len(),
                names.len()
            ));
        }
        let row = Cells(names.iter().copied().zip(cells).collect());
        out.push(R::from_cells(&row).map_err(|e| format!("row {}: {e}", i + 2))?);
    }
    Ok(out)
}

/// The cells of one CSV row by column name, with typed readers.
#[derive(Debug)]
pub struct Cells<'a>(HashMap<&'a str, &'a str>);

impl<'a> Cells<'a> {
    /// The text of column `k`.
    pub fn text(&self, k: &str) -> Result<&'a str, String> {
        self.0
            .get(k)
            .copied()
            .ok_or_else(|| format!("no column {k}"))
    }

    /// Column `k` as a count.
    pub fn uint(&self, k: &str) -> Result<u64, String> {
        self.text(k)?
            .parse()
            .map_err(|_| format!("{k} is not a count"))
    }

    /// Column `k` as a count that fits `T`.
    pub fn small<T: TryFrom<u64>>(&self, k: &str) -> Result<T, String> {
        T::try_from(self.uint(k)?).map_err(|_| format!("{k} is too large"))
    }

    /// Column `k` as a number.
    pub fn float(&self, k: &str) -> Result<f64, String> {
        self.text(k)?
            .parse()
            .map_err(|_| format!("{k} is not a number"))
    }

    /// Column `k` as a number, or `None` when the cell is empty ([`Value::Missing`]).
    pub fn optional_float(&self, k: &str) -> Result<Option<f64>, String> {
        match self.text(k)? {
            "" => Ok(None),
            _ => self.float(k).map(Some),
        }
    }

    /// Column `k` as true/false.
    pub fn flag(&self, k: &str) -> Result<bool, String> {
        self.text(k)?
            .parse()
            .map_err(|_| format!("{k} is not true/false"))
    }

    /// Column `k` as a list written joined by "; ".
    pub fn list(&self, k: &str) -> Result<Vec<String>, String> {
        Ok(self
            .text(k)?
            .split("; ")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Probe {
        name: String,
        n: u32,
        x: Option<f64>,
        ok: bool,
    }

    impl Row for Probe {
        fn fields(&self) -> Vec<(&'static str, Value)> {
            vec![
                ("name", Value::Text(clean(&self.name))),
                ("n", Value::UInt(self.n.into())),
                ("x", self.x.map_or(Value::Missing, Value::Float)),
                ("ok", Value::Bool(self.ok)),
            ]
        }

        fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
            Ok(Self {
                name: c.text("name")?.to_owned(),
                n: c.small("n")?,
                x: c.optional_float("x")?,
                ok: c.flag("ok")?,
            })
        }
    }

    #[test]
    fn rows_round_trip_and_bad_rows_are_named() {
        let rows = [
            Probe {
                name: "a, b".into(),
                n: 7,
                x: Some(0.25),
                ok: true,
            },
            Probe {
                name: "c".into(),
                n: 0,
                x: None,
                ok: false,
            },
        ];
        let text = format!(
            "{}\n{}\n{}\n",
            csv_header(&rows[0]),
            csv_row(&rows[0]),
            csv_row(&rows[1])
        );
        let back: Vec<Probe> = parse_csv(&text).unwrap();
        assert_eq!(back[0].name, "a  b");
        assert_eq!(back[1], rows[1]);
        let short = format!("{}\nx,1\n", csv_header(&rows[0]));
        assert!(parse_csv::<Probe>(&short).unwrap_err().contains("row 2"));
        let big = format!("{}\nx,99999999999,,true\n", csv_header(&rows[0]));
        assert!(parse_csv::<Probe>(&big)
            .unwrap_err()
            .contains("n is too large"));
    }
}
