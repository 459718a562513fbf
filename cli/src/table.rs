//! Aligned tables and time formatting.

use comfy_table::presets::NOTHING;

/// An aligned table with a header row.
pub struct Table(comfy_table::Table);

impl Table {
    /// A table with these column names.
    pub fn new<const N: usize>(header: [&str; N]) -> Self {
        Self::with_shard(false, &header)
    }

    /// Add a row.
    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.0.add_row(cells.to_vec());
    }

    /// A table with these column names, after a `SHARD` column if `shard`
    /// (a listing merged over a shard set).
    pub fn with_shard(shard: bool, header: &[&str]) -> Self {
        let mut names = Vec::with_capacity(header.len() + 1);
        if shard {
            names.push("SHARD");
        }
        names.extend_from_slice(header);
        let mut t = comfy_table::Table::new();
        t.load_preset(NOTHING).set_header(names);
        Self(t)
    }

    /// Add a row of a [`Table::with_shard`] table: `shard` first when the
    /// row has one.
    pub fn shard_row<const N: usize>(&mut self, shard: Option<usize>, cells: [String; N]) {
        let mut row = Vec::with_capacity(N + 1);
        if let Some(s) = shard {
            row.push(s.to_string());
        }
        row.extend(cells);
        self.0.add_row(row);
    }

    /// The table as text, without trailing spaces.
    pub fn render(&self) -> String {
        self.0
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

pub use gaffer_ops::format::{age, time_ms as time};
