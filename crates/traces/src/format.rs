//! The supported trace shapes and content-based detection.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::UnknownFormat;

/// One of the published trace shapes.
///
/// Detection looks at the content, not the file name, because the public
/// files use `.txt`, `.csv` and `.json` inconsistently (JSON lines live in
/// `.txt` files). Pass a `Format` to [`crate::load_as`] to skip detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `t_ms,add|remove,node` rows, sorted by time; an optional header row
    /// (`t_ms,op,node` or any other column names).
    /// The canonical format ([`crate::write_events_csv`] writes it).
    EventsCsv,
    /// `t_ms,count_after_event` rows, sorted by time; an optional header row.
    CountsCsv,
    /// JSON lines `[t_ms, "add"|"remove"|"no-op"|"migration", {nodes, duration, *_strategy}]`
    /// (the Parcae artifact's one-hour replay segments).
    SegmentsJsonl,
    /// JSON array of `{interval: [prev_N, in, out], duration, "throughut-opt", "liveput-truth",
    /// "liveput-predict"}` (the Parcae artifact's per-minute decisions).
    DecisionsJson,
    /// `{"metadata": {"gap_seconds": g}, "data": [count, ...]}` (one count per tick).
    TicksJson,
    /// `YYYY-MM-DD, HH:MM:SS, N` rows, possibly unsorted; an optional header row.
    TimestampedCounts,
}

impl Format {
    /// Every format, in documentation order.
    pub const ALL: [Format; 6] = [
        Format::EventsCsv,
        Format::CountsCsv,
        Format::SegmentsJsonl,
        Format::DecisionsJson,
        Format::TicksJson,
        Format::TimestampedCounts,
    ];

    /// The stable name used on command lines and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Format::EventsCsv => "events-csv",
            Format::CountsCsv => "counts-csv",
            Format::SegmentsJsonl => "segments-jsonl",
            Format::DecisionsJson => "decisions-json",
            Format::TicksJson => "ticks-json",
            Format::TimestampedCounts => "timestamped-counts",
        }
    }

    /// Whether the format carries real node ids (otherwise they are synthesized).
    pub fn has_node_ids(self) -> bool {
        matches!(self, Format::EventsCsv | Format::SegmentsJsonl)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

impl Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Outcome of looking at a file's content.
pub(crate) enum Detected {
    Found(Format),
    /// Nothing but whitespace and comments.
    Empty,
    /// The first data line fits no format: (line, reason).
    Unknown(usize, String),
}

/// Guesses the format from the first meaningful characters / line.
///
/// * `{` starts a ticks JSON object.
/// * `[` followed by `{` or `]` starts a decisions array; `[` followed by
///   anything else starts a JSON-lines segment row.
/// * Otherwise the first data line (blank and `#` lines skipped) decides:
///   a `YYYY-MM-DD` first field means timestamped counts, three fields
///   means events, two fields means counts; a header row (column names,
///   `parse::csv_rows`) is passed over.
pub(crate) fn detect(text: &str) -> Detected {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        return Detected::Found(Format::TicksJson);
    }
    if let Some(rest) = trimmed.strip_prefix('[') {
        return match rest.trim_start().chars().next() {
            Some('{') | Some(']') | None => Detected::Found(Format::DecisionsJson),
            Some(_) => Detected::Found(Format::SegmentsJsonl),
        };
    }
    // The row after a header decides; a header alone decides by its shape
    // (the parser then reports that there are no rows).
    let header_alone = || {
        crate::parse::data_lines(text)
            .next()
            .map(|(line_no, line)| (line_no, crate::parse::split_fields(line)))
    };
    let Some((line_no, fields)) = crate::parse::csv_rows(text).next().or_else(header_alone) else {
        return Detected::Empty;
    };
    if looks_like_date(fields[0]) {
        return Detected::Found(Format::TimestampedCounts);
    }
    match fields.len() {
        3 => Detected::Found(Format::EventsCsv),
        2 => Detected::Found(Format::CountsCsv),
        n => Detected::Unknown(
            line_no,
            format!(
                "cannot tell the trace format: first data row has {n} comma-separated field(s); \
                 expected t_ms,op,node (events), t_ms,count (counts) or YYYY-MM-DD, HH:MM:SS, N"
            ),
        ),
    }
}

/// `digits-digits-digits`, the shape of a calendar date.
fn looks_like_date(field: &str) -> bool {
    let parts: Vec<&str> = field.split('-').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.to_string().parse::<Format>(), Ok(f));
        }
        assert!("csv".parse::<Format>().is_err());
        assert_eq!("Events-CSV".parse::<Format>(), Ok(Format::EventsCsv));
    }

    #[test]
    fn detection() {
        let found = |s: &str| match detect(s) {
            Detected::Found(f) => Some(f),
            _ => None,
        };
        assert_eq!(found("0,add,node1\n"), Some(Format::EventsCsv));
        assert_eq!(found("t_ms,op,node\n0,add,a\n"), Some(Format::EventsCsv));
        assert_eq!(found("# c\n\n0,3\n"), Some(Format::CountsCsv));
        assert_eq!(found("2023-01-02, 10:00:00, 3\n"), Some(Format::TimestampedCounts));
        assert_eq!(found("[0, \"add\", {}]\n"), Some(Format::SegmentsJsonl));
        assert_eq!(found(" [\n {\"interval\": [0,1,0]}]"), Some(Format::DecisionsJson));
        assert_eq!(found("{\"data\": []}"), Some(Format::TicksJson));
        assert!(matches!(detect("  \n# only\n"), Detected::Empty));
        // Headers of any names: the row after decides.
        assert_eq!(found("time,event,instance\n0,add,a\n"), Some(Format::EventsCsv));
        assert_eq!(found("time_ms,instances\n0,3\n"), Some(Format::CountsCsv));
        assert_eq!(found("date, time, count\n2023-01-02, 10:00:00, 3\n"), Some(Format::TimestampedCounts));
        assert_eq!(found("t_ms,op,node\n"), Some(Format::EventsCsv));
        assert!(matches!(detect("1,2,3,4\n"), Detected::Unknown(1, _)));
    }
}
