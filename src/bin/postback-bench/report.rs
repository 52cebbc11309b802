//! Figures: percentiles, and one `RESULT scenario=.. metric=.. value=.. unit=..` line per
//! figure (the format of the peer comparator in `../shared/peers`), collected so that
//! repeated runs can be reduced to their medians.

use std::collections::BTreeMap;

/// The `p`-th percentile (0–100) of `values`, nearest rank; 0 when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Figures of every run, by (scenario, metric), with their unit.
#[derive(Default)]
pub struct Results {
    figures: BTreeMap<(String, String), (Vec<f64>, String)>,
}

impl Results {
    /// Records and prints one figure of one run.
    pub fn add(&mut self, scenario: &str, run: usize, metric: &str, value: f64, unit: &str) {
        println!("RESULT peer=postback scenario={scenario} run={run} metric={metric} value={value:.3} unit={unit}");
        self.figures
            .entry((scenario.to_string(), metric.to_string()))
            .or_insert_with(|| (Vec::new(), unit.to_string()))
            .0
            .push(value);
    }

    /// Prints the median of each figure over the runs.
    pub fn print_medians(&self) {
        println!("\n| scenario | metric | median | runs | unit |\n|---|---|---|---|---|");
        for ((scenario, metric), (values, unit)) in &self.figures {
            let all: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
            println!(
                "| {scenario} | {metric} | {:.2} | {} | {unit} |",
                percentile(values, 50.0),
                all.join(" / ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
