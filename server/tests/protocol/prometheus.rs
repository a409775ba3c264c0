//! A Prometheus text parser for `GET /metrics`, kept with the tests so they
//! read the metrics as served, raw, and depend on no client helper for them.

/// One sample of the Prometheus text format.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

/// `GET /metrics`, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// The text as served.
    pub text: String,
    /// Every sample line.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// Parses the Prometheus text exposition format (version 0.0.4):
    /// `# HELP`/`# TYPE`/comment lines, and `name{label="value",...} value
    /// [timestamp]` sample lines.
    ///
    /// # Errors
    /// The first line that is not in the format.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut samples = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let sample =
                parse_sample(line).map_err(|e| format!("line {}: {e}: {line:?}", number + 1))?;
            samples.push(sample);
        }
        Ok(Self {
            text: text.to_owned(),
            samples,
        })
    }

    /// The value of `name` with (at least) these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|s| s.value)
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let close;
        loop {
            while chars
                .next_if(|(_, c)| c.is_whitespace() || *c == ',')
                .is_some()
            {}
            let Some(&(start, c)) = chars.peek() else {
                return Err("unterminated labels".into());
            };
            if c == '}' {
                close = start;
                break;
            }
            let mut key_end = start;
            while let Some((i, c)) = chars.next_if(|(_, c)| *c != '=') {
                key_end = i + c.len_utf8();
            }
            let key = after[start..key_end].trim();
            if !is_metric_name(key) || chars.next().map(|(_, c)| c) != Some('=') {
                return Err(format!("bad label name {key:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value must be quoted".into());
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        _ => return Err("bad escape in label value".into()),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value".into()),
                }
            }
            labels.push((key.to_owned(), value));
        }
        rest = &after[close + 1..];
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        other => other
            .parse::<f64>()
            .map_err(|_| format!("bad value {other:?}"))?,
    };
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

#[test]
fn prometheus_text_parses() {
    let metrics = Metrics::parse(
        "# HELP x y\n# TYPE a_total counter\na_total 3\nb{reason=\"gap_not_covered\",x=\"q\\\"\"} 2.5 123\nc +Inf\n",
    )
    .unwrap();
    assert_eq!(metrics.samples.len(), 3);
    assert_eq!(
        metrics.value("b", &[("reason", "gap_not_covered")]),
        Some(2.5)
    );
    assert_eq!(metrics.samples[1].labels[1].1, "q\"");
    assert!(Metrics::parse("a b c d\n").is_err());
    assert!(Metrics::parse("9a 1\n").is_err());
}
