//! Hand-written calendar arithmetic for timestamped-count traces (no date crate needed).

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`). `month` is 1..=12 and `day` 1..=31; callers validate.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400; // [0, 399]
    let m = i64::from(month);
    let d = i64::from(day);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// Whether `year` is a Gregorian leap year.
pub(crate) fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Number of days in `month` (1..=12) of `year`; 0 for an invalid month.
pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Parses `YYYY-MM-DD` and `HH:MM:SS` into seconds since the Unix epoch.
pub(crate) fn parse_date_time(date: &str, time: &str) -> Result<i64, String> {
    let d: Vec<&str> = date.split('-').collect();
    let [ys, ms, ds] = d.as_slice() else {
        return Err(format!("date '{date}' is not YYYY-MM-DD"));
    };
    let year = digits(ys, 4, 4).ok_or_else(|| format!("date '{date}': year '{ys}' is not 4 digits"))?;
    let month = digits(ms, 1, 2).ok_or_else(|| format!("date '{date}': month '{ms}' is not a number"))?;
    let day = digits(ds, 1, 2).ok_or_else(|| format!("date '{date}': day '{ds}' is not a number"))?;
    if !(1..=12).contains(&month) {
        return Err(format!("date '{date}': month {month} is not in 1..=12"));
    }
    let dim = days_in_month(i64::from(year), month);
    if day < 1 || day > dim {
        return Err(format!("date '{date}': day {day} is not in 1..={dim} for that month"));
    }
    let t: Vec<&str> = time.split(':').collect();
    let [hs, mins, ss] = t.as_slice() else {
        return Err(format!("time '{time}' is not HH:MM:SS"));
    };
    let hour = digits(hs, 1, 2).ok_or_else(|| format!("time '{time}': hour '{hs}' is not a number"))?;
    let minute =
        digits(mins, 1, 2).ok_or_else(|| format!("time '{time}': minute '{mins}' is not a number"))?;
    let second = digits(ss, 1, 2).ok_or_else(|| format!("time '{time}': second '{ss}' is not a number"))?;
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!("time '{time}' is out of range (00:00:00..=23:59:59)"));
    }
    let days = days_from_civil(i64::from(year), month, day);
    Ok(days * 86_400 + i64::from(hour) * 3_600 + i64::from(minute) * 60 + i64::from(second))
}

/// An ASCII decimal of `min..=max` digits.
fn digits(s: &str, min: usize, max: usize) -> Option<u32> {
    if s.len() < min || s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2024, 2, 29) + 1, days_from_civil(2024, 3, 1));
        // 2023-06-15 12:34:56 UTC = 1686832496
        assert_eq!(parse_date_time("2023-06-15", "12:34:56"), Ok(1_686_832_496));
    }

    #[test]
    fn rejects_impossible_dates() {
        assert!(parse_date_time("2023-02-29", "00:00:00").is_err());
        assert!(parse_date_time("2024-02-29", "00:00:00").is_ok());
        assert!(parse_date_time("1900-02-29", "00:00:00").is_err());
        assert!(parse_date_time("2000-02-29", "00:00:00").is_ok());
        assert!(parse_date_time("2023-13-01", "00:00:00").is_err());
        assert!(parse_date_time("2023-04-31", "00:00:00").is_err());
        assert!(parse_date_time("2023-01-01", "24:00:00").is_err());
        assert!(parse_date_time("2023-01-01", "1:2").is_err());
        assert!(parse_date_time("23-01-01", "00:00:00").is_err());
    }
}
