//! The chart's values table, on the book's reference page `docs/src/reference/values.md`,
//! generated from `values.yaml` so the two cannot drift
//! (`chart::values::the_chart_readme_values_table_is_generated_from_values_yaml` compares them;
//! `HOLDFAST_BLESS=1` on that test rewrites the table).
//!
//! The comments are the documentation: a `# --` comment (continued by the `#` lines under
//! it) describes the key on the next line, and that key is one row whose default is its whole
//! value. Every other key with a scalar or flow value (`[]`, `{}`) is a row without a
//! description; a key whose value is a block is only a path to the keys under it. A plain `#`
//! comment (no `--`) describes nothing in the table.

use anyhow::{Context, bail};
use serde_json::Value;

/// Where the generated table sits on the values page.
pub const BEGIN: &str = "<!-- values-table:begin (generated from values.yaml; do not edit) -->";
pub const END: &str = "<!-- values-table:end -->";

/// One row: the key's dotted path, its default (compact JSON), and its description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: String,
    pub default: String,
    pub description: String,
}

/// The rows of `values_yaml`, in file order.
pub fn rows(values_yaml: &str) -> anyhow::Result<Vec<Row>> {
    let values: Value = serde_saphyr::from_str(values_yaml).context("values.yaml")?;
    let mut rows = Vec::new();
    // The open keys above the current line: (indentation, name).
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut doc: Option<String> = None;
    // A documented key's indentation: the keys under it are part of its row.
    let mut inside: Option<usize> = None;
    for line in values_yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(comment) = text.strip_prefix('#') {
            let comment = comment.trim();
            match (comment.strip_prefix("--"), doc.as_mut()) {
                (Some(start), _) => doc = Some(start.trim().to_owned()),
                (None, Some(d)) if !comment.is_empty() => {
                    d.push(' ');
                    d.push_str(comment);
                }
                _ => {}
            }
            continue;
        }
        if text.starts_with("- ") || text == "-" {
            continue;
        }
        let Some((name, rest)) = text.split_once(':') else {
            bail!("values.yaml: cannot read the line {line:?}");
        };
        if let Some(level) = inside {
            if indent > level {
                continue;
            }
            inside = None;
        }
        path.retain(|(i, _)| *i < indent);
        path.push((indent, name.trim().to_owned()));
        let key: Vec<&str> = path.iter().map(|(_, n)| n.as_str()).collect();
        let block = rest.trim().is_empty();
        let description = doc.take();
        if block && description.is_none() {
            continue;
        }
        if block {
            inside = Some(indent);
        }
        let value = key
            .iter()
            .try_fold(&values, |v, k| v.get(*k))
            .with_context(|| format!("values.yaml: {} not found", key.join(".")))?;
        rows.push(Row {
            key: key.join("."),
            default: serde_json::to_string(value)?,
            description: description.unwrap_or_default(),
        });
    }
    Ok(rows)
}

/// The rows as the values page's markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("| key | default | description |\n| --- | --- | --- |\n");
    for r in rows {
        out.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            r.key,
            cell(&r.default),
            cell(&r.description)
        ));
    }
    out
}

/// `readme` with the text between [`BEGIN`] and [`END`] replaced by `table`.
pub fn replace(readme: &str, table: &str) -> anyhow::Result<String> {
    let start = readme.find(BEGIN).context("no values-table begin marker")? + BEGIN.len();
    let end = readme.find(END).context("no values-table end marker")?;
    if end < start {
        bail!("the values-table markers are out of order");
    }
    Ok(format!("{}\n{table}{}", &readme[..start], &readme[end..]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const VALUES: &str = r#"# A heading comment, not a row.
# -- The mode.
mode: plain

image:
  # -- Where from.
  # Continued here.
  repository: x/y
  tag: ""
limits:
  # -- The whole block is one row.
  probe:
    httpGet: {path: /livez}
    periodSeconds: 5
  list:
    - a
    - b
after: 1
"#;

    #[test]
    fn documented_keys_are_one_row_each_and_undocumented_scalars_rows_without_text() {
        let rows = rows(VALUES).unwrap();
        let keys: Vec<(&str, &str, &str)> = rows
            .iter()
            .map(|r| (r.key.as_str(), r.default.as_str(), r.description.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("mode", "\"plain\"", "The mode."),
                ("image.repository", "\"x/y\"", "Where from. Continued here."),
                ("image.tag", "\"\"", ""),
                (
                    "limits.probe",
                    r#"{"httpGet":{"path":"/livez"},"periodSeconds":5}"#,
                    "The whole block is one row."
                ),
                ("after", "1", ""),
            ]
        );
    }

    #[test]
    fn the_table_replaces_only_what_lies_between_the_markers() {
        let readme = format!("before\n{BEGIN}\nold\n{END}\nafter\n");
        let table = markdown(&rows("# -- a|b\nx: 1\n").unwrap());
        let new = replace(&readme, &table).unwrap();
        assert_eq!(
            new,
            format!(
                "before\n{BEGIN}\n| key | default | description |\n| --- | --- | --- |\n| `x` | `1` | a\\|b |\n{END}\nafter\n"
            )
        );
        assert!(replace("no markers", &table).is_err());
    }
}
