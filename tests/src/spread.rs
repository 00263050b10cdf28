//! Min, median and max of a figure measured over several runs: what
//! `make bench` reports for each figure (`tests/benches/`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; all zero when there are none. The median of
    /// an even count is the upper of the two middle values.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.into_iter().collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return Self {
                min: 0.0,
                median: 0.0,
                max: 0.0,
            };
        }
        Self {
            min: v[0],
            median: v[v.len() / 2],
            max: v[v.len() - 1],
        }
    }

    /// `median (min–max)` with `digits` decimals, the median alone when the
    /// three print the same.
    pub fn show(&self, digits: usize) -> String {
        self.show_with(digits, "")
    }

    /// [`Spread::show`] with `unit` after the median (`" ms"`, `" %"`).
    pub fn show_with(&self, digits: usize, unit: &str) -> String {
        self.render(digits, unit, false)
    }

    /// [`Spread::show_with`] with every number signed (`+1.5 % (-0.3–+2.0)`).
    pub fn show_signed(&self, digits: usize, unit: &str) -> String {
        self.render(digits, unit, true)
    }

    fn render(&self, digits: usize, unit: &str, signed: bool) -> String {
        let number = |v: f64| {
            if signed {
                format!("{v:+.digits$}")
            } else {
                format!("{v:.digits$}")
            }
        };
        let (median, min, max) = (number(self.median), number(self.min), number(self.max));
        if min == max {
            format!("{median}{unit}")
        } else {
            format!("{median}{unit} ({min}–{max})")
        }
    }
}
