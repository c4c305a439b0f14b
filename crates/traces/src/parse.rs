//! Parsers for every supported shape. Each validates as it goes and reports
//! the first problem with its line (or JSON path) and a reason.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::civil;
use crate::error::{Location, TraceError};
use crate::format::{self, Detected, Format};
use crate::model::{Event, EventKind, ReferenceDecision, Strategy, Trace};

/// Largest instance count a count-only source may state. Counts are expanded
/// into one event per instance, so this bounds memory on hostile input.
pub const MAX_COUNT: u64 = 1_000_000;

/// Largest number of events one trace may hold (again a memory bound).
pub const MAX_EVENTS: usize = 10_000_000;

/// Context for error construction.
struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn at_line(&self, line: usize, reason: impl Into<String>) -> TraceError {
        TraceError::Malformed {
            path: self.path.to_path_buf(),
            location: Location::Line(line),
            reason: reason.into(),
        }
    }

    fn at_json(&self, line: Option<usize>, json_path: String, reason: impl Into<String>) -> TraceError {
        let location = match line {
            Some(line) => Location::LineJson { line, path: json_path },
            None => Location::Json(json_path),
        };
        TraceError::Malformed { path: self.path.to_path_buf(), location, reason: reason.into() }
    }

    fn empty(&self, reason: impl Into<String>) -> TraceError {
        TraceError::Empty { path: self.path.to_path_buf(), reason: reason.into() }
    }

    /// A serde_json syntax error inside a document that starts on `first_line`.
    fn json_syntax(&self, first_line: usize, e: &serde_json::Error) -> TraceError {
        let msg = e.to_string();
        let msg = match msg.find(" at line ") {
            Some(i) => msg.get(..i).unwrap_or(&msg).to_string(),
            None => msg,
        };
        let line = first_line.saturating_add(e.line().saturating_sub(1)).max(1);
        self.at_line(line, format!("invalid JSON (column {}): {msg}", e.column()))
    }
}

/// Non-blank, non-comment lines with their 1-based numbers, trimmed.
/// Lines whose first non-blank character is `#` are comments.
pub(crate) fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Parses raw bytes (the content of `source`) as `format`, or detects it.
pub(crate) fn parse_bytes(source: &Path, data: &[u8], format: Option<Format>) -> Result<Trace, TraceError> {
    let ctx = Ctx { path: source };
    let text = match std::str::from_utf8(data) {
        Ok(t) => t,
        Err(e) => {
            let good = data.get(..e.valid_up_to()).unwrap_or_default();
            let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
            return Err(ctx.at_line(line, format!("not valid UTF-8 (byte offset {})", e.valid_up_to())));
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let format = match format {
        Some(f) => f,
        None => match format::detect(text) {
            Detected::Found(f) => f,
            Detected::Empty => return Err(ctx.empty("the file contains no data rows")),
            Detected::Unknown(line, reason) => return Err(ctx.at_line(line, reason)),
        },
    };
    match format {
        Format::EventsCsv => events_csv(&ctx, text),
        Format::CountsCsv => counts_csv(&ctx, text),
        Format::SegmentsJsonl => segments_jsonl(&ctx, text),
        Format::DecisionsJson => decisions_json(&ctx, text),
        Format::TicksJson => ticks_json(&ctx, text),
        Format::TimestampedCounts => timestamped_counts(&ctx, text),
    }
}

/// Accumulates validated events.
struct Builder {
    events: Vec<Event>,
    /// Alive nodes (explicit ids).
    alive: HashSet<String>,
    /// Alive nodes in order of addition (inferred ids; LIFO removal).
    stack: Vec<String>,
    next_id: u64,
}

impl Builder {
    fn new() -> Self {
        Builder { events: Vec::new(), alive: HashSet::new(), stack: Vec::new(), next_id: 1 }
    }

    fn last_t(&self) -> Option<u64> {
        self.events.last().map(|e| e.t_ms)
    }

    fn push(&mut self, t_ms: u64, kind: EventKind, node: String) -> Result<(), String> {
        if let Some(last) = self.last_t()
            && t_ms < last
        {
            return Err(format!(
                "time {t_ms} ms is earlier than the previous event at {last} ms; this format must be sorted by time"
            ));
        }
        if self.events.len() >= MAX_EVENTS {
            return Err(format!("more than {MAX_EVENTS} events; the trace is too large"));
        }
        self.events.push(Event { t_ms, kind, node });
        Ok(())
    }

    /// Adds a named node.
    fn add(&mut self, t_ms: u64, node: &str) -> Result<(), String> {
        check_node_name(node)?;
        if self.alive.contains(node) {
            return Err(format!("cannot add node '{node}': it is already alive"));
        }
        self.push(t_ms, EventKind::Add, node.to_string())?;
        self.alive.insert(node.to_string());
        Ok(())
    }

    /// Removes a named node.
    fn remove(&mut self, t_ms: u64, node: &str) -> Result<(), String> {
        check_node_name(node)?;
        if !self.alive.contains(node) {
            return Err(format!("cannot remove node '{node}': it is not alive"));
        }
        self.push(t_ms, EventKind::Remove, node.to_string())?;
        self.alive.remove(node);
        Ok(())
    }

    fn add_anonymous(&mut self, t_ms: u64, n: u64) -> Result<(), String> {
        for _ in 0..n {
            let node = format!("n{}", self.next_id);
            self.next_id += 1;
            self.push(t_ms, EventKind::Add, node.clone())?;
            self.stack.push(node);
        }
        Ok(())
    }

    fn remove_anonymous(&mut self, t_ms: u64, n: u64) -> Result<(), String> {
        let alive = self.stack.len();
        if n > alive as u64 {
            return Err(format!("cannot remove {n} instance(s): only {alive} alive"));
        }
        for _ in 0..n {
            if let Some(node) = self.stack.pop() {
                self.push(t_ms, EventKind::Remove, node)?;
            }
        }
        Ok(())
    }

    /// Moves the anonymous fleet to `count` instances at `t_ms`.
    fn set_count(&mut self, t_ms: u64, count: u64) -> Result<(), String> {
        let alive = self.stack.len() as u64;
        if count > alive {
            self.add_anonymous(t_ms, count - alive)
        } else {
            self.remove_anonymous(t_ms, alive - count)
        }
    }

    fn finish(
        self,
        ctx: &Ctx,
        format: Format,
        end_ms: u64,
        node_ids_inferred: bool,
        reference: Option<Vec<ReferenceDecision>>,
    ) -> Trace {
        let end_ms = end_ms.max(self.last_t().unwrap_or(0));
        Trace {
            source: ctx.path.to_path_buf(),
            format,
            events: self.events,
            end_ms,
            node_ids_inferred,
            reference,
        }
    }
}

/// Node ids must survive a round trip through the canonical CSV.
fn check_node_name(node: &str) -> Result<(), String> {
    if node.is_empty() {
        return Err("empty node id".into());
    }
    if node.trim() != node {
        return Err(format!("node id '{node}' has leading or trailing whitespace"));
    }
    if node.contains(',') || node.chars().any(char::is_control) || node.starts_with('#') {
        return Err(format!("node id {node:?} contains a comma or control character or starts with '#'"));
    }
    Ok(())
}

/// A millisecond timestamp or duration: a non-negative integer.
fn parse_ms(field: &str, what: &str) -> Result<u64, String> {
    if field.is_empty() {
        return Err(format!("missing {what}"));
    }
    if let Some(rest) = field.strip_prefix('-')
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("{what} '{field}' is negative; expected non-negative milliseconds"));
    }
    if !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} '{field}' is not a non-negative integer (milliseconds)"));
    }
    field.parse::<u64>().map_err(|_| format!("{what} '{field}' is too large"))
}

/// An instance count: a non-negative integer up to [`MAX_COUNT`].
fn parse_count(field: &str) -> Result<u64, String> {
    if let Some(rest) = field.strip_prefix('-')
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("negative instance count '{field}'"));
    }
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("instance count '{field}' is not a non-negative integer"));
    }
    match field.parse::<u64>() {
        Ok(n) if n <= MAX_COUNT => Ok(n),
        _ => Err(format!("instance count '{field}' exceeds the supported maximum of {MAX_COUNT}")),
    }
}

/// Whether a first row names columns instead of holding data: every field
/// begins with a letter (no timestamp, count or date does), as in `t_ms,op,node`,
/// `time,event,instance` or `date, time, count`. Spreadsheets and pandas write
/// one by default, whatever they call the columns. `abc,add,n1` is not one: an
/// event row with a bad timestamp, which the parser reports as such.
pub(crate) fn header_row(fields: &[&str]) -> bool {
    let names = fields.iter().all(|f| f.bytes().next().is_some_and(|b| b.is_ascii_alphabetic()));
    let event = matches!(fields, [_, "add" | "remove", _]);
    names && !event
}

pub(crate) fn split_fields(line: &str) -> Vec<&str> {
    line.split(',').map(str::trim).collect()
}

/// The rows of a comma-separated format (fields trimmed) with a first row of
/// column names ([`header_row`]) passed over: the one place a header is
/// recognised, for detection and every CSV shape alike.
pub(crate) fn csv_rows(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    data_lines(text)
        .map(|(line_no, line)| (line_no, split_fields(line)))
        .enumerate()
        .filter(|(i, (_, fields))| *i > 0 || !header_row(fields))
        .map(|(_, row)| row)
}

/// Format 1: `t_ms,add|remove,node`, and optionally a last row `t_ms,end,`
/// that carries the trace on past its last event (a calm tail: a synthetic
/// fleet's hours after its last loss, a ticks file's last count held).
fn events_csv(ctx: &Ctx, text: &str) -> Result<Trace, TraceError> {
    let mut b = Builder::new();
    // The `end` row's time and line, once seen: no row may follow it.
    let mut ended: Option<(u64, usize)> = None;
    for (line_no, fields) in csv_rows(text) {
        let [t, op, node] = fields.as_slice() else {
            return Err(ctx.at_line(
                line_no,
                format!("expected 3 comma-separated fields (t_ms,op,node), found {}", fields.len()),
            ));
        };
        if let Some((_, end_line)) = ended {
            return Err(ctx.at_line(line_no, format!("a row after the end row of line {end_line}")));
        }
        let t = parse_ms(t, "timestamp").map_err(|r| ctx.at_line(line_no, r))?;
        let result = match *op {
            "add" => b.add(t, node),
            "remove" => b.remove(t, node),
            "end" => end_row(&b, t, node).map(|()| ended = Some((t, line_no))),
            other => Err(format!("unknown operation '{other}' (expected add, remove or end)")),
        };
        result.map_err(|r| ctx.at_line(line_no, r))?;
    }
    let Some(last) = b.last_t() else {
        return Err(ctx.empty("no event rows"));
    };
    Ok(b.finish(ctx, Format::EventsCsv, ended.map_or(last, |(end, _)| end), false, None))
}

/// Checks an events CSV's `t_ms,end,` row: no node, at or after every event.
fn end_row(b: &Builder, t_ms: u64, node: &str) -> Result<(), String> {
    if !node.is_empty() {
        return Err(format!("the end row names no node (found '{node}'): write `{t_ms},end,`"));
    }
    match b.last_t() {
        Some(last) if t_ms < last => {
            Err(format!("end at {t_ms} ms is earlier than the previous event at {last} ms"))
        }
        Some(_) => Ok(()),
        None => Err("an end row before any event".to_string()),
    }
}

/// Format 2: `t_ms,count_after_event`.
fn counts_csv(ctx: &Ctx, text: &str) -> Result<Trace, TraceError> {
    let mut b = Builder::new();
    let mut last_row: Option<u64> = None;
    for (line_no, fields) in csv_rows(text) {
        let [t, count] = fields.as_slice() else {
            return Err(ctx.at_line(
                line_no,
                format!("expected 2 comma-separated fields (t_ms,count_after_event), found {}", fields.len()),
            ));
        };
        let t = parse_ms(t, "timestamp").map_err(|r| ctx.at_line(line_no, r))?;
        if let Some(prev) = last_row
            && t < prev
        {
            return Err(ctx.at_line(
                line_no,
                format!("timestamp {t} is earlier than the previous row's {prev}; count rows must be sorted by time"),
            ));
        }
        let count = parse_count(count).map_err(|r| ctx.at_line(line_no, r))?;
        b.set_count(t, count).map_err(|r| ctx.at_line(line_no, r))?;
        last_row = Some(t);
    }
    let Some(end) = last_row else {
        return Err(ctx.empty("no count rows"));
    };
    Ok(b.finish(ctx, Format::CountsCsv, end, true, None))
}

/// Reads a non-negative integer out of a JSON value.
fn json_u64(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Ok(u)
            } else if n.as_i64().is_some() {
                Err(format!("{what} must not be negative (got {n})"))
            } else {
                Err(format!("{what} must be a non-negative integer (got {n})"))
            }
        }
        other => Err(format!("{what} must be a non-negative integer, not {}", json_kind(other))),
    }
}

fn json_u32(v: &Value, what: &str) -> Result<u32, String> {
    let u = json_u64(v, what)?;
    u32::try_from(u).map_err(|_| format!("{what} {u} is too large"))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A `[D, P]` pair. Errors carry a JSON path suffix relative to `v`.
fn json_strategy(v: &Value) -> Result<Strategy, (String, String)> {
    let Value::Array(items) = v else {
        return Err((String::new(), format!("expected a [D, P] pair, not {}", json_kind(v))));
    };
    let [d, p] = items.as_slice() else {
        return Err((String::new(), format!("expected a [D, P] pair, found {} element(s)", items.len())));
    };
    let data_parallel = json_u32(d, "D").map_err(|r| ("[0]".to_string(), r))?;
    let pipeline_stages = json_u32(p, "P").map_err(|r| ("[1]".to_string(), r))?;
    Ok(Strategy { data_parallel, pipeline_stages })
}

/// Fetches `key` (first of `keys` present) from an object and converts it.
fn field<'v>(
    obj: &'v serde_json::Map<String, Value>,
    keys: &[&'static str],
) -> Result<(&'static str, &'v Value), String> {
    for k in keys {
        if let Some(v) = obj.get(*k) {
            return Ok((k, v));
        }
    }
    Err(format!("missing field \"{}\"", keys.first().copied().unwrap_or_default()))
}

/// Format 3: JSON lines `[t_ms, op, {nodes, duration, *_strategy}]`.
///
/// A row at `t` applies `op` to `nodes` at `t`; the strategies are the
/// decisions for `[t, t + duration)`. Rows must be sorted and must not overlap.
fn segments_jsonl(ctx: &Ctx, text: &str) -> Result<Trace, TraceError> {
    let mut b = Builder::new();
    let mut reference = Vec::new();
    let mut prev_end: Option<u64> = None;
    for (line_no, line) in data_lines(text) {
        let v: Value = serde_json::from_str(line).map_err(|e| ctx.json_syntax(line_no, &e))?;
        let at = |p: &str, r: String| ctx.at_json(Some(line_no), p.to_string(), r);
        let Value::Array(row) = &v else {
            return Err(
                ctx.at_line(line_no, format!("expected a [t_ms, op, {{...}}] row, not {}", json_kind(&v)))
            );
        };
        let [t, op, body] = row.as_slice() else {
            return Err(ctx.at_line(
                line_no,
                format!("expected a [t_ms, op, {{...}}] row of 3 elements, found {}", row.len()),
            ));
        };
        let t = json_u64(t, "t_ms").map_err(|r| at("[0]", r))?;
        let Value::String(op) = op else {
            return Err(at("[1]", format!("operation must be a string, not {}", json_kind(op))));
        };
        let Value::Object(body) = body else {
            return Err(at("[2]", format!("expected an object, not {}", json_kind(body))));
        };
        let (_, nodes) = field(body, &["nodes"]).map_err(|r| at("[2]", r))?;
        let Value::Array(nodes) = nodes else {
            return Err(at("[2].nodes", format!("expected an array of node ids, not {}", json_kind(nodes))));
        };
        let (_, duration) = field(body, &["duration"]).map_err(|r| at("[2]", r))?;
        let duration = json_u64(duration, "duration").map_err(|r| at("[2].duration", r))?;
        let mut strategies = [Strategy { data_parallel: 0, pipeline_stages: 0 }; 3];
        let keys = ["throughput_opt_strategy", "liveput_truth_strategy", "liveput_predict_strategy"];
        for (slot, key) in strategies.iter_mut().zip(keys) {
            let (_, v) = field(body, &[key]).map_err(|r| at("[2]", r))?;
            *slot = json_strategy(v).map_err(|(p, r)| at(&format!("[2].{key}{p}"), r))?;
        }
        if let Some(end) = prev_end
            && t < end
        {
            return Err(at(
                "[0]",
                format!(
                    "row starts at {t} ms, before the previous row's interval ends at {end} ms; rows must be sorted and not overlap"
                ),
            ));
        }
        let migration = match op.as_str() {
            "add" | "remove" => {
                if nodes.is_empty() {
                    return Err(at("[2].nodes", format!("an '{op}' row must list at least one node")));
                }
                for (i, n) in nodes.iter().enumerate() {
                    let Value::String(n) = n else {
                        return Err(at(
                            &format!("[2].nodes[{i}]"),
                            format!("node id must be a string, not {}", json_kind(n)),
                        ));
                    };
                    let r = if op == "add" { b.add(t, n) } else { b.remove(t, n) };
                    r.map_err(|r| at(&format!("[2].nodes[{i}]"), r))?;
                }
                false
            }
            "no-op" | "migration" => {
                if !nodes.is_empty() {
                    return Err(at("[2].nodes", format!("a '{op}' row must not list nodes")));
                }
                op == "migration"
            }
            other => {
                return Err(at(
                    "[1]",
                    format!("unknown operation '{other}' (expected add, remove, no-op or migration)"),
                ));
            }
        };
        let end =
            t.checked_add(duration).ok_or_else(|| at("[2].duration", "t_ms + duration overflows".into()))?;
        prev_end = Some(end);
        let [throughput_opt, liveput_truth, liveput_predict] = strategies;
        reference.push(ReferenceDecision {
            start_ms: t,
            duration_ms: duration,
            throughput_opt,
            liveput_truth,
            liveput_predict,
            migration,
        });
    }
    let Some(end) = prev_end else {
        return Err(ctx.empty("no segment rows"));
    };
    Ok(b.finish(ctx, Format::SegmentsJsonl, end, false, Some(reference)))
}

/// Format 4: JSON array of `{interval: [prev_N, in, out], duration, strategies}`.
///
/// Entry `k` starts where entry `k - 1` ended (cumulative durations). Its
/// `out` removals come before its `in` additions at the start of the entry,
/// so that LIFO id inference never gives a new instance a zero lifetime.
/// `prev_N` must equal the running count (the first entry's `prev_N` must be 0).
fn decisions_json(ctx: &Ctx, text: &str) -> Result<Trace, TraceError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ctx.json_syntax(1, &e))?;
    let Value::Array(entries) = &v else {
        return Err(ctx.at_json(
            None,
            "$".into(),
            format!("expected an array of decisions, not {}", json_kind(&v)),
        ));
    };
    if entries.is_empty() {
        return Err(ctx.empty("the decision array is empty"));
    }
    let mut b = Builder::new();
    let mut reference = Vec::with_capacity(entries.len());
    let mut t: u64 = 0;
    for (k, entry) in entries.iter().enumerate() {
        let at = |p: &str, r: String| ctx.at_json(None, format!("[{k}]{p}"), r);
        let Value::Object(obj) = entry else {
            return Err(at("", format!("expected a decision object, not {}", json_kind(entry))));
        };
        let (_, interval) = field(obj, &["interval"]).map_err(|r| at("", r))?;
        let triple = match interval {
            Value::Array(items) if items.len() == 3 => {
                let mut out = [0u64; 3];
                for (i, (slot, item)) in out.iter_mut().zip(items).enumerate() {
                    let what = ["prev_N", "in", "out"][i];
                    *slot = json_u64(item, what).map_err(|r| at(&format!(".interval[{i}]"), r))?;
                    if *slot > MAX_COUNT {
                        return Err(at(
                            &format!(".interval[{i}]"),
                            format!("{what} {slot} exceeds the supported maximum of {MAX_COUNT}"),
                        ));
                    }
                }
                out
            }
            _ => {
                return Err(at(".interval", "expected [prev_N, in, out] (3 non-negative integers)".into()));
            }
        };
        let [prev, arrivals, preemptions] = triple;
        let alive = b.stack.len() as u64;
        if prev != alive {
            return Err(at(
                ".interval[0]",
                format!(
                    "prev_N {prev} does not match the {alive} instance(s) alive after the previous entries"
                ),
            ));
        }
        b.remove_anonymous(t, preemptions).map_err(|r| at(".interval[2]", r))?;
        b.add_anonymous(t, arrivals).map_err(|r| at(".interval[1]", r))?;
        let (_, duration) = field(obj, &["duration"]).map_err(|r| at("", r))?;
        let duration = json_u64(duration, "duration").map_err(|r| at(".duration", r))?;
        let mut strategies = [Strategy { data_parallel: 0, pipeline_stages: 0 }; 3];
        let keys: [&[&'static str]; 3] =
            [&["throughut-opt", "throughput-opt"], &["liveput-truth"], &["liveput-predict"]];
        for (slot, key) in strategies.iter_mut().zip(keys) {
            let (name, v) = field(obj, key).map_err(|r| at("", r))?;
            *slot = json_strategy(v).map_err(|(p, r)| at(&format!(".\"{name}\"{p}"), r))?;
        }
        let [throughput_opt, liveput_truth, liveput_predict] = strategies;
        reference.push(ReferenceDecision {
            start_ms: t,
            duration_ms: duration,
            throughput_opt,
            liveput_truth,
            liveput_predict,
            migration: false,
        });
        t = t.checked_add(duration).ok_or_else(|| at(".duration", "cumulative duration overflows".into()))?;
    }
    Ok(b.finish(ctx, Format::DecisionsJson, t, true, Some(reference)))
}

/// Format 5: `{"metadata": {"gap_seconds": g}, "data": [count, ...]}`.
///
/// `data[i]` is the instance count during tick `i`, i.e. from `i * g` s on;
/// the trace ends after the last tick, at `len * g` s.
fn ticks_json(ctx: &Ctx, text: &str) -> Result<Trace, TraceError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ctx.json_syntax(1, &e))?;
    let at = |p: &str, r: String| ctx.at_json(None, p.to_string(), r);
    let Value::Object(obj) = &v else {
        return Err(at("$", format!("expected an object with metadata and data, not {}", json_kind(&v))));
    };
    let (_, meta) = field(obj, &["metadata"]).map_err(|r| at("$", r))?;
    let Value::Object(meta) = meta else {
        return Err(at("metadata", format!("expected an object, not {}", json_kind(meta))));
    };
    let (_, gap) = field(meta, &["gap_seconds"]).map_err(|r| at("metadata", r))?;
    let gap_s = match gap {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        other => {
            return Err(at("metadata.gap_seconds", format!("expected a number, not {}", json_kind(other))));
        }
    };
    let gap_ms = (gap_s * 1000.0).round();
    if !(1.0..=1e12).contains(&gap_ms) {
        return Err(at(
            "metadata.gap_seconds",
            format!("gap_seconds {gap_s} must be a positive number of seconds (at least 0.001, at most 1e9)"),
        ));
    }
    let gap_ms = gap_ms as u64;
    let (_, data) = field(obj, &["data"]).map_err(|r| at("$", r))?;
    let Value::Array(data) = data else {
        return Err(at("data", format!("expected an array of counts, not {}", json_kind(data))));
    };
    if data.is_empty() {
        return Err(ctx.empty("the data array is empty"));
    }
    let mut b = Builder::new();
    for (i, c) in data.iter().enumerate() {
        let p = format!("data[{i}]");
        let count = json_u64(c, "instance count").map_err(|r| at(&p, r))?;
        if count > MAX_COUNT {
            return Err(at(
                &p,
                format!("instance count {count} exceeds the supported maximum of {MAX_COUNT}"),
            ));
        }
        let t = (i as u64).checked_mul(gap_ms).ok_or_else(|| at(&p, "tick time overflows".into()))?;
        b.set_count(t, count).map_err(|r| at(&p, r))?;
    }
    let end =
        (data.len() as u64).checked_mul(gap_ms).ok_or_else(|| at("data", "trace length overflows".into()))?;
    Ok(b.finish(ctx, Format::TicksJson, end, true, None))
}

/// Format 6: `YYYY-MM-DD, HH:MM:SS, N` rows in any order.
///
/// Rows are sorted by time (stable, so rows sharing a timestamp keep file
/// order and the last one wins) and time 0 is the earliest row.
fn timestamped_counts(ctx: &Ctx, text: &str) -> Result<Trace, TraceError> {
    let mut rows: Vec<(i64, u64, usize)> = Vec::new();
    for (line_no, fields) in csv_rows(text) {
        let [date, time, count] = fields.as_slice() else {
            return Err(ctx.at_line(
                line_no,
                format!(
                    "expected 3 comma-separated fields (YYYY-MM-DD, HH:MM:SS, N), found {}",
                    fields.len()
                ),
            ));
        };
        let secs = civil::parse_date_time(date, time).map_err(|r| ctx.at_line(line_no, r))?;
        let count = parse_count(count).map_err(|r| ctx.at_line(line_no, r))?;
        rows.push((secs, count, line_no));
    }
    let Some(first) = rows.iter().map(|r| r.0).min() else {
        return Err(ctx.empty("no timestamped rows"));
    };
    rows.sort_by_key(|r| r.0);
    let mut b = Builder::new();
    let mut end = 0;
    for (secs, count, line_no) in rows {
        // Years are 4 digits, so the span fits comfortably in u64 milliseconds.
        let t = u64::try_from(secs - first).unwrap_or(0).saturating_mul(1000);
        b.set_count(t, count).map_err(|r| ctx.at_line(line_no, r))?;
        end = t;
    }
    Ok(b.finish(ctx, Format::TimestampedCounts, end, true, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, format: Option<Format>) -> Result<Trace, TraceError> {
        parse_bytes(Path::new("t.txt"), text.as_bytes(), format)
    }

    #[test]
    fn counts_synthesize_lifo_ids() {
        let t = parse("0,2\n10,3\n20,1\n", None).unwrap();
        assert!(t.node_ids_inferred());
        let ev: Vec<(u64, &str, &str)> =
            t.events().iter().map(|e| (e.t_ms, e.kind.as_str(), e.node.as_str())).collect();
        assert_eq!(
            ev,
            vec![
                (0, "add", "n1"),
                (0, "add", "n2"),
                (10, "add", "n3"),
                (20, "remove", "n3"),
                (20, "remove", "n2")
            ]
        );
        assert_eq!(t.end_ms(), 20);
    }

    #[test]
    fn timestamped_rows_are_sorted_and_relative() {
        let text = "2024-03-01, 00:02:00, 1\n2024-02-29, 23:59:00, 2\n2024-03-01, 00:00:00, 3\n";
        let t = parse(text, None).unwrap();
        assert_eq!(t.format(), Format::TimestampedCounts);
        let times: Vec<u64> = t.events().iter().map(|e| e.t_ms).collect();
        // 2 at 0 s, 3 at 60 s (+1), 1 at 180 s (-2).
        assert_eq!(times, vec![0, 0, 60_000, 180_000, 180_000]);
        assert_eq!(t.end_ms(), 180_000);
    }

    /// A first row of column names, whatever they are called, is passed over in
    /// every CSV shape; a data row with a bad timestamp is not taken for one.
    #[test]
    fn header_rows_of_any_names_are_passed_over() {
        let events = parse("time,event,instance\n0,add,a\n60000,remove,a\n", None).unwrap();
        assert_eq!((events.format(), events.events().len()), (Format::EventsCsv, 2));
        let counts = parse("time_ms,instances\n0,3\n60000,2\n", None).unwrap();
        assert_eq!((counts.format(), counts.end_ms()), (Format::CountsCsv, 60_000));
        let dated = parse("date, time, count\n2024-03-01, 00:00:00, 2\n", None).unwrap();
        assert_eq!(dated.format(), Format::TimestampedCounts);
        let bad = parse("abc,add,a\n", None).unwrap_err().to_string();
        assert!(bad.contains("t.txt:1") && bad.contains("timestamp 'abc'"), "{bad}");
        // Only the first row may be a header.
        let late = parse("0,add,a\ntime,event,instance\n", None).unwrap_err().to_string();
        assert!(late.contains("t.txt:2"), "{late}");
        let only = parse("time,event,instance\n", None).unwrap_err().to_string();
        assert!(only.contains("no event rows"), "{only}");
    }

    /// An events CSV may end past its last event with one last `t_ms,end,`
    /// row (what the writer adds for a calm tail); the row is checked like
    /// any other and named by line when wrong.
    #[test]
    fn an_end_row_carries_an_events_csv_past_its_last_event() {
        let t = parse("t_ms,op,node\n0,add,a\n60000,remove,a\n3600000,end,\n", None).unwrap();
        assert_eq!((t.format(), t.events().len(), t.end_ms()), (Format::EventsCsv, 2, 3_600_000));
        assert_eq!(t.series(60_000).unwrap().intervals.len(), 60);
        let at_last = parse("0,add,a\n0,end,\n", None).unwrap();
        assert_eq!(at_last.end_ms(), 0);
        for (text, expected) in [
            ("0,add,a\n60000,remove,a\n30000,end,\n", "t.txt:3: end at 30000 ms is earlier"),
            ("0,add,a\n60000,end,\n90000,add,b\n", "t.txt:3: a row after the end row of line 2"),
            ("0,add,a\n60000,end,a\n", "t.txt:2: the end row names no node"),
            ("0,end,\n", "t.txt:1: an end row before any event"),
            ("0,add,a\n60000,stop,\n", "expected add, remove or end"),
        ] {
            let err = parse(text, None).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn ticks_hold_for_a_whole_tick() {
        let t = parse(r#"{"metadata":{"gap_seconds":300},"data":[0,3,3,1]}"#, None).unwrap();
        assert_eq!(t.end_ms(), 1_200_000);
        let s = t.series(300_000).unwrap();
        let inst: Vec<u32> = s.intervals.iter().map(|i| i.instances).collect();
        assert_eq!(inst, vec![0, 3, 3, 1]);
    }

    #[test]
    fn decisions_rebuild_triples() {
        let text = r#"[{"interval":[0,3,0],"duration":60000,"throughut-opt":[1,3],"liveput-truth":[1,3],"liveput-predict":[1,3]},
                       {"interval":[3,1,2],"duration":60000,"throughut-opt":[1,2],"liveput-truth":[1,2],"liveput-predict":[2,1]}]"#;
        let t = parse(text, None).unwrap();
        assert_eq!(t.end_ms(), 120_000);
        let s = t.series(60_000).unwrap();
        assert_eq!(s.instances_before(1), 3);
        assert_eq!(
            (s.intervals[1].arrivals, s.intervals[1].preemptions, s.intervals[1].instances),
            (1, 2, 2)
        );
        let r = t.reference().unwrap();
        assert_eq!(r[1].start_ms, 60_000);
        assert_eq!(r[1].liveput_predict, Strategy { data_parallel: 2, pipeline_stages: 1 });
        // LIFO with removals first: n2 and n3 leave, n4 arrives.
        let lifetimes = t.lifetimes();
        assert_eq!(lifetimes.iter().filter(|l| l.censored).count(), 2);
        assert!(lifetimes.iter().all(|l| l.duration_ms > 0));
    }

    #[test]
    fn segments_keep_decisions_and_migrations() {
        let text = "[0, \"add\", {\"nodes\": [\"a\", \"b\"], \"duration\": 60000, \"throughput_opt_strategy\": [2, 1], \"liveput_truth_strategy\": [2, 1], \"liveput_predict_strategy\": [1, 2]}]\n\
                    [60000, \"migration\", {\"nodes\": [], \"duration\": 60000, \"throughput_opt_strategy\": [1, 2], \"liveput_truth_strategy\": [1, 2], \"liveput_predict_strategy\": [1, 2]}]\n\
                    [120000, \"remove\", {\"nodes\": [\"a\"], \"duration\": 60000, \"throughput_opt_strategy\": [1, 1], \"liveput_truth_strategy\": [1, 1], \"liveput_predict_strategy\": [1, 1]}]\n";
        let t = parse(text, None).unwrap();
        assert_eq!(t.format(), Format::SegmentsJsonl);
        assert!(!t.node_ids_inferred());
        assert_eq!(t.end_ms(), 180_000);
        let r = t.reference().unwrap();
        assert_eq!(r.len(), 3);
        assert!(r[1].migration && !r[0].migration);
        assert_eq!(t.series(60_000).unwrap().len(), 3);
    }

    #[test]
    fn boundary_events_open_their_interval() {
        let t = parse("0,add,a\n59999,add,b\n60000,remove,a\n120000,add,c\n", None).unwrap();
        let s = t.series(60_000).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.intervals[0], crate::IntervalStats { instances: 2, arrivals: 2, preemptions: 0 });
        assert_eq!(s.intervals[1], crate::IntervalStats { instances: 1, arrivals: 0, preemptions: 1 });
        assert_eq!(s.intervals[2], crate::IntervalStats { instances: 2, arrivals: 1, preemptions: 0 });
    }

    #[test]
    fn an_instance_that_comes_and_goes_within_an_interval_preempts_nothing() {
        // c joins and leaves within the first minute, before any boundary: it
        // cancels against the arrivals instead of preempting an instance the
        // interval did not start with (a cost model would reject 1 preemption
        // of 0 instances). Within the second minute, d comes and goes while
        // a and b were there: one preemption and one arrival, as before.
        let text = "0,add,a\n0,add,b\n10000,add,c\n20000,remove,c\n70000,add,d\n80000,remove,d\n";
        let t = parse(text, None).unwrap();
        let s = t.series(60_000).unwrap();
        assert_eq!(s.intervals[0], crate::IntervalStats { instances: 2, arrivals: 2, preemptions: 0 });
        assert_eq!(s.intervals[1], crate::IntervalStats { instances: 2, arrivals: 1, preemptions: 1 });
        // Three come, all three go, from an empty fleet.
        let t = parse("0,add,a\n1,add,b\n2,add,c\n3,remove,a\n4,remove,b\n5,remove,c\n", None).unwrap();
        assert_eq!(t.series(60_000).unwrap().intervals[0], crate::IntervalStats::default());
    }
}
