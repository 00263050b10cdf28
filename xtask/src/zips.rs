//! `make build`'s listing of the Lambda packages: every
//! `<dir>/*/bootstrap.zip`, its size in bytes and its disk usage as `du -h`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::proc::Failure;

/// `du -h`'s figure: powers of 1024, rounded up, one decimal below 10.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["K", "M", "G", "T", "P", "E"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    loop {
        let tenths = (value * 10.0).ceil() / 10.0;
        let shown = if tenths < 10.0 {
            format!("{tenths:.1}")
        } else {
            format!("{}", value.ceil())
        };
        if value.ceil() < 1024.0 || unit + 1 == UNITS.len() {
            return format!("{shown}{}", UNITS[unit]);
        }
        value /= 1024.0;
        unit += 1;
    }
}

/// One row, as `printf '  %-56s %10s bytes  %6s\n'` printed it.
pub fn row(path: &str, bytes: u64, disk: u64) -> String {
    format!("  {path:<56} {bytes:>10} bytes  {:>6}", human(disk))
}

pub fn run(dir: &str) -> Result<(), Failure> {
    let mut zips: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .map(|name| format!("{dir}/{name}/bootstrap.zip"))
                .filter(|zip| Path::new(zip).is_file())
                .collect()
        })
        .unwrap_or_default();
    if zips.is_empty() {
        return Err(Failure::error(format!("no {dir}/*/bootstrap.zip")));
    }
    zips.sort();
    println!("Lambda packages:");
    for zip in &zips {
        let meta = std::fs::metadata(zip).map_err(|e| Failure::error(format!("{zip}: {e}")))?;
        println!("{}", row(zip, meta.len(), meta.blocks() * 512));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_du_h_prints_them() {
        assert_eq!(human(0), "0");
        assert_eq!(human(4096), "4.0K");
        assert_eq!(human(1536), "1.5K");
        assert_eq!(human(1537), "1.6K");
        assert_eq!(human(10 * 1024 - 1), "10K");
        assert_eq!(human(12_000_000), "12M");
        assert_eq!(human(1024 * 1024), "1.0M");
        assert_eq!(human(1024 * 1024 - 1), "1.0M");
        assert_eq!(human(3 * 1024 * 1024 * 1024), "3.0G");
    }

    #[test]
    /// The expected row is `printf '  %-56s %10s bytes  %6s\n'` of the same
    /// values; `du -h` printed 2.3M for 2,347,008 bytes on disk.
    fn a_row_keeps_the_makefiles_columns() {
        assert_eq!(
            row("target/lambda/api/bootstrap.zip", 2_345_678, 2_347_008),
            "  target/lambda/api/bootstrap.zip                             2345678 bytes    2.3M"
        );
    }
}
