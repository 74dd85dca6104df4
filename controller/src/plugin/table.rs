//! Bordered tables in the spirit of the MRDS CLI (seed 000): a header row,
//! `+---+` borders, multi-line cells, and a `Total: N` line under the table.
//! By default a table fits [`MAX_TABLE_WIDTH`] columns: its columns marked
//! [`Table::wide_only`] are left out and its widest cells are wrapped at spaces;
//! `-o wide` shows every column at its full width, as `kubectl get -o wide` does.
//!
//! Hand-written rather than comfy-table or tabled: those would change every
//! table's look (centered headers, `Total:`) that users and tests read, for ~100 lines saved.

/// The width a default (not `-o wide`) table fits in, in characters.
pub const MAX_TABLE_WIDTH: usize = 120;

/// The narrowest a column is wrapped to when fitting a table.
const MIN_FITTED_WIDTH: usize = 12;

/// Words longer than this (hashes, annotation values in messages) are split across lines
/// when fitting a table; shorter ones (names, user names, ids a user copies) never are.
const LONG_WORD: usize = 64;

/// A table being built row by row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Per column: shown only with `-o wide`.
    wide_only: Vec<bool>,
    /// Rendered for `-o wide`: every column, nothing narrowed.
    wide: bool,
}

impl Table {
    /// A table with these column headers.
    pub fn new<I, S>(headers: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let headers: Vec<String> = headers.into_iter().map(Into::into).collect();
        Table {
            wide_only: vec![false; headers.len()],
            headers,
            rows: Vec::new(),
            wide: false,
        }
    }

    /// Marks `columns` (by header) as shown only when `wide` (`-o wide`); a wide table
    /// also keeps every cell at its full width.
    pub fn wide_only(mut self, columns: &[&str], wide: bool) -> Table {
        for (header, hidden) in self.headers.iter().zip(&mut self.wide_only) {
            *hidden = columns.contains(&header.as_str());
        }
        self.wide = wide;
        self
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
        let shown: Vec<usize> = (0..self.headers.len())
            .filter(|column| self.wide || !self.wide_only[*column])
            .collect();
        let pick = |cells: &[String]| -> Vec<String> {
            shown.iter().map(|column| cells[*column].clone()).collect()
        };
        let mut headers = pick(&self.headers);
        let mut rows: Vec<Vec<String>> = self.rows.iter().map(|row| pick(row)).collect();
        if !self.wide {
            fit(&mut headers, &mut rows, MAX_TABLE_WIDTH);
        }
        let widths = column_widths(&headers, &rows);
        let border: String = widths
            .iter()
            .map(|w| format!("+{}", "-".repeat(w + 2)))
            .collect::<String>()
            + "+\n";
        let mut out = border.clone();
        push_row(&mut out, &headers, &widths, true);
        out.push_str(&border);
        for row in &rows {
            push_row(&mut out, row, &widths, false);
        }
        out.push_str(&border);
        out.push_str(&format!("Total: {}\n", self.rows.len()));
        out
    }
}

/// One row, as many lines as its tallest cell.
fn push_row(out: &mut String, row: &[String], widths: &[usize], centered: bool) {
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
        out.push_str(&line(&cells, widths, centered));
    }
}

/// Each column's width: its widest header or cell line's.
fn column_widths(headers: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths = vec![0; headers.len()];
    for row in std::iter::once(headers).chain(rows.iter().map(Vec::as_slice)) {
        for (column, cell) in row.iter().enumerate() {
            for line in cell.lines() {
                widths[column] = widths[column].max(width(line));
            }
        }
    }
    widths
}

/// Wraps the widest columns' headers and cells at spaces until the table fits `limit`
/// characters (borders included), or no column can be narrowed further (a word is
/// never cut).
fn fit(headers: &mut [String], rows: &mut [Vec<String>], limit: usize) {
    let mut fixed = vec![false; headers.len()];
    loop {
        let widths = column_widths(headers, rows);
        let total: usize = widths.iter().map(|w| w + 3).sum::<usize>() + 1;
        let widest = (0..widths.len())
            .filter(|column| !fixed[*column])
            .max_by_key(|column| widths[*column]);
        let Some(column) = widest.filter(|_| total > limit) else {
            return;
        };
        let longest_word = headers[column].split(' ').map(width).max().unwrap_or(0);
        let floor = MIN_FITTED_WIDTH.min(widths[column]).max(longest_word);
        let target = widths[column].saturating_sub(total - limit).max(floor);
        headers[column] = wrap(&headers[column], target);
        for row in rows.iter_mut() {
            row[column] = wrap(&split_long_words(&row[column], target), target);
        }
        if column_widths(headers, rows)[column] >= widths[column] || target == floor {
            fixed[column] = true;
        }
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

/// Puts each word longer than [`LONG_WORD`] and `limit` on lines of `limit` characters
/// of its own.
fn split_long_words(text: &str, limit: usize) -> String {
    let split = |word: &str| -> String {
        if width(word) <= LONG_WORD.max(limit) {
            return word.to_owned();
        }
        let chars: Vec<char> = word.chars().collect();
        let pieces: Vec<String> = chars.chunks(limit.max(1)).map(String::from_iter).collect();
        format!("\n{}\n", pieces.join("\n"))
    };
    let lines: Vec<String> = text
        .lines()
        .map(|line| line.split(' ').map(split).collect::<Vec<_>>().join(" "))
        .collect();
    let joined = lines.join("\n");
    // Lines the splitting left empty or padded carry no text.
    joined
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
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

    fn widest_line(text: &str) -> usize {
        text.lines().map(width).max().unwrap_or(0)
    }

    #[test]
    fn a_table_fits_120_columns_by_wrapping_its_widest_cells_and_wide_keeps_them_whole() {
        let message = "a long message that says in many words what happened and why ".repeat(3);
        let build = |wide: bool| {
            let mut table =
                Table::new(["Operation", "Hash", "Message", "Detail"]).wide_only(&["Hash"], wide);
            table.row(["create-web-0-r1-1", "0123456789ab", &message, &message]);
            table.render("none")
        };
        let narrow = build(false);
        assert!(widest_line(&narrow) <= MAX_TABLE_WIDTH, "{narrow}");
        assert!(!narrow.contains("Hash"), "{narrow}");
        assert!(narrow.contains("create-web-0-r1-1"), "{narrow}");
        let wide = build(true);
        assert!(wide.contains(" Hash "), "{wide}");
        assert!(widest_line(&wide) > MAX_TABLE_WIDTH, "{wide}");
    }

    #[test]
    fn only_words_longer_than_64_characters_are_split_to_fit() {
        let mut table = Table::new(["Id", "Message"]);
        let id = "system:serviceaccount:shoal-test-g8w5pu93:alice-the-approver";
        table.row([id.to_owned(), format!("approve with {}", "x".repeat(200))]);
        let text = table.render("none");
        assert!(widest_line(&text) <= MAX_TABLE_WIDTH, "{text}");
        assert!(text.contains(id), "{text}");
        assert!(!text.contains(&"x".repeat(200)), "{text}");
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
