//! Bordered tables in the spirit of the MRDS CLI (seed 000): a header row,
//! `+---+` borders, multi-line cells, and a `Total: N` line under the table.

/// A table being built row by row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<I, S>(headers: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells are blank, extra cells are dropped.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut cells: Vec<String> = cells
            .into_iter()
            .map(|cell| wrap(&cell.into(), MAX_CELL_WIDTH))
            .collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders the table and its `Total:` line; an empty table renders as `empty`.
    pub fn render(&self, empty: &str) -> String {
        if self.rows.is_empty() {
            return format!("{empty}\n");
        }
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (column, cell) in row.iter().enumerate() {
                for line in cell.lines() {
                    widths[column] = widths[column].max(width(line));
                }
            }
        }
        let border: String = widths
            .iter()
            .map(|w| format!("+{}", "-".repeat(w + 2)))
            .collect::<String>()
            + "+\n";
        let mut out = border.clone();
        out.push_str(&line(&self.headers, &widths, true));
        out.push_str(&border);
        for row in &self.rows {
            let height = row
                .iter()
                .map(|cell| cell.lines().count())
                .max()
                .unwrap_or(1);
            for index in 0..height.max(1) {
                let cells: Vec<String> = row
                    .iter()
                    .map(|cell| cell.lines().nth(index).unwrap_or_default().to_owned())
                    .collect();
                out.push_str(&line(&cells, &widths, false));
            }
        }
        out.push_str(&border);
        out.push_str(&format!("Total: {}\n", self.rows.len()));
        out
    }
}

/// Cells wider than this are wrapped at spaces, so that long messages stay readable.
pub const MAX_CELL_WIDTH: usize = 72;

/// Wraps every line of `text` at spaces to at most `limit` characters (a
/// single longer word stays whole).
pub fn wrap(text: &str, limit: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut current = String::new();
        for word in line.split(' ') {
            if !current.is_empty() && width(&current) + 1 + width(word) > limit {
                out.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
        }
        out.push(current);
    }
    out.join("\n")
}

fn width(text: &str) -> usize {
    text.chars().count()
}

fn line(cells: &[String], widths: &[usize], centered: bool) -> String {
    let mut out = String::new();
    for (cell, &column_width) in cells.iter().zip(widths) {
        let pad = column_width - width(cell);
        let (left, right) = if centered {
            (pad / 2, pad - pad / 2)
        } else {
            (0, pad)
        };
        out.push_str(&format!(
            "| {}{cell}{} ",
            " ".repeat(left),
            " ".repeat(right)
        ));
    }
    out.push_str("|\n");
    out
}

/// `Key:  value` lines with the values aligned, as in MRDS's "Info" blocks.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let key_width = pairs.iter().map(|(key, _)| width(key)).max().unwrap_or(0) + 1;
    pairs
        .iter()
        .map(|(key, value)| format!("{:<key_width$}  {value}\n", format!("{key}:")))
        .collect()
}

/// The first `n` characters of a hash after its `sha256:` prefix.
pub fn short_hash(hash: &str) -> String {
    hash.strip_prefix("sha256:")
        .unwrap_or(hash)
        .chars()
        .take(12)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_borders_centered_headers_and_a_total() {
        let mut table = Table::new(["Member", "Jobs"]);
        table.row(["worker-0", "14"]);
        table.row(["worker-10", "3"]);
        assert_eq!(
            table.render("none"),
            "+-----------+------+\n\
             |  Member   | Jobs |\n\
             +-----------+------+\n\
             | worker-0  | 14   |\n\
             | worker-10 | 3    |\n\
             +-----------+------+\n\
             Total: 2\n"
        );
    }

    #[test]
    fn multi_line_cells_span_several_lines_of_one_row() {
        let mut table = Table::new(["Pod", "Jobs"]);
        table.row(["w-0", "a\nbb"]);
        let text = table.render("none");
        assert!(text.contains("| w-0 | a    |\n|     | bb   |\n"), "{text}");
    }

    #[test]
    fn long_cells_wrap_at_spaces() {
        assert_eq!(wrap("aaa bbb ccc", 7), "aaa bbb\nccc");
        assert_eq!(
            wrap("averyveryverylongword x", 5),
            "averyveryverylongword\nx"
        );
        assert_eq!(wrap("short", 72), "short");
    }

    #[test]
    fn an_empty_table_renders_its_empty_message() {
        assert_eq!(Table::new(["x"]).render("No rows"), "No rows\n");
    }

    #[test]
    fn short_hashes_drop_the_prefix() {
        assert_eq!(short_hash("sha256:0123456789abcdef"), "0123456789ab");
    }
}
