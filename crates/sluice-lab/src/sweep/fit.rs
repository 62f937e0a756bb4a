//! Ordinary least squares for the paper's linear models, with 95 % confidence intervals,
//! R-squared and residuals. Regressors that are linear combinations of earlier ones (the
//! paper's equation (2) has several: its variables "are not independent") are reported as
//! aliased rather than given arbitrary values.

/// One fitted coefficient.
#[derive(Clone, Debug, PartialEq)]
pub struct Coefficient {
    /// Its name.
    pub name: String,
    /// The estimate (0 when aliased).
    pub value: f64,
    /// Half-width of the 95 % confidence interval (NaN with no residual degrees of freedom).
    pub ci95: f64,
    /// Collinear with the regressors before it: not identifiable from this data.
    pub aliased: bool,
}

/// A fitted model `y = sum(b_i x_i)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// Coefficients in the order of the regressors.
    pub coefficients: Vec<Coefficient>,
    /// Coefficient of determination (against the mean of y).
    pub r_squared: f64,
    /// Observations.
    pub n: usize,
    /// Fitted values, one per observation.
    pub fitted: Vec<f64>,
}

impl Fit {
    /// Residuals `y - fitted`.
    pub fn residuals(&self, y: &[f64]) -> Vec<f64> {
        y.iter().zip(&self.fitted).map(|(a, b)| a - b).collect()
    }
}

/// Fits `y = X b` by least squares. `names` name the columns of `x` (each row one
/// observation); include a column of ones for an intercept. `None` when there are fewer
/// observations than identifiable coefficients, or the data are not finite.
pub fn least_squares(names: &[&str], x: &[Vec<f64>], y: &[f64]) -> Option<Fit> {
    let n = y.len();
    let k = names.len();
    if n == 0 || x.len() != n || x.iter().any(|r| r.len() != k) {
        return None;
    }
    if y.iter().chain(x.iter().flatten()).any(|v| !v.is_finite()) {
        return None;
    }
    // Modified Gram-Schmidt on the columns: Q (n x r) and R (r x r) for the kept columns.
    let mut q: Vec<Vec<f64>> = Vec::new();
    let mut r: Vec<Vec<f64>> = Vec::new(); // r[j][i]: column j of R, rows i < kept
    let mut kept: Vec<usize> = Vec::new();
    for j in 0..k {
        let mut v: Vec<f64> = x.iter().map(|row| row[j]).collect();
        let norm0 = dot(&v, &v).sqrt();
        let mut rj = Vec::with_capacity(q.len() + 1);
        for qi in &q {
            let c = dot(qi, &v);
            for (a, b) in v.iter_mut().zip(qi) {
                *a -= c * b;
            }
            rj.push(c);
        }
        let norm = dot(&v, &v).sqrt();
        if norm0 == 0.0 || norm <= 1e-9 * norm0 {
            continue;
        }
        for a in &mut v {
            *a /= norm;
        }
        rj.push(norm);
        q.push(v);
        r.push(rj);
        kept.push(j);
    }
    let p = kept.len();
    if n < p || p == 0 {
        return None;
    }
    // Solve R b = Q^T y by back substitution.
    let qty: Vec<f64> = q.iter().map(|qi| dot(qi, y)).collect();
    let mut b = vec![0.0; p];
    for i in (0..p).rev() {
        let mut s = qty[i];
        for (jj, bj) in b.iter().enumerate().skip(i + 1) {
            s -= r[jj][i] * bj;
        }
        b[i] = s / r[i][i];
    }
    let fitted: Vec<f64> = x
        .iter()
        .map(|row| kept.iter().zip(&b).map(|(&j, bj)| row[j] * bj).sum())
        .collect();
    let sse: f64 = y.iter().zip(&fitted).map(|(a, f)| (a - f).powi(2)).sum();
    let mean = y.iter().sum::<f64>() / n as f64;
    let sst: f64 = y.iter().map(|a| (a - mean).powi(2)).sum();
    let r_squared = if sst > 0.0 { 1.0 - sse / sst } else { 1.0 };
    let df = n - p;
    // Var(b) = s^2 (R^T R)^-1 = s^2 R^-1 R^-T: the variance of b_i is s^2 times the squared
    // norm of row i of R^-1.
    let rinv = upper_inverse(&r, p);
    let s2 = if df > 0 { sse / df as f64 } else { f64::NAN };
    let t = t_quantile_975(df);
    let mut coefficients: Vec<Coefficient> = names
        .iter()
        .map(|nm| Coefficient {
            name: (*nm).to_owned(),
            value: 0.0,
            ci95: f64::NAN,
            aliased: true,
        })
        .collect();
    for (idx, &j) in kept.iter().enumerate() {
        let var = s2 * rinv[idx].iter().map(|v| v * v).sum::<f64>();
        coefficients[j] = Coefficient {
            name: names[j].to_owned(),
            value: b[idx],
            ci95: t * var.sqrt(),
            aliased: false,
        };
    }
    Some(Fit {
        coefficients,
        r_squared,
        n,
        fitted,
    })
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Inverse of the upper-triangular R stored by columns (`r[j][i]` = R(i, j)), as rows.
fn upper_inverse(r: &[Vec<f64>], p: usize) -> Vec<Vec<f64>> {
    let mut inv = vec![vec![0.0; p]; p];
    for i in (0..p).rev() {
        inv[i][i] = 1.0 / r[i][i];
        for j in i + 1..p {
            let mut s = 0.0;
            for (m, inv_m) in inv.iter().enumerate().take(j + 1).skip(i + 1) {
                s += r[m][i] * inv_m[j];
            }
            inv[i][j] = -s / r[i][i];
        }
    }
    inv
}

/// The 97.5 % quantile of Student's t with `df` degrees of freedom (two-sided 95 %): exact
/// table values up to 30, then the Cornish-Fisher expansion around the normal quantile
/// (Abramowitz and Stegun 26.7.5), within 0.001 of the exact value there.
pub fn t_quantile_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[df - 1],
        _ => {
            let z: f64 = 1.959_964;
            let d = df as f64;
            z + (z.powi(3) + z) / (4.0 * d)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * d * d)
                + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z)
                    / (384.0 * d.powi(3))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_line() {
        let x: Vec<Vec<f64>> = (0..10).map(|i| vec![f64::from(i), 1.0]).collect();
        let y: Vec<f64> = (0..10).map(|i| 2.5 * f64::from(i) + 7.0).collect();
        let f = least_squares(&["A", "B"], &x, &y).unwrap();
        assert!((f.coefficients[0].value - 2.5).abs() < 1e-9);
        assert!((f.coefficients[1].value - 7.0).abs() < 1e-9);
        assert!((f.r_squared - 1.0).abs() < 1e-12);
        assert!(f.coefficients[0].ci95 < 1e-6);
    }

    #[test]
    fn confidence_interval_matches_the_textbook_formula() {
        // y = x + noise, x = 1..5: slope standard error = s / sqrt(Sxx).
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        let ys = [1.1, 1.9, 3.2, 3.8, 5.1];
        let x: Vec<Vec<f64>> = xs.iter().map(|&v| vec![v, 1.0]).collect();
        let f = least_squares(&["A", "B"], &x, &ys).unwrap();
        let slope = f.coefficients[0].value;
        let resid = f.residuals(&ys);
        let s = (resid.iter().map(|r| r * r).sum::<f64>() / 3.0).sqrt();
        let se = s / 10f64.sqrt(); // Sxx = 10
        assert!((slope - 0.99).abs() < 1e-9);
        assert!((f.coefficients[0].ci95 - 3.182 * se).abs() < 1e-9);
    }

    #[test]
    fn collinear_columns_are_aliased() {
        let x: Vec<Vec<f64>> = (0..6)
            .map(|i| {
                let a = f64::from(i);
                vec![a, 2.0 * a, 1.0]
            })
            .collect();
        let y: Vec<f64> = (0..6).map(|i| 3.0 * f64::from(i) + 1.0).collect();
        let f = least_squares(&["a", "2a", "1"], &x, &y).unwrap();
        assert!(f.coefficients[1].aliased && !f.coefficients[0].aliased);
        assert!((f.coefficients[0].value - 3.0).abs() < 1e-9);
    }

    #[test]
    fn too_few_observations() {
        assert!(least_squares(&["a"], &[], &[]).is_none());
        let one = least_squares(&["a", "b"], &[vec![1.0, 1.0]], &[1.0]).unwrap();
        assert!(one.coefficients[1].aliased && one.coefficients[0].ci95.is_nan());
        assert!((t_quantile_975(40) - 2.021).abs() < 0.002);
        assert!((t_quantile_975(120) - 1.980).abs() < 0.002);
    }
}
