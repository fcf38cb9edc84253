//! A strict reader of the Prometheus text format (0.0.4), for the metrics tests: every sample
//! belongs to a family announced by `# HELP` and `# TYPE` before it, families do not repeat
//! or interleave, counters end in `_total`, and histograms have cumulative buckets ending in
//! `+Inf`, with `_sum` and `_count`.

#![allow(dead_code)]
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct Sample {
    /// The series name (a histogram's `_bucket`, `_sum`, `_count` included).
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

#[derive(Debug, Default)]
pub struct MetricFamily {
    pub help: String,
    pub kind: String,
    pub samples: Vec<Sample>,
}

/// The families of `text`, by name; panics (naming the line) where the text breaks a rule.
pub fn parse(text: &str) -> BTreeMap<String, MetricFamily> {
    let mut families: BTreeMap<String, MetricFamily> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut pending_help: Option<(String, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let at = || format!("line {}: {line}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(!families.contains_key(name), "family repeated: {}", at());
            pending_help = Some((name.to_string(), help.to_string()));
            current = None;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a type");
            let (help_name, help) = pending_help.take().unwrap_or_else(|| {
                panic!("TYPE without HELP before it: {}", at());
            });
            assert_eq!(help_name, name, "HELP and TYPE name differ: {}", at());
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "unknown type: {}",
                at()
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counter without _total: {}", at());
            }
            families.insert(
                name.to_string(),
                MetricFamily {
                    help,
                    kind: kind.to_string(),
                    samples: Vec::new(),
                },
            );
            current = Some(name.to_string());
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else {
            let sample = parse_sample(line).unwrap_or_else(|| panic!("bad sample: {}", at()));
            let family_name = current
                .clone()
                .unwrap_or_else(|| panic!("sample outside a family: {}", at()));
            let family = families.get_mut(&family_name).unwrap();
            let allowed: Vec<String> = if family.kind == "histogram" {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{family_name}{s}"))
                    .collect()
            } else {
                vec![family_name.clone()]
            };
            assert!(
                allowed.contains(&sample.name),
                "sample not of family {family_name}: {}",
                at()
            );
            family.samples.push(sample);
        }
    }
    for (name, family) in &families {
        if family.kind == "histogram" {
            check_histogram(name, family);
        }
    }
    families
}

fn check_histogram(name: &str, family: &MetricFamily) {
    let without_le = |s: &Sample| -> Vec<(String, String)> {
        s.labels
            .iter()
            .filter(|(k, _)| k != "le")
            .cloned()
            .collect()
    };
    let mut series: BTreeMap<Vec<(String, String)>, Vec<&Sample>> = BTreeMap::new();
    for s in &family.samples {
        series.entry(without_le(s)).or_default().push(s);
    }
    for (labels, samples) in series {
        let buckets: Vec<&&Sample> = samples
            .iter()
            .filter(|s| s.name.ends_with("_bucket"))
            .collect();
        assert!(!buckets.is_empty(), "{name}{labels:?}: no buckets");
        let mut last = 0.0;
        let mut last_le = f64::NEG_INFINITY;
        for b in &buckets {
            let le = &b.labels.iter().find(|(k, _)| k == "le").expect("le").1;
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le is a number")
            };
            assert!(le > last_le, "{name}{labels:?}: buckets out of order");
            assert!(b.value >= last, "{name}{labels:?}: buckets not cumulative");
            last = b.value;
            last_le = le;
        }
        assert_eq!(last_le, f64::INFINITY, "{name}{labels:?}: no +Inf bucket");
        let count = samples
            .iter()
            .find(|s| s.name == format!("{name}_count"))
            .unwrap_or_else(|| panic!("{name}{labels:?}: no _count"));
        assert_eq!(count.value, last, "{name}{labels:?}: _count is not +Inf");
        assert!(
            samples.iter().any(|s| s.name == format!("{name}_sum")),
            "{name}{labels:?}: no _sum"
        );
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let mut key = String::new();
        loop {
            let (i, c) = chars.next()?;
            match c {
                '}' if key.is_empty() => {
                    rest = &inner[i + 1..];
                    break;
                }
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            '"' => break,
                            other => value.push(other),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                    match chars.peek()?.1 {
                        ',' => {
                            chars.next();
                        }
                        '}' => {}
                        _ => return None,
                    }
                }
                c if c.is_ascii_alphanumeric() || c == '_' => key.push(c),
                _ => return None,
            }
        }
    }
    let value = rest.strip_prefix(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The value of the one sample of `name` whose labels include `labels`.
pub fn value(
    families: &BTreeMap<String, MetricFamily>,
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    let matching: Vec<&Sample> = families
        .values()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{name}{labels:?}: expected one sample, found {matching:?}"
    );
    matching[0].value
}
